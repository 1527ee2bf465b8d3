package drive

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/drive/drivetest"
	"github.com/aluad/aluad/pkg/scsi"
)

const iqn = "iqn.2024-01.com.example.h:1"

// testArray is the loopback array (nodes a and b, even LUNs on a) with one
// host h1 of type typ, served by a device server.
func testArray(t *testing.T, typ string) (*Array, *array.Array, *scsi.Server) {
	t.Helper()
	arr, srv := drivetest.Array(t, "h1", typ, iqn)
	return NewArray(arr, srv), arr, srv
}

func nexus(port uint16, isid int) scsi.Nexus {
	return scsi.Nexus{InitiatorName: iqn, InitiatorPort: fmt.Sprintf("%s,i,0x%012x", iqn, isid), TargetPort: port}
}

func testDriver(t *testing.T, typ string) (*Driver, *array.Array, *scsi.Server) {
	t.Helper()
	a, arr, srv := testArray(t, typ)
	d, err := New(a, ownership.DefaultConfig(), 0)
	require.NoError(t, err)
	d.Ready()
	return d, arr, srv
}

// New declares the array as it is: every LUN where the array has it, the
// host with its type; and an earlier core's hand-offs are cleared.
func TestNewDeclaresTheArray(t *testing.T) {
	a, arr, _ := testArray(t, alua.HostLinuxDMMP)
	arr.SetHandoff("h1", "a", true)
	d, err := New(a, ownership.DefaultConfig(), 0)
	require.NoError(t, err)
	for _, l := range arr.LUNs {
		require.Equal(t, l.Owner().Name, d.Owner(l.ID))
	}
	d.Do(func(c *ownership.Core) { require.ElementsMatch(t, []string{"a", "b"}, c.Nodes()) })
	require.False(t, arr.SetHandoff("h1", "a", false), "the earlier core's hand-off was not cleared")
}

// Ran tells the core only what differs from its view, and every rollback;
// the batch's LUNs stop being pending.
func TestRanTellsTheCoreWhatDiffers(t *testing.T) {
	b := ownership.Batch{LUNs: []uint64{0, 2}, To: "b", Cause: alua.CauseBalance}
	for _, tc := range []struct {
		name string
		told []ownership.OwnerChanged
		want []ownership.Event
	}{
		{"moved as decided", []ownership.OwnerChanged{{LUN: 0, Owner: "b", Cause: alua.CauseBalance}, {LUN: 2, Owner: "b", Cause: alua.CauseBalance}}, nil},
		{"one rolled back", []ownership.OwnerChanged{{LUN: 0, Owner: "b", Cause: alua.CauseBalance}, {LUN: 2, Owner: "a", Cause: alua.CauseRollback}},
			[]ownership.Event{ownership.OwnerChanged{LUN: 2, Owner: "a", Cause: alua.CauseRollback}}},
		{"moved elsewhere meanwhile", []ownership.OwnerChanged{{LUN: 0, Owner: "a", Cause: alua.CauseManual}},
			[]ownership.Event{ownership.OwnerChanged{LUN: 0, Owner: "a", Cause: alua.CauseManual},
				ownership.OwnerChanged{LUN: 2, Owner: "a", Cause: alua.CauseRollback}}},
		{"nothing told: where the array has them", nil,
			[]ownership.Event{ownership.OwnerChanged{LUN: 0, Owner: "a", Cause: alua.CauseRollback},
				ownership.OwnerChanged{LUN: 2, Owner: "a", Cause: alua.CauseRollback}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _, _ := testDriver(t, alua.HostLinuxDMMP)
			// The core decided the batch: it has the LUNs on b now.
			require.NoError(t, d.Step(ownership.OwnerChanged{LUN: 0, Owner: "b", Cause: alua.CauseBalance},
				ownership.OwnerChanged{LUN: 2, Owner: "b", Cause: alua.CauseBalance}))
			d.pending[0], d.pending[2] = 1, 1
			require.Equal(t, tc.want, d.Ran(b, tc.told))
			require.False(t, d.Pending(0))
			require.False(t, d.Pending(2))
		})
	}
}

