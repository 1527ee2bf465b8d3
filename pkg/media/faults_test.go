package media

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An injected fault fails exactly the operation it names, leaves the store
// untouched, and every operation waits the injected delay.
func TestWithFaults(t *testing.T) {
	tests := []struct {
		fail      Op
		wantWrite bool // the write reached the store
	}{
		{OpRead, true}, {OpWrite, false}, {OpPunch, true}, {OpSync, true},
	}
	for _, tc := range tests {
		t.Run(tc.fail.String(), func(t *testing.T) {
			mem := NewMem(8192)
			var sw Switch
			var slept time.Duration
			s := WithFaults(mem, &sw, func(d time.Duration) { slept += d })
			sw.Fail(tc.fail, true)
			sw.Delay(time.Millisecond)
			errs := map[Op]error{
				OpWrite: s.WriteAt([]byte{1, 2, 3}, 0),
				OpRead:  s.ReadAt(make([]byte, 3), 0),
				OpPunch: s.Punch(4096, 4096),
				OpSync:  s.Sync(),
			}
			for op, err := range errs {
				if op == tc.fail {
					require.ErrorIs(t, err, ErrInjected, op.String())
				} else {
					require.NoError(t, err, op.String())
				}
			}
			require.Equal(t, 4*time.Millisecond, slept)
			got := make([]byte, 3)
			require.NoError(t, mem.ReadAt(got, 0))
			if tc.wantWrite {
				require.Equal(t, []byte{1, 2, 3}, got)
			} else {
				require.Equal(t, []byte{0, 0, 0}, got)
			}
			sw.Fail(tc.fail, false)
			require.NoError(t, s.WriteAt([]byte{9}, 0), "the fault is cleared")
		})
	}
}

// A wrapped file still lends its bytes without a copy while no read
// fault is set; with a delay or a failure on reads it does not (the read
// goes through ReadAt and meets the fault).
func TestFaultsKeepReferences(t *testing.T) {
	f, err := OpenFile(filepath.Join(t.TempDir(), "lun"), 1<<20)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.WriteAt([]byte("lent"), 4096))
	var sw Switch
	st := WithFaults(f, &sw, func(time.Duration) {})
	r, ok := st.(Referencer)
	require.True(t, ok)
	b, ok := r.Ref(4096, 4)
	require.True(t, ok)
	require.Equal(t, "lent", string(b))
	r.Unref()
	sw.Delay(time.Millisecond)
	_, ok = r.Ref(4096, 4)
	require.False(t, ok, "a delayed read is not lent")
	sw.Delay(0)
	sw.Fail(OpRead, true)
	_, ok = r.Ref(4096, 4)
	require.False(t, ok, "a failing read is not lent")
}
