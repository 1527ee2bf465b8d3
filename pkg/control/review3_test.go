package control

import (
	"sync"
	"testing"
	"time"

	"github.com/aluad/aluad/ownership"
)

// A controller elected leader while it is being stopped: its leader
// goroutine starts the core (StartWith) while the daemon's Stop stops it
// (Halt, then Stop waiting on the runner's WaitGroup). Under -race the
// WaitGroup's Add in start races the Wait; and a core started after the
// daemon's Stop runs on a stopped daemon.
func TestStartWithRacesStop(t *testing.T) {
	p, _, _, _ := testPath(t, false)
	mover := func(b ownership.Batch, _ time.Time) (map[uint64]string, error) { return nil, nil }
	for i := 0; i < 200; i++ {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); p.StartWith(Config{Tick: time.Hour}, mover) }()
		go func() { defer wg.Done(); p.Halt(); p.Stop() }()
		wg.Wait()
		p.Stop()
	}
}

// After the daemon's Stop (Halt, Stop), a StartWith must not leave a
// running core behind.
func TestStartWithAfterStopRefused(t *testing.T) {
	p, _, _, _ := testPath(t, false)
	p.Halt()
	p.Stop()
	err := p.StartWith(Config{Tick: time.Hour}, func(b ownership.Batch, _ time.Time) (map[uint64]string, error) { return nil, nil })
	running := p.Running()
	p.Stop()
	if err == nil && running {
		t.Errorf("a core started after the path was stopped (the daemon's Stop): it runs on a closed array")
	}
}
