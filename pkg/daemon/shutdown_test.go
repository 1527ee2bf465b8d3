package daemon

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Stopping the daemon while hosts keep sending commands on every path:
// each read loop may be admitting a command as the target shuts down.
// The stop must wait for those commands (none is left running) and the
// race detector must see no task added while the shutdown waits for the
// connection's tasks (it did, 1 run in 4 of this test, before the
// shutdown waited for the read loops).
func TestStopWhileCommandsArrive(t *testing.T) {
	for round := range 10 {
		d := start(t, testConfig(t.TempDir()))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range d.Portals() {
			s := dial(t, d, i, byte(1+i), "iqn.2026-11.org.example:stop")
			// One command at a time: the connection's task count is
			// often 0 as the next arrives, when an Add races a Wait.
			wg.Add(1)
			go func() {
				defer wg.Done()
				tur := make([]byte, 6)
				for ctx.Err() == nil {
					if _, err := s.Execute(ctx, 0, tur, nil, 0); err != nil {
						return // the stop ended the session
					}
				}
			}()
		}
		time.Sleep(time.Duration(5*(round+1)) * time.Millisecond)
		d.Stop(5 * time.Second)
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "a host's command never ended after the stop")
		}
	}
}
