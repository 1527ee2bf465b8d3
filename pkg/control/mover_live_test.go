package control

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
)

// The cluster leader's mover gets only the LUNs the core still wants
// where the batch says (drive.Live), as the local executor does: a batch
// the core overtook while it waited (a node down, then back while the
// other went down) is not carried out through the records (a flush, a
// hold and a unit attention on every host for a move the core no longer
// wants, undone by the next batch).
func TestMoverGetsOnlyTheLiveLUNs(t *testing.T) {
	p, arr, _, _ := testPath(t, false)
	var mu sync.Mutex
	var stale []uint64
	calls := make(chan struct{}, 8)
	mover := func(b ownership.Batch, _ time.Time) ([]ownership.OwnerChanged, error) {
		r := p.core.Load()
		mu.Lock()
		for _, id := range b.LUNs {
			if r.d.Owner(id) != b.To {
				stale = append(stale, id)
			}
		}
		mu.Unlock()
		select {
		case calls <- struct{}{}:
		default:
		}
		// Carried out (as the records would install it in the array).
		var told []ownership.OwnerChanged
		for _, ids := range arr.ByOwner(b.LUNs) {
			arr.Move(ids, b.To, b.Cause)
			for _, id := range ids {
				told = append(told, ownership.OwnerChanged{LUN: id, Owner: arr.LUN(id).Owner().Name, Cause: b.Cause})
			}
		}
		return told, nil
	}
	p.faultMu.Lock() // the executor waits here before each batch (as while a fault is injected)
	require.NoError(t, p.StartWith(Config{Tick: time.Hour}, mover))
	t.Cleanup(p.Stop)
	p.Post(ownership.NodeState{Node: "a", Up: false}) // batch1: a's LUNs -> b
	var owner string
	require.NoError(t, p.Do(func(c *ownership.Core) { owner = c.Owner(0) }))
	require.Equal(t, "b", owner)
	p.Post(ownership.NodeState{Node: "a", Up: true}, ownership.NodeState{Node: "b", Up: false}) // batch2: all -> a
	require.NoError(t, p.Do(func(c *ownership.Core) { owner = c.Owner(0) }))
	require.Equal(t, "a", owner)
	p.faultMu.Unlock()
	select {
	case <-calls:
	case <-time.After(5 * time.Second):
		t.Fatal("no batch")
	}
	require.Eventually(t, func() bool {
		for _, l := range arr.LUNs {
			if p.Pending(l.ID) || l.Owner().Name != "a" {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "every LUN on a, as the core last decided, nothing pending")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, stale, "the mover was asked to move LUNs the core no longer wants there (the local path skips them)")
}
