package daemon

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A large READ is sent from the media's own bytes when no page of it is
// dirty in the owner's cache, and through the cache when one is: either
// way it reads what was acknowledged. The sequence: 1 MiB written and
// flushed (clean pages, equal to the media), the array restarted (an
// empty cache: the read is lent), one page rewritten (dirty: the read is
// copied, with the new page), the cache flushed again (lent again), and
// reads at the end of the LUN.
func TestLargeReadsLentOrCopied(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pattern := make([]byte, 1<<20)
	for i := range pattern {
		pattern[i] = byte(i*7 + i>>12)
	}
	d := start(t, cfg)
	s := dial(t, d, 0, 1, "iqn.2026-11.org.example:lent")
	s.ClearUA(ctx, 0, 8)
	require.NoError(t, s.Write16(ctx, 0, 2048, pattern, 512, false))
	require.NoError(t, s.SyncCache(ctx, 0))
	s.Close()
	require.NoError(t, d.Stop(5*time.Second))

	d = start(t, cfg)
	defer d.Stop(5 * time.Second)
	s = dial(t, d, 0, 1, "iqn.2026-11.org.example:lent")
	defer s.Close()
	s.ClearUA(ctx, 0, 8)
	read := func(lba uint64, n uint32) []byte {
		t.Helper()
		got, err := s.Read16(ctx, 0, lba, n, 512)
		require.NoError(t, err)
		return got
	}
	require.True(t, bytes.Equal(pattern, read(2048, 2048)), "lent from an empty cache")

	page := bytes.Repeat([]byte{0xee}, 4096)
	require.NoError(t, s.Write16(ctx, 0, 2048+256*8, page, 512, false)) // dirty, not flushed
	want := append([]byte(nil), pattern...)
	copy(want[256*4096:], page)
	require.True(t, bytes.Equal(want, read(2048, 2048)), "copied through a dirty page")

	require.NoError(t, s.SyncCache(ctx, 0))
	require.True(t, bytes.Equal(want, read(2048, 2048)), "lent once the page is clean")

	blocks := uint64(cfg.LUNs[0].Size) / 512
	require.Equal(t, make([]byte, 1<<20), read(blocks-2048, 2048), "the last MiB, never written")
	_, err := s.Read16(ctx, 0, blocks-1024, 2048, 512)
	require.Error(t, err, "a read past the end is refused, not lent")
}
