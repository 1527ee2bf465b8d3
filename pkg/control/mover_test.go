package control

import (
	"errors"
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
	mover := func(b ownership.Batch, _ time.Time) (map[uint64]string, error) {
		called <- b.LUNs
		return map[uint64]string{}, errors.New("etcdserver: request timed out")
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
	time.Sleep(100 * time.Millisecond)
	var owner string
	require.NoError(t, p.Do(func(c *ownership.Core) { owner = c.Owner(l.ID) }))
	require.Equal(t, from, owner, "the core believes LUN %d moved, though the mover moved nothing", l.ID)
}
