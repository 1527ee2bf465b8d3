package daemon

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/initiator"
)

// Tests whose hosts stand for multipath hosts run a path checker on their
// sessions (initiator.Checker): every few milliseconds of real time, and
// before every tick a fake clock's ticks function moves (probeAll), so
// every core interval has its probes.

var checkers struct {
	mu sync.Mutex
	by map[*Daemon]*initiator.Checker
}

// checker makes ss paths a multipath checker probes until the test ends.
func checker(t testing.TB, d *Daemon, ss ...*initiator.Session) {
	t.Helper()
	checkers.mu.Lock()
	defer checkers.mu.Unlock()
	if checkers.by == nil {
		checkers.by = map[*Daemon]*initiator.Checker{}
	}
	if c := checkers.by[d]; c != nil {
		c.Add(ss...)
		return
	}
	c := initiator.NewChecker(5*time.Millisecond, ss...)
	checkers.by[d] = c
	t.Cleanup(func() {
		c.Stop()
		checkers.mu.Lock()
		delete(checkers.by, d)
		checkers.mu.Unlock()
	})
}

// probeAll sends one probe on every session a checker runs for on d.
func probeAll(d *Daemon) {
	checkers.mu.Lock()
	c := checkers.by[d]
	checkers.mu.Unlock()
	if c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c.ProbeAll(ctx)
	}
}
