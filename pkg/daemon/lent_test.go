package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/initiator"

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

// A LUN file cut short under the array (another process truncating it)
// faults the pages a read touches. Go code never touches lent bytes: a
// VERIFY, or a READ whose data a digest covers, is answered MEDIUM ERROR
// as before lending; a lent READ's socket write fails (the kernel cannot
// bring the page in) and ends that connection; the array serves on and
// stops cleanly (no loan is left).
func TestLentReadsOfAShortFile(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := start(t, cfg)
	s := dial(t, d, 0, 1, "iqn.2026-11.org.example:short")
	s.ClearUA(ctx, 0, 8)
	require.NoError(t, s.Write16(ctx, 0, 0, bytes.Repeat([]byte{7}, 1<<20), 512, false))
	require.NoError(t, s.SyncCache(ctx, 0))
	s.Close()
	require.NoError(t, d.Stop(5*time.Second))

	d = start(t, cfg)
	require.NoError(t, os.Truncate(filepath.Join(dir, "lun0.img"), 0))
	medium := func(err error, what string) {
		t.Helper()
		var ce *initiator.CheckError
		require.ErrorAs(t, err, &ce, what)
		k, _, _ := ce.KeyASC()
		require.Equal(t, byte(3), k, "%s: MEDIUM ERROR", what)
	}

	s = dial(t, d, 0, 1, "iqn.2026-11.org.example:short")
	s.ClearUA(ctx, 0, 8)
	cdb := make([]byte, 16)
	cdb[0], cdb[1] = 0x8f, 0x02 // VERIFY(16), BYTCHK 01b
	binary.BigEndian.PutUint32(cdb[10:], 128)
	_, err := initiatorGood(s.Execute(ctx, 0, cdb, bytes.Repeat([]byte{7}, 64<<10), 0))
	medium(err, "VERIFY of a cut file")
	s.Close()

	p := d.Portals()[0]
	sd, err := initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Target: p.Target, InitiatorName: "iqn.2026-11.org.example:digest",
		DataDigest: true})
	require.NoError(t, err)
	sd.ClearUA(ctx, 0, 8)
	_, err = sd.Read16(ctx, 0, 0, 128, 512)
	medium(err, "READ with a data digest")
	sd.Close()

	sl := dial(t, d, 0, 2, "iqn.2026-11.org.example:lent")
	sl.ClearUA(ctx, 0, 8)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = sl.Read16(rctx, 0, 0, 128, 512)
	rcancel()
	require.Error(t, err, "the lent READ's connection ends")
	sl.Close()

	s = dial(t, d, 0, 3, "iqn.2026-11.org.example:after")
	s.ClearUA(ctx, 0, 8)
	require.NoError(t, s.TestUnitReady(ctx, 0), "the array serves on")
	s.Close()
	require.NoError(t, d.Stop(5*time.Second), "no loan is left to hold the media open")
}

func initiatorGood(r *initiator.Result, err error) (*initiator.Result, error) {
	if err != nil {
		return nil, err
	}
	if r.Status != 0 {
		return r, &initiator.CheckError{Status: r.Status, Sense: r.Sense}
	}
	return r, nil
}
