package control

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
)

// A batch the mover could not carry out and for which it returns no owner
// (a read of etcd failed): the core is told the LUN is where the array
// says, not left with the owner it assumed when it decided the batch.
func TestMoverFailureWithoutOwnersIsRolledBack(t *testing.T) {
	p, arr, _, _ := testPath(t, false)
	called := make(chan []uint64, 8)
	mover := func(b ownership.Batch, _ time.Time) ([]ownership.OwnerChanged, error) {
		called <- b.LUNs
		return nil, errors.New("etcdserver: request timed out")
	}
	require.NoError(t, p.StartWith(Config{Tick: time.Hour}, mover))
	t.Cleanup(p.Stop)
	l := arr.LUNs[0]
	from := l.Owner().Name
	p.Post(ownership.NodeState{Node: from, Up: false}, ownership.NodeState{Node: from, Up: true})
	select {
	case <-called:
	case <-time.After(5 * time.Second):
		t.Fatal("no batch")
	}
	require.Eventually(t, func() bool {
		var owner string
		require.NoError(t, p.Do(func(c *ownership.Core) { owner = c.Owner(l.ID) }))
		return owner == from
	}, 5*time.Second, 10*time.Millisecond, "the core believes LUN %d moved, though the mover moved nothing", l.ID)
}

// A controller elected leader while it is being stopped: its leader
// goroutine starts the core (StartWith) while the daemon's Stop stops it
// (Halt, then Stop waiting on the runner's WaitGroup). Under -race the
// WaitGroup's Add in start races the Wait; and a core started after the
// daemon's Stop runs on a stopped daemon.
func TestStartWithRacesStop(t *testing.T) {
	p, _, _, _ := testPath(t, false)
	mover := func(b ownership.Batch, _ time.Time) ([]ownership.OwnerChanged, error) { return nil, nil }
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
	err := p.StartWith(Config{Tick: time.Hour}, func(b ownership.Batch, _ time.Time) ([]ownership.OwnerChanged, error) { return nil, nil })
	running := p.Running()
	p.Stop()
	if err == nil && running {
		t.Errorf("a core started after the path was stopped (the daemon's Stop): it runs on a closed array")
	}
}
