package control

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// uas drains the unit attentions pending for lun on n (TEST UNIT READY
// until GOOD) and lists them as "ASC/ASCQ".
func uas(t *testing.T, srv *scsi.Server, n scsi.Nexus, lun uint64) []string {
	t.Helper()
	var out []string
	for i := 0; i < 8; i++ {
		r := srv.Execute(&scsi.Command{Nexus: n, LUN: lun, CDB: make([]byte, 6)})
		if r.Status == scsi.StatusGood {
			return out
		}
		require.Equal(t, scsi.StatusCheckCondition, r.Status)
		require.GreaterOrEqual(t, len(r.Sense), 14)
		require.Equal(t, byte(0x6), r.Sense[2]&0xf, "sense key UNIT ATTENTION")
		out = append(out, fmt.Sprintf("%02X/%02X", r.Sense[12], r.Sense[13]))
	}
	t.Fatalf("unit attentions never drained on %v", n)
	return nil
}

// A host of a STANDBY type (linux-dmmp) that logs out of its last path to
// node a sees ANO, not STANDBY, on its path to b for LUN 0 (owned by a),
// at once and with a unit attention there: its I/O is forwarded, never
// refused. A path to a left logged in keeps it STANDBY. With no core to
// hold the hand-back, its next login to a hands it back.
func TestStandbyHandoffOnLastLogout(t *testing.T) {
	p, arr, srv, f := testPathType(t, false, alua.HostLinuxDMMP)
	a1, a2, b3 := nexus(1, 1), nexus(2, 2), nexus(3, 3)
	for _, n := range []scsi.Nexus{a1, a2, b3} {
		srv.NexusUp(n)
	}
	l0 := arr.LUN(0)
	b := arr.Port(3).Node
	require.Equal(t, "a", l0.Owner().Name)
	require.Equal(t, alua.Standby, l0.State(iqn, b))
	uas(t, srv, b3, 0) // the new nexus's POWER ON
	uas(t, srv, b3, 1)

	srv.NexusLost(a1) // a path to a is left
	require.Equal(t, alua.Standby, l0.State(iqn, b))
	require.Empty(t, uas(t, srv, b3, 0))

	srv.NexusLost(a2) // the last one
	require.Equal(t, alua.ActiveNonOptimized, l0.State(iqn, b), "handed off at the last path's end")
	require.True(t, arr.HandedOff("h1", "a"))
	require.Equal(t, []string{"2A/06"}, uas(t, srv, b3, 0), "the host is told its state changed")
	require.Empty(t, uas(t, srv, b3, 1), "LUN 1 (owned by b) did not change")
	require.Contains(t, f.kinds(), api.EventHandoff)

	// Back on a, with no core here to tell when its multipath stack has
	// the new path in its map: it stays handed off (ANO), never STANDBY on
	// the paths it uses now.
	srv.NexusUp(a1)
	p.Fabric(fabric.Event{Kind: api.EventLogin, Nexus: a1})
	require.Equal(t, alua.ActiveNonOptimized, l0.State(iqn, b))
}

// A host of an ANO type is never handed off: nothing changes for it.
func TestNoHandoffForANOTypes(t *testing.T) {
	_, arr, srv, _ := testPathType(t, false, alua.HostLinux)
	a1, b3 := nexus(1, 1), nexus(3, 3)
	srv.NexusUp(a1)
	srv.NexusUp(b3)
	uas(t, srv, b3, 0)
	srv.NexusLost(a1)
	require.False(t, arr.HandedOff("h1", "a"))
	require.Equal(t, alua.ActiveNonOptimized, arr.LUN(0).State(iqn, arr.Port(3).Node))
	require.Empty(t, uas(t, srv, b3, 0))
}

// With the core running, a STANDBY host declared before any login is
// handed off everywhere from the start (it reaches no node yet, so a
// first login to a non-owner node must not meet STANDBY there).
func TestStandbyHandoffAtStart(t *testing.T) {
	_, arr, _, _ := testPathType(t, true, alua.HostLinuxDMMP)
	require.True(t, arr.HandedOff("h1", "a"))
	require.True(t, arr.HandedOff("h1", "b"))
	require.Equal(t, alua.ActiveNonOptimized, arr.LUN(0).State(iqn, arr.Port(3).Node))
}