// Run moves only what the core still wants where the batch says, one
// array move per owner, and reports a failed move as a rollback.
func TestRunCarriesOutTheLiveLUNs(t *testing.T) {
	d, arr, _ := testDriver(t, alua.HostLinuxDMMP)
	// The core wants 0 and 2 on b; 1 is on b already; then an operator
	// put 2 back on a in the core's view.
	require.NoError(t, d.Step(ownership.OwnerChanged{LUN: 0, Owner: "b", Cause: alua.CauseBalance},
		ownership.OwnerChanged{LUN: 2, Owner: "a", Cause: alua.CauseManual}))
	b := ownership.Batch{LUNs: []uint64{0, 1, 2}, To: "b", Cause: alua.CauseBalance}
	require.Equal(t, []uint64{0}, d.Live(b))

	var calls [][]uint64
	told, moved := d.Run(b, func(ids []uint64, to string, cause alua.Cause) (array.Change, error) {
		calls = append(calls, ids)
		return arr.Move(ids, to, cause)
	})
	require.Equal(t, [][]uint64{{0}}, calls)
	require.Len(t, moved, 1)
	require.NoError(t, moved[0].Err)
	require.Equal(t, []ownership.OwnerChanged{{LUN: 0, Owner: "b", Cause: alua.CauseBalance}}, told)
	require.Equal(t, "b", arr.LUN(0).Owner().Name)

	// A move that fails is a rollback where the LUN still is.
	require.NoError(t, d.Step(ownership.OwnerChanged{LUN: 4, Owner: "b", Cause: alua.CauseBalance}))
	told, _ = d.Run(ownership.Batch{LUNs: []uint64{4}, To: "b", Cause: alua.CauseBalance},
		func([]uint64, string, alua.Cause) (array.Change, error) {
			return array.Change{}, errors.New("flush failed")
		})
	require.Equal(t, []ownership.OwnerChanged{{LUN: 4, Owner: "a", Cause: alua.CauseRollback}}, told)
}

// Changed queues the unit attention of SPC-4 5.15.2.3 on the LUNs'
// nexuses (2A/06; 2A/07 for a failed implicit transition; none for a
// failed STPG) and hands the core only the moves it did not decide.
func TestChangedAnnouncesAndTellsTheCore(t *testing.T) {
	a, _, srv := testArray(t, alua.HostLinuxDMMP)
	n := nexus(1, 1)
	srv.NexusUp(n)
	tur := func() scsi.Response { return srv.Execute(&scsi.Command{Nexus: n, CDB: []byte{0, 0, 0, 0, 0, 0}}) }
	for tur().Status != scsi.StatusGood { // the power-on UA
	}
	for _, tc := range []struct {
		cause  alua.Cause
		failed bool
		tell   bool
		ua     [2]byte // zero: none
	}{
		{alua.CauseManual, false, true, [2]byte{0x2a, 0x06}},
		{alua.CauseSTPG, false, true, [2]byte{0x2a, 0x06}},
		{alua.CauseBalance, false, false, [2]byte{0x2a, 0x06}},
		{alua.CauseFailover, false, false, [2]byte{0x2a, 0x06}},
		{alua.CauseBalance, true, false, [2]byte{0x2a, 0x07}},
		{alua.CauseSTPG, true, false, [2]byte{}},
	} {
		name := fmt.Sprintf("%s failed=%v", tc.cause, tc.failed)
		evs := a.Changed(array.Change{LUNs: []uint64{0}, From: "a", To: "b", Cause: tc.cause, Failed: tc.failed})
		if tc.tell {
			require.Equal(t, []ownership.Event{ownership.OwnerChanged{LUN: 0, Owner: "b", Cause: tc.cause}}, evs, name)
		} else {
			require.Empty(t, evs, name)
		}
		r := tur()
		if tc.ua == [2]byte{} {
			require.Equal(t, scsi.StatusGood, r.Status, name)
			continue
		}
		ps, err := scsi.ParseSense(r.Sense)
		require.NoError(t, err, name)
		require.Equal(t, tc.ua, [2]byte{ps.ASC, ps.ASCQ}, name)
		require.Equal(t, scsi.StatusGood, tur().Status, name)
	}
}

// A hand-back the core decided before it stepped the host's last logout
// from a node is stale: applied, it would leave the host STANDBY on its
// only paths (to b) for the LUNs a owns.
func TestStaleHandbackAfterLastLogout(t *testing.T) {
	d, arr, srv := testDriver(t, alua.HostLinuxDMMP)
	a1, b3 := nexus(1, 1), nexus(3, 3)
	srv.NexusUp(a1)
	srv.NexusUp(b3)
	b := arr.Port(3).Node
	// The declarations handed h1 off everywhere (it reached nothing);
	// its logins and probes made the core hand both nodes back.
	require.True(t, d.handoff(ownership.Handoff{Host: "h1", Node: "a", On: false}))
	require.True(t, d.handoff(ownership.Handoff{Host: "h1", Node: "b", On: false}))
	require.Equal(t, alua.Standby, arr.LUN(0).State(iqn, b))
	srv.NexusLost(a1)
	ho, ok := d.LastPathLost(a1) // the host's last path to a ended
	require.True(t, ok)
	require.Equal(t, ownership.Handoff{Host: "h1", Node: "a", On: true}, ho)
	_, ok = d.LastPathLost(b3) // b3 is still up: not its last
	require.False(t, ok)
	require.Equal(t, alua.ActiveNonOptimized, arr.LUN(0).State(iqn, b))

	require.False(t, d.handoff(ownership.Handoff{Host: "h1", Node: "a", On: false}))
	require.Equal(t, alua.ActiveNonOptimized, arr.LUN(0).State(iqn, b),
		"a stale hand-back left h1 STANDBY on its only path for LUN 0 (owner a)")
}
