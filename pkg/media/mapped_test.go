package media

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Reads come from the file's mapping; what WriteAt, Punch and a write by
// another opener of the file leave there is what they read, and a read
// after Close is an error, not a fault.
func TestMappedReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lun0.img")
	const size = 4 << 20
	f, err := OpenFile(path, size)
	require.NoError(t, err)
	require.NotNil(t, f.mapped, "the file is mapped")
	got := make([]byte, 8192)
	require.NoError(t, f.ReadAt(got, 1<<20))
	assert.Equal(t, make([]byte, 8192), got, "a hole reads as zeros")

	data := bytes.Repeat([]byte{0xa5}, 8192)
	require.NoError(t, f.WriteAt(data, 1<<20))
	require.NoError(t, f.ReadAt(got, 1<<20))
	assert.Equal(t, data, got, "a write is read back through the mapping")

	other, err := OpenFile(path, size) // another opener: the same page cache
	require.NoError(t, err)
	require.NoError(t, other.WriteAt(bytes.Repeat([]byte{0x3c}, 4096), 1<<20))
	require.NoError(t, other.Close())
	require.NoError(t, f.ReadAt(got[:4096], 1<<20))
	assert.Equal(t, bytes.Repeat([]byte{0x3c}, 4096), got[:4096])

	require.NoError(t, f.Punch(0, 2<<20))
	require.NoError(t, f.ReadAt(got, 1<<20))
	assert.Equal(t, make([]byte, 8192), got, "a punched range reads as zeros")
	require.NoError(t, f.DropCache())

	assert.ErrorIs(t, f.ReadAt(got, size-4096), ErrRange)
	require.NoError(t, f.Close())
	assert.Error(t, f.ReadAt(got, 0), "a read after Close fails cleanly")
}

// Without a timerfd the clock falls back to a spinning goroutine, which
// wakes every wait no sooner than asked and stops when none is left.
func TestClockWithoutTimerfd(t *testing.T) {
	c := &clock{fd: -1}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Now().Add(time.Duration(20+i*5) * time.Microsecond)
			<-c.add(at)
			assert.False(t, time.Now().Before(at))
		}()
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.False(t, c.running)
	assert.Zero(t, c.waits.Len())
}

// The clock's heap hands out waits in deadline order.
func TestWaitHeapOrder(t *testing.T) {
	var h waitHeap
	base := time.Now()
	for _, d := range []int{5, 1, 9, 3, 7, 2, 8, 0, 6, 4} {
		h.push(wait{at: base.Add(time.Duration(d))})
	}
	for want := 0; want < 10; want++ {
		require.Equal(t, base.Add(time.Duration(want)), h.pop().at)
	}
	assert.Zero(t, h.Len())
}
