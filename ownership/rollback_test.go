package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"
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
	require.NoError(t, c.Step(Login{Nexus: nx}))
	require.NoError(t, c.Step(RTPG{Nexus: nx, LUN: 0}))
	want := []Batch{{LUNs: []uint64{0}, To: "b", Cause: CauseFailover, Class: "/", Stop: 500}}
	for i := 0; i < 100 && len(c.Ready().Batches) == 0; i++ {
		c.Advance()
		require.NoError(t, c.Step(Tick{})) // the path's discovery window
	}
	require.Equal(t, want, c.Ready().Batches)
	c.Advance()
	// Each rollback: no batch at once, then one after 1, 2, 4, 8 ticks.
	for _, wait := range []int{1, 2, 4, 8} {
		require.NoError(t, c.Step(OwnerChanged{LUN: 0, Owner: "a", Cause: CauseRollback}))
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
	require.NoError(t, c.Step(OwnerChanged{LUN: 0, Owner: "a", Cause: CauseRollback}))
	c.Advance()
	require.NoError(t, c.Step(NodeState{Node: "a", Up: false}))
	require.Equal(t, want, c.Ready().Batches)
}
