package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// A LUN damped by an undeclared host's flapping paths; the operator then
// declares a host for that initiator: the host is renamed in the damped
// LUN's flapping hosts too, and the ticks after it go on.
func TestRehomeWhileDamped(t *testing.T) {
	const ini = "iqn.2026-11.org.example:h1"
	cfg := DefaultConfig()
	cfg.DampCount = 1
	c, err := New(cfg)
	require.NoError(t, err)
	for _, n := range []string{"a", "b"} {
		require.NoError(t, c.Step(NodeDecl{Node: n, Capacity: 10000}))
	}
	require.NoError(t, c.Step(LUNDecl{LUN: 0, Preferred: "a", Owner: "a", Media: "ram", Group: "g"}))
	na := Nexus{Host: ini, Initiator: ini, ISID: "1", Port: 1, Node: "a"}
	nb := Nexus{Host: ini, Initiator: ini, ISID: "3", Port: 3, Node: "b"}
	for _, n := range []Nexus{na, nb} {
		establish(t, c, n, 0)
	}
	for range cfg.Settle {
		require.NoError(t, c.Step(Tick{}))
	}
	c.Advance()
	require.NoError(t, c.Step(Logout{Nexus: na})) // a fault
	require.Len(t, c.Ready().Batches, 1)
	c.Advance()
	require.NoError(t, c.Step(OwnerChanged{LUN: 0, Owner: "b", Cause: alua.CauseFailover}))
	require.GreaterOrEqual(t, c.luns[0].damped, 0)
	require.Equal(t, []string{ini}, c.luns[0].flapHosts)
	c.Advance()
	// aluad host add db1 --initiator ini
	require.NoError(t, c.Step(HostDecl{Host: "db1", Type: alua.HostTypes["linux-dmmp"]}))
	require.NoError(t, c.Step(Rehome{Initiator: ini, From: ini, To: "db1"}))
	c.Advance()
	require.NotPanics(t, func() {
		for range 10 {
			_ = c.Step(Tick{})
			c.Advance()
		}
	})
}

// A login whose host was resolved just before the operator's change and
// stepped just after it (under the old name): the later logout, under
// the new name, finds the nexus (one nexus, one host, the latest named).
func TestRehomeRacingALogin(t *testing.T) {
	const ini = "iqn.2026-11.org.example:h1"
	c, err := New(DefaultConfig())
	require.NoError(t, err)
	for _, n := range []string{"a", "b"} {
		require.NoError(t, c.Step(NodeDecl{Node: n, Capacity: 1000}))
	}
	require.NoError(t, c.Step(LUNDecl{LUN: 0, Preferred: "a", Owner: "a", Media: "ram", Group: "g"}))
	// control.Path.Fabric: p.Nexus(e) -> Host ini (old table)
	// daemon.editHosts: SetHosts, Declare(HostDecl, Rehome)
	require.NoError(t, c.Step(HostDecl{Host: "db1", Type: alua.HostTypes["linux-dmmp"]}))
	require.NoError(t, c.Step(Rehome{Initiator: ini, From: ini, To: "db1"}))
	// ...then the login is posted with the name it resolved
	require.NoError(t, c.Step(Login{Nexus{Host: ini, Initiator: ini, ISID: "1", Port: 1, Node: "a"}}))
	// the host logs out; HostOf now says db1
	require.NoError(t, c.Step(Logout{Nexus: Nexus{Host: "db1", Initiator: ini, ISID: "1", Port: 1, Node: "a"}, Orderly: true}))
	for _, st := range c.HostStates() {
		require.Empty(t, st.ProtocolOnly, "%s still logged in to %v after its only logout", st.Host, st.ProtocolOnly)
		require.Empty(t, st.Reaches, "%s", st.Host)
	}
}
