package reports

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
)

func TestRender(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	hrl, _ := ownership.Lookup(ownership.HostRedundancyLost)
	vnp, _ := ownership.Lookup(ownership.VolumeNotOnPreferred)
	rs := []Report{
		{Warnable: vnp, Node: "b", LUNs: []uint64{3}, Cause: "LUN 3 is owned by node b; its preferred owner is a"},
		{Warnable: hrl, Host: "db1", Node: "a", Ports: []string{"a0", "a1"}, LUNs: []uint64{0, 2},
			Cause: "host db1 lost every path to node a", Since: now.Add(-90 * time.Second)},
	}
	Sort(rs)
	require.Equal(t, "Host Redundancy Lost", rs[0].Title, "critical first")
	var b strings.Builder
	require.NoError(t, Render(&b, rs, now))
	out := b.String()
	for _, want := range []string{
		"HOST REDUNDANCY LOST: host db1, node a [critical, HRL]\n",
		"    Host:     db1\n", "    Node:     a\n", "    Ports:    a0, a1\n", "    LUNs:     0, 2\n",
		"    Since:    2026-11-22T11:58:30Z (1m30s ago)\n",
		"  What caused the problem\n    host db1 lost every path to node a\n",
		"  Recovery procedure\n    1. Check the host's links",
		"VOLUME NOT ON PREFERRED PATH: node b, LUN 3 [major, VNP]\n",
	} {
		require.Contains(t, out, want)
	}
	require.Less(t, strings.Index(out, "HOST REDUNDANCY"), strings.Index(out, "VOLUME NOT"))
	b.Reset()
	require.NoError(t, Render(&b, nil, now))
	require.Contains(t, b.String(), "No problems")
}
