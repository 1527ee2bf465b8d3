package cache

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/media"
)

var errLate = errors.New("past its deadline")

// holdOnce holds the first media operation of kind op until release is
// closed, and says when it is held.
type holdOnce struct {
	media.Store
	op      media.Op
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
	// overtaken: a write reached the media while the held one waited.
	overtaken atomic.Bool
}

func newHold(st media.Store, op media.Op) *holdOnce {
	h := &holdOnce{Store: st, op: op, held: make(chan struct{}), release: make(chan struct{})}
	h.armed.Store(true)
	return h
}

func (h *holdOnce) wait(op media.Op) {
	if op == h.op && h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
		return
	}
	select {
	case <-h.held:
		select {
		case <-h.release:
		default:
			if op == media.OpWrite {
				h.overtaken.Store(true)
			}
		}
	default:
	}
}

func (h *holdOnce) ReadAt(p []byte, off int64) error {
	h.wait(media.OpRead)
	return h.Store.ReadAt(p, off)
}

func (h *holdOnce) WriteAt(p []byte, off int64) error {
	h.wait(media.OpWrite)
	return h.Store.WriteAt(p, off)
}

// A write that an Admit governs is admitted where it takes effect: held
// on its way there (the read of a partial page), it is judged after the
// hold, and a later write stands; held after its admission (a write
// with no cache, on its way to the media), it still comes before any
// later write.
func TestAdmitWhereTheWriteTakesEffect(t *testing.T) {
	for _, tt := range []struct {
		name string
		mode Mode
		hold media.Op
		fua  bool
	}{
		{"write-back, held reading its page", WriteBack, media.OpRead, false},
		{"write-back FUA, held reading its page", WriteBack, media.OpRead, true},
		{"write-through, held reading its page", WriteThrough, media.OpRead, false},
		{"none, held after its admission", None, media.OpWrite, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := media.NewMem(lunSize)
			h := newHold(st, tt.hold)
			c := New("a", Config{Mode: tt.mode})
			c.Attach(1, h)
			var late atomic.Bool
			admitted := make(chan struct{}, 1)
			admit := func() error {
				if late.Load() {
					return errLate
				}
				admitted <- struct{}{}
				return nil
			}
			first := make(chan error, 1)
			go func() { first <- c.WriteAtIf(1, fill(512, 0xa), 8192, tt.fua, admit) }()
			<-h.held
			late.Store(true) // its forwarder gave up on it: the host goes on
			var wg sync.WaitGroup
			wg.Add(1)
			second := make(chan error, 1)
			go func() { defer wg.Done(); second <- c.WriteAt(1, fill(4096, 0xb), 8192, false) }()
			if tt.mode != None {
				require.NoError(t, <-second, "the later write does not wait for the held one")
			} else {
				time.Sleep(20 * time.Millisecond) // time to overtake it, were it not ordered
			}
			close(h.release)
			wg.Wait()
			err := <-first
			if tt.hold == media.OpRead {
				require.ErrorIs(t, err, errLate, "judged where it takes effect, after the hold")
				require.Empty(t, admitted)
			} else {
				require.NoError(t, err, "admitted before the hold")
				require.NoError(t, <-second)
				require.False(t, h.overtaken.Load(), "a later write reached the media before the admitted one")
			}
			got := make([]byte, 4096)
			require.NoError(t, c.ReadAt(1, got, 8192))
			require.Equal(t, fill(4096, 0xb), got, "the later write stands")
			require.NoError(t, c.Flush(1))
			require.Equal(t, fill(4096, 0xb), onMedia(t, st, 8192, 4096))
		})
	}
}

// A write or an unmap refused where it would take effect changes nothing.
func TestRefusedChangesNothing(t *testing.T) {
	refuse := func() error { return errLate }
	for _, mode := range []Mode{WriteBack, WriteThrough, None} {
		t.Run(mode.String(), func(t *testing.T) {
			st := media.NewMem(lunSize)
			c := New("a", Config{Mode: mode})
			c.Attach(1, st)
			require.NoError(t, c.WriteAt(1, fill(16384, 3), 0, false))
			require.ErrorIs(t, c.WriteAtIf(1, fill(4096, 4), 4096, false, refuse), errLate)
			require.ErrorIs(t, c.WriteAtIf(1, fill(512, 4), 512, true, refuse), errLate)
			require.ErrorIs(t, c.UnmapIf(1, 0, 8192, refuse), errLate)
			require.NoError(t, c.WriteAtIf(1, fill(512, 6), 0, false, func() error { return nil }))
			want := fill(16384, 3)
			copy(want, fill(512, 6))
			got := make([]byte, 16384)
			require.NoError(t, c.ReadAt(1, got, 0))
			require.Equal(t, want, got)
			require.NoError(t, c.UnmapIf(1, 8192, 4096, func() error { return nil }))
			clear(want[8192:12288])
			require.NoError(t, c.ReadAt(1, got, 0))
			require.Equal(t, want, got)
		})
	}
}
