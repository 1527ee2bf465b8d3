package cache

import (
	"bytes"
	"testing"

	"github.com/aluad/aluad/pkg/media"
	"github.com/stretchr/testify/require"
)

// readingPunch is a store whose punch is preceded by a read of the same
// range through the cache: a READ that misses after the UNMAP dropped
// its pages but before the media is punched.
type readingPunch struct {
	media.Store
	c *Cache
}

func (r *readingPunch) Punch(off, n int64) error {
	buf := make([]byte, n)
	if err := r.c.ReadAt(1, buf, off); err != nil {
		return err
	}
	return r.Store.Punch(off, n)
}

// A read racing an UNMAP may return the old data, but must not leave it
// in the cache as a clean page: the next reads would return it (and a
// large read, lent from the media, would not: the two paths disagree).
func TestUnmapRacingReadLeavesNoStalePage(t *testing.T) {
	c := New("a", Config{Mode: WriteBack})
	st := media.NewMem(lunSize)
	c.Attach(1, &readingPunch{Store: st, c: c})
	old := bytes.Repeat([]byte{0xaa}, 8192)
	require.NoError(t, st.WriteAt(old, 0)) // on media, not cached
	require.NoError(t, c.Unmap(1, 0, 8192))
	got := make([]byte, 8192)
	require.NoError(t, c.ReadAt(1, got, 0))
	require.Equal(t, make([]byte, 8192), got, "an unmapped range reads as zeros")
}
