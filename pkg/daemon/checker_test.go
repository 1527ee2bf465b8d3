package daemon

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/initiator"
)

// A multipath stack's path checker, for tests whose hosts stand for one:
// the array counts a path as discovered only while commands keep arriving
// on it (multipathd sends TEST UNIT READY on every path every few
// seconds), not from one RTPG. checker probes each session it is given
// every few milliseconds of real time until the test ends, and before
// every tick a fake clock's ticks function moves (probeAll), so every
// core interval has its probes.

var checkers struct {
	mu sync.Mutex
	by map[*Daemon][]*initiator.Session
}

// checker makes ss paths a multipath checker probes.
func checker(t testing.TB, d *Daemon, ss ...*initiator.Session) {
	t.Helper()
	checkers.mu.Lock()
	if checkers.by == nil {
		checkers.by = map[*Daemon][]*initiator.Session{}
	}
	checkers.by[d] = append(checkers.by[d], ss...)
	checkers.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			for _, s := range ss {
				probe(ctx, s)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		checkers.mu.Lock()
		delete(checkers.by, d)
		checkers.mu.Unlock()
	})
}

// probeAll sends one probe on every session a checker runs for on d.
func probeAll(d *Daemon) {
	checkers.mu.Lock()
	ss := append([]*initiator.Session(nil), checkers.by[d]...)
	checkers.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range ss {
		probe(ctx, s)
	}
}

// probe is one TEST UNIT READY; its outcome (a unit attention, a closed
// session) does not matter: it reached the array or it did not.
func probe(ctx context.Context, s *initiator.Session) {
	c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = s.TestUnitReady(c, 0)
}
