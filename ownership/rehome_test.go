package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// An operator declares a host for an initiator that is logged in (it was
// an undeclared host, known by its initiator's name), adds an initiator
// to a host that has sessions, and removes a host: the array keeps
// knowing which host reaches which node through each change, with no
// session ended.
func TestRehome(t *testing.T) {
	const ini, ini2 = "iqn.2026-11.org.example:h1", "iqn.2026-11.org.example:h1b"
	dmmp := alua.HostType{Name: "linux-dmmp", TPGS: true, NonOwner: alua.Standby}
	nx := func(host, initiator, node string, port uint16) Nexus {
		return Nexus{Host: host, Initiator: initiator, ISID: "1", Port: port, Node: node}
	}
	start := func(t *testing.T) *Core {
		c, err := New(DefaultConfig())
		require.NoError(t, err)
		for _, n := range []string{"a", "b"} {
			require.NoError(t, c.Step(NodeDecl{Node: n, Capacity: 1000}))
		}
		require.NoError(t, c.Step(LUNDecl{LUN: 0, Preferred: "a", Owner: "a", Media: "ram", Group: "dg0"}))
		establish(t, c, nx(ini, ini, "a", 1), 0)
		establish(t, c, nx(ini, ini, "b", 3), 0)
		require.NoError(t, c.Step(IO{Host: ini, Node: "a", LUN: 0, Ops: 100, Media: 100, Ticks: 1}))
		return c
	}
	reaches := func(c *Core) map[string][]string {
		out := map[string][]string{}
		for _, s := range c.HostStates() {
			out[s.Host] = s.Reaches
		}
		return out
	}

	t.Run("declare a logged-in host", func(t *testing.T) {
		c := start(t)
		require.NoError(t, c.Step(HostDecl{Host: "db1", Type: dmmp}))
		require.NoError(t, c.Step(Rehome{Initiator: ini, From: ini, To: "db1"}))
		require.Equal(t, map[string][]string{"db1": {"a", "b"}}, reaches(c), "renamed, its paths and their standing kept")
		h := c.hosts["db1"]
		require.Equal(t, dmmp, h.typ, "the declared type, not the undeclared default")
		require.True(t, h.obs.rtpg, "what it was seen to do carries over")
		require.True(t, c.luns[0].users["db1"])
		require.False(t, c.luns[0].users[ini])
		for k, s := range h.nexuses {
			require.Equal(t, "db1", s.n.Host, "%v", k)
		}
		// A logout under its new name is found (a stale name would leave
		// a nexus behind forever).
		require.NoError(t, c.Step(Logout{Nexus: nx("db1", ini, "b", 3)}))
		require.Equal(t, map[string][]string{"db1": {"a"}}, reaches(c))
	})

	t.Run("add an initiator to a host with sessions", func(t *testing.T) {
		c := start(t)
		require.NoError(t, c.Step(HostDecl{Host: "db1", Type: dmmp}))
		require.NoError(t, c.Step(Rehome{Initiator: ini, From: ini, To: "db1"}))
		establish(t, c, nx(ini2, ini2, "b", 4), 0)
		require.NoError(t, c.Step(Rehome{Initiator: ini2, From: ini2, To: "db1"}))
		require.Len(t, c.hosts["db1"].nexuses, 3, "its own two and the one added")
		require.True(t, c.hosts["db1"].nexuses[keyOf(nx("db1", ini2, "b", 4))].discovered, "discovery kept")
		require.Empty(t, c.hosts[ini2].nexuses)
		require.Equal(t, []string{"a", "b"}, reaches(c)["db1"])
		require.Empty(t, reaches(c)[ini2])
	})

	t.Run("remove the host", func(t *testing.T) {
		c := start(t)
		require.NoError(t, c.Step(HostDecl{Host: "db1", Type: dmmp}))
		require.NoError(t, c.Step(Rehome{Initiator: ini, From: ini, To: "db1"}))
		require.NoError(t, c.Step(Rehome{Initiator: ini, From: "db1", To: ini}))
		require.Equal(t, map[string][]string{ini: {"a", "b"}}, reaches(c), "known by its initiator again")
		require.Equal(t, alua.HostTypes[alua.HostDefault], c.hosts[ini].typ)
	})

	t.Run("nothing to move", func(t *testing.T) {
		c := start(t)
		before := reaches(c)
		require.NoError(t, c.Step(Rehome{Initiator: "iqn.2026-11.org.example:none", From: ini, To: "db1"}))
		require.NoError(t, c.Step(Rehome{Initiator: ini, From: "nobody", To: "db1"}))
		require.Equal(t, before, reaches(c))
	})
}
