package initiator

import (
	"context"
	"sync"
	"time"
)

// Checker is a multipath path checker in its simplest form: a TEST UNIT
// READY on every session it is given, every interval, until Stop. The
// array counts a path as discovered by a multipath stack only while
// commands keep arriving on it (multipathd probes every path every 5-20
// s), so a test client that stands for a multipath host runs one. What a
// probe meets (a unit attention, a closed session) does not matter: it
// reached the array or it did not.
type Checker struct {
	mu     sync.Mutex
	ss     []*Session
	cancel context.CancelFunc
	done   chan struct{}
}

// NewChecker starts probing ss every interval.
func NewChecker(every time.Duration, ss ...*Session) *Checker {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Checker{ss: ss, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			c.ProbeAll(ctx)
		}
	}()
	return c
}

// Add probes ss too from now on.
func (c *Checker) Add(ss ...*Session) {
	c.mu.Lock()
	c.ss = append(c.ss, ss...)
	c.mu.Unlock()
}

// ProbeAll sends one probe on every session now (a test on a fake clock
// calls it before each tick).
func (c *Checker) ProbeAll(ctx context.Context) {
	c.mu.Lock()
	ss := append([]*Session(nil), c.ss...)
	c.mu.Unlock()
	for _, s := range ss {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_ = s.TestUnitReady(pctx, 0)
		cancel()
	}
}

// Stop ends the probing and waits for it.
func (c *Checker) Stop() {
	c.cancel()
	<-c.done
}
