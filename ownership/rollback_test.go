package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// A move the array cannot carry out (rolled back) is decided again only
// after a doubling back-off, never in a loop of decide / roll back /
// decide (found by the whole-array simulation: a media fault failing
// every flush made the core and the array spin). A takeover off a down
// owner never waits.
func TestRollbackBacksOff(t *testing.T) {
	c, err := New(DefaultConfig())
	require.NoError(t, err)
	for _, n := range []string{"a", "b"} {
		require.NoError(t, c.Step(NodeDecl{Node: n, Capacity: 100}))
	}
	require.NoError(t, c.Step(LUNDecl{LUN: 0, Preferred: "a", Owner: "a"}))
	c.Advance()
	// The LUN's only host reaches node b only: it must move there.
	nx := Nexus{Host: "h1", Initiator: "iqn.2026-11.org.example:h1", ISID: "1", Port: 3, Node: "b"}
	establish(t, c, nx, 0)
	want := []Batch{{LUNs: []uint64{0}, To: "b", Cause: alua.CauseFailover, Class: "/", Stop: 500}}
	for i := 0; i < 100 && len(c.Ready().Batches) == 0; i++ {
		c.Advance()
		require.NoError(t, c.Step(Tick{})) // the path's discovery window
	}
	require.Equal(t, want, c.Ready().Batches)
	c.Advance()
	// Each rollback: no batch at once, then one after 1, 2, 4, 8 ticks.
	for _, wait := range []int{1, 2, 4, 8} {
		require.NoError(t, c.Step(OwnerChanged{LUN: 0, Owner: "a", Cause: alua.CauseRollback}))
		require.Empty(t, c.Ready().Batches, "decided again at once after a rollback")
		c.Advance()
		for i := 1; i < wait; i++ {
			require.NoError(t, c.Step(Tick{}))
			require.Empty(t, c.Ready().Batches, "decided again %d ticks after a rollback (back-off %d)", i, wait)
			c.Advance()
		}
		require.NoError(t, c.Step(Tick{}))
		require.Equal(t, want, c.Ready().Batches, "not decided again after the back-off of %d ticks", wait)
		c.Advance()
	}
	// Rolled back again, and then the owner goes down: the takeover is
	// decided at once, back-off or not.
	require.NoError(t, c.Step(OwnerChanged{LUN: 0, Owner: "a", Cause: alua.CauseRollback}))
	c.Advance()
	require.NoError(t, c.Step(NodeState{Node: "a", Up: false}))
	require.Equal(t, want, c.Ready().Batches)
}

// A failover that damps the LUN and is then rolled back (the array could
// not carry it out) undoes the damping with it: the LUN never moved.
func TestRolledBackFailoverDoesNotDamp(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DampCount = 1 // the first path-caused failover damps
	c, err := New(cfg)
	require.NoError(t, err)
	for _, n := range []string{"a", "b"} {
		require.NoError(t, c.Step(NodeDecl{Node: n, Capacity: 10000}))
	}
	require.NoError(t, c.Step(LUNDecl{LUN: 0, Preferred: "a", Owner: "a", Media: "ram", Group: "g"}))
	na := Nexus{Host: "h1", Initiator: "iqn.2026-11.org.example:h1", ISID: "1", Port: 1, Node: "a"}
	nb := Nexus{Host: "h1", Initiator: "iqn.2026-11.org.example:h1", ISID: "3", Port: 3, Node: "b"}
	for _, n := range []Nexus{na, nb} {
		establish(t, c, n, 0)
	}
	for range cfg.Settle {
		require.NoError(t, c.Step(Tick{}))
	}
	c.Advance()
	require.NoError(t, c.Step(Logout{Nexus: na})) // a fault: the path is lost
	require.Len(t, c.Ready().Batches, 1)
	require.Equal(t, c.Now(), c.luns[0].damped, "damped by the failover it decided")
	c.Advance()
	require.NoError(t, c.Step(OwnerChanged{LUN: 0, Owner: "a", Cause: alua.CauseRollback}))
	require.Equal(t, -1, c.luns[0].damped, "the rollback undoes the damping")
	require.Empty(t, c.luns[0].failovers)
	require.False(t, c.luns[0].displaced, "nor is the LUN displaced: it never left its preferred owner")
}
