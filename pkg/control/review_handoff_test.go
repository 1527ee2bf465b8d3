package control

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
)

// Review: the runner steps a batch of events, then applies the Ready's
// hand-offs (drain -> apply), while NexusLost hands off at once on the
// SCSI goroutine. A hand-back (On: false) the core decided at a tick from
// a host's probes of its path to a is applied after that host's last
// nexus to a has ended (its Logout is still in the inbox): the array
// reports STANDBY again on the host's only paths (to b) for the LUNs a
// owns until the core has stepped the Logout. p.handoff is what
// runner.apply calls; the stale Ready is fed to it directly. An Off for a
// node the host has no nexus to must not be applied (or must be
// re-checked against srv's nexuses, under the same lock as NexusLost).
func TestReviewStaleHandbackAfterLastLogout(t *testing.T) {
	p, arr, srv, _ := testPathType(t, false, alua.HostLinuxDMMP)
	a1, b3 := nexus(1, 1), nexus(3, 3)
	srv.NexusUp(a1)
	srv.NexusUp(b3)
	b := arr.Port(3).Node
	srv.NexusLost(a1) // the host's last path to a ends: handed off at once
	require.Equal(t, alua.ActiveNonOptimized, arr.LUN(0).State(iqn, b))

	// The Ready of a tick stepped before the Logout reached the core.
	p.handoff(ownership.Handoff{Host: "h1", Node: "a", On: false})
	require.Equal(t, alua.ActiveNonOptimized, arr.LUN(0).State(iqn, b),
		"a stale hand-back left h1 STANDBY on its only path for LUN 0 (owner a)")
}
