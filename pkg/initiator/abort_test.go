package initiator_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/scsi"
)

// heldWrites is a device server whose writes wait in their media write
// until released; it logs when each lands and when a TMF arrives.
type heldWrites struct {
	mu      sync.Mutex
	log     []string
	in      chan struct{} // a write is in its media write
	tmf     chan struct{} // a TMF reached the target
	release chan struct{}
}

func (h *heldWrites) note(s string) {
	h.mu.Lock()
	h.log = append(h.log, s)
	h.mu.Unlock()
}

func (h *heldWrites) Execute(c *scsi.Command) scsi.Response {
	if c.CDB[0] == 0x8a {
		h.in <- struct{}{}
		<-h.release
		h.note("write landed")
	}
	return scsi.Response{}
}
func (h *heldWrites) NexusUp(scsi.Nexus)                 {}
func (h *heldWrites) NexusLost(scsi.Nexus)               {}
func (h *heldWrites) Reset(scsi.Nexus, scsi.TMF, uint64) {}
func (h *heldWrites) LUNExists(scsi.Nexus, uint64) bool  { return true }
func (h *heldWrites) TaskManagement(scsi.Nexus, scsi.TMF, uint64) {
	select {
	case h.tmf <- struct{}{}:
	default:
	}
}

// An abandoned write is ended at the target before EndTask returns: the
// target answers ABORT TASK only once the write can no longer land, and
// when no TMF is answered the session is dropped.
func TestEndTask(t *testing.T) {
	tests := []struct {
		name string
		// releaseOnTMF: the held write finishes once the TMF has reached
		// the target; otherwise only at the test's end.
		releaseOnTMF bool
		step         time.Duration
		wantErr      error
		wantLog      []string
	}{
		{name: "ABORT TASK on a write in its media write", releaseOnTMF: true, step: time.Minute,
			wantLog: []string{"write landed", "TMF answered"}},
		{name: "no TMF answered: the session is dropped", step: 50 * time.Millisecond,
			wantErr: initiator.ErrTaskUnknown, wantLog: []string{"TMF answered"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &heldWrites{in: make(chan struct{}, 1), tmf: make(chan struct{}, 1), release: make(chan struct{})}
			tg, err := iscsi.NewTarget(iscsi.Config{Name: "iqn.2026-11.org.aluad:t",
				Portals: []fabric.Portal{{Addr: "127.0.0.1:0", TPGT: 1, RelativeID: 1}},
				Logger:  slog.New(slog.NewTextHandler(io.Discard, nil))}, h)
			require.NoError(t, err)
			require.NoError(t, tg.Listen())
			var once sync.Once
			free := func() { once.Do(func() { close(h.release) }) }
			t.Cleanup(func() { free(); tg.Close() })
			ctx := context.Background()
			s, err := initiator.Dial(ctx, initiator.Config{Addr: tg.Addrs()[0], Target: "iqn.2026-11.org.aluad:t"})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })

			wctx, cancel := context.WithCancel(ctx)
			werr := make(chan error, 1)
			go func() { werr <- s.Write16(wctx, 0, 0, make([]byte, 4096), 512, false) }()
			<-h.in // held in its media write
			cancel()
			var a *initiator.Abandoned
			require.ErrorAs(t, <-werr, &a)
			require.ErrorIs(t, a, context.Canceled)

			if tc.releaseOnTMF {
				go func() { <-h.tmf; free() }()
			}
			err = s.EndTask(ctx, a, tc.step)
			h.note("TMF answered")
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				<-s.Done()
			} else {
				require.NoError(t, err)
				_, err := s.Read16(ctx, 0, 0, 1, 512)
				require.NoError(t, err, "the session carries on")
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			assert.Equal(t, tc.wantLog, h.log, "the aborted write never lands after the TMF's answer")
		})
	}
}
