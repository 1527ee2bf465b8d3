package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
)

// Review: in a cluster each controller serves its own ports, so the
// STANDBY hand-off must reach the controller whose ports are the host's
// non-owner paths. Host h1 (linux-dmmp) reaches a and b; a leads. h1 logs
// out of a (maintenance on a's paths). LUN L (owned by a) stays on a (h1
// sends no I/O: it is not its one active user), so h1's path to b must
// report ANO for L, or dm-multipath fails it and the host gets EIO.
// Neither half of the hand-off gets there: NexusLost runs on a (where the
// nexus ended) and the core's Ready.Handoffs are applied on the leader a
// only; b's array never hears of either.
func TestReviewClusterHandoffReachesNonOwner(t *testing.T) {
	lab := coreLab(t)
	iqn := "iqn.2026-11.test.aluad:h1"
	lab.cfg.Hosts = append(lab.cfg.Hosts, array.HostConfig{Name: "h1", Type: alua.HostLinuxDMMP, Initiators: []string{iqn}})
	a, b := lab.pair(nil)
	hostA, hostB := session(t, a, "a", "h1"), session(t, b, "b", "h1")
	for _, l := range lab.cfg.LUNs {
		rtpg(t, hostA, l.ID)
		rtpg(t, hostB, l.ID)
	}
	require.Eventually(t, func() bool { return slices.Equal(paths(t, a), []string{"h1@a", "h1@b"}) },
		5*time.Second, 20*time.Millisecond, "the leader's core knows h1 on both nodes: %v", paths(t, a))
	lun := lab.preferring("a")[0]
	require.Equal(t, "a", b.arr.LUN(lun).Owner().Name)
	require.NoError(t, hostA.Logout(context.Background()))
	bNode := b.arr.Node("b")
	require.Eventually(t, func() bool {
		st := b.arr.LUN(lun).State(iqn, bNode)
		return st == alua.ActiveNonOptimized || st == alua.ActiveOptimized
	}, 5*time.Second, 20*time.Millisecond,
		"h1's only path left (to b) reports %s for LUN %d (owner %s) on b's controller; a's array handed off: %v",
		b.arr.LUN(lun).State(iqn, bNode), lun, b.arr.LUN(lun).Owner().Name, a.arr.HandedOff("h1", "a"))
}
