package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/scsi"
)

// End to end over iSCSI and the control socket: a manual move reaches
// every nexus of the LUN as UA 2A/06 exactly once, RTPG then shows the new
// owner with status 02h, and the event feed carries logins (with ISID),
// RTPGs and the change.
func TestManualMoveOverControlSocket(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	ctl := filepath.Join(dir, "aluad.sock")
	d, err := Start(cfg, Options{Logger: quiet(), Control: ctl, StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const host = "iqn.2026-11.org.example:h1"
	paths := []*initiator.Session{dial(t, d, 0, 1, host), dial(t, d, 2, 2, host)} // node a, node b
	for _, s := range paths {
		defer s.Close()
		for _, lun := range []uint64{0, 1} {
			seen, err := s.ClearUA(ctx, lun, 4)
			require.NoError(t, err)
			require.Equal(t, [][2]byte{{0x29, 0x00}}, seen)
		}
		_, err := s.ReportTargetPortGroups(ctx, 0, true)
		require.NoError(t, err)
	}

	c := api.NewClient(ctl)
	ch, err := c.Move(0, "b")
	require.NoError(t, err)
	require.Equal(t, "a", ch.From)
	require.Equal(t, "manual", ch.Cause)

	for _, s := range paths {
		seen, err := s.ClearUA(ctx, 0, 4)
		require.NoError(t, err)
		require.Equal(t, [][2]byte{{0x2a, 0x06}}, seen, "exactly one 2A/06 per nexus")
		seen, err = s.ClearUA(ctx, 1, 4)
		require.NoError(t, err)
		require.Empty(t, seen, "LUN 1 did not move")
		for _, ext := range []bool{false, true} {
			b, err := s.ReportTargetPortGroups(ctx, 0, ext)
			require.NoError(t, err)
			gs, gotExt, _, err := scsi.ParseRTPG(b)
			require.NoError(t, err)
			require.Equal(t, ext, gotExt)
			require.Len(t, gs, 2)
			require.Equal(t, alua.ActiveNonOptimized, gs[0].State)
			require.False(t, gs[0].Pref, "PREF follows the owner (multipath prio alua ranks a PREF ANO group above AO)")
			require.True(t, gs[1].Pref)
			require.Equal(t, alua.ActiveOptimized, gs[1].State)
			require.Equal(t, byte(2), gs[0].Status)
			require.Equal(t, byte(2), gs[1].Status)
		}
	}

	_, err = c.Move(0, "b")
	require.ErrorContains(t, err, "already owned by node b")
	_, err = c.Move(77, "a")
	require.ErrorContains(t, err, "no LUN 77")
	_, err = c.Move(0, "q")
	require.ErrorContains(t, err, `no node "q"`)

	luns, err := c.LUNs()
	require.NoError(t, err)
	require.Equal(t, "b", luns[0].Owner)
	require.Equal(t, uint64(1), luns[0].Generation)

	ev, err := c.Events(0)
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, e := range ev.Events {
		kinds[e.Kind]++
		if e.Kind == api.EventLogin {
			require.Equal(t, host, e.Initiator)
			require.Contains(t, []string{"800000000001", "800000000002"}, e.ISID)
			require.NotEmpty(t, e.Node)
		}
		if e.Kind == api.EventALUA {
			require.Equal(t, []uint64{0}, e.Change.LUNs)
		}
	}
	require.Equal(t, 2, kinds[api.EventLogin])
	var uas []string
	for _, e := range ev.Events {
		if e.Kind == api.EventUA {
			uas = append(uas, fmt.Sprintf("%s LUN %d port %d", e.Reason, *e.LUN, e.TargetPort))
		}
	}
	require.ElementsMatch(t, []string{"29/00 LUN 0 port 1", "29/00 LUN 1 port 1", "29/00 LUN 0 port 3", "29/00 LUN 1 port 3",
		"2A/06 LUN 0 port 1", "2A/06 LUN 0 port 3"}, uas, "every UA reported to a nexus, once")
	require.Equal(t, 6, kinds[api.EventRTPG], "one per path before the move, two formats per path after")
	require.Equal(t, 1, kinds[api.EventALUA])

	// Media arrivals per path: a read on the new owner's path counts there
	// and stamps its arrival; the old path shows none.
	before := time.Now()
	_, err = paths[1].Read16(ctx, 0, 0, 1, 512)
	require.NoError(t, err)
	ios, err := c.IO()
	require.NoError(t, err)
	var onB *api.PathIO
	for i, p := range ios {
		if p.LUN == 0 && p.Node == "b" {
			onB = &ios[i]
		}
		if p.LUN == 0 && p.Node == "a" {
			require.Zero(t, p.Media)
			require.True(t, p.LastMedia.IsZero())
		}
	}
	require.NotNil(t, onB)
	require.Equal(t, host, onB.Initiator)
	require.Equal(t, uint64(1), onB.Media)
	require.Equal(t, uint64(1), onB.Reads)
	require.False(t, onB.LastMedia.Before(before.Add(-time.Second)))

	// Per-interval I/O events carry the nexus and the non-optimized
	// share; path events the fabric's exchanges of each nexus.
	d.EmitIOStats()
	ev, err = c.Events(ev.Events[len(ev.Events)-1].Seq)
	require.NoError(t, err)
	require.NotEmpty(t, ev.Events)
	perKind := map[string]int{}
	for _, e := range ev.Events {
		perKind[e.Kind]++
		require.NotZero(t, e.TargetPort)
		switch e.Kind {
		case api.EventIO:
			require.NotNil(t, e.LUN)
		case api.EventPath:
			require.NotNil(t, e.Path)
			require.NotZero(t, e.Path.Exchanges)
			require.Positive(t, e.Path.Exchange, "an exchange takes time")
		default:
			t.Fatalf("unexpected %s event", e.Kind)
		}
	}
	require.NotZero(t, perKind[api.EventIO])
	require.NotZero(t, perKind[api.EventPath])
}

// A second daemon cannot take over a live control socket; a stale one is
// replaced.
func TestControlSocketInUse(t *testing.T) {
	dir := t.TempDir()
	ctl := filepath.Join(dir, "aluad.sock")
	d, err := Start(testConfig(dir), Options{Logger: quiet(), Control: ctl, StatsInterval: -1})
	require.NoError(t, err)
	cfg2 := testConfig(t.TempDir())
	_, err = Start(cfg2, Options{Logger: quiet(), Control: ctl, StatsInterval: -1})
	require.ErrorContains(t, err, "in use")
	require.NoError(t, d.Stop(time.Second))
}

// ABORT TASK for a task that already completed (its CmdSN is below
// ExpCmdSN) answers TASK DOES NOT EXIST, never FUNCTION COMPLETE: the
// initiator must not believe a write it saw succeed was aborted (RFC 7143
// 11.5.1; libiscsi's AbortTaskSimpleAsync checks the pair).
func TestAbortOfCompletedTask(t *testing.T) {
	d := start(t, testConfig(t.TempDir()))
	defer d.Stop(time.Second)
	s := dial(t, d, 0, 1, "iqn.2026-11.org.example:h1")
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.ClearUA(ctx, 0, 4)
	require.NoError(t, err)
	require.NoError(t, s.Write16(ctx, 0, 0, make([]byte, 4096), 512, false))
	code, err := s.TaskMgmt(ctx, initiator.TMFAbortTask, 0, 0x7fff0001)
	require.NoError(t, err)
	require.Equal(t, byte(1), code, "task does not exist")
	code, err = s.TaskMgmt(ctx, initiator.TMFLUNReset, 0, 0)
	require.NoError(t, err)
	require.Equal(t, byte(0), code, "LUN RESET: function complete")
}

// The ownership core's node capacity can be re-declared over the control
// socket; bad nodes and values are refused with a clear message.
func TestSetCapacityOverControlSocket(t *testing.T) {
	dir := t.TempDir()
	ctl := filepath.Join(dir, "aluad.sock")
	for _, off := range []bool{false, true} {
		cfg := testConfig(dir)
		cfg.Ownership.Off = off
		d, err := Start(cfg, Options{Logger: quiet(), Control: ctl, StatsInterval: -1})
		require.NoError(t, err)
		c := api.NewClient(ctl)
		if off {
			require.ErrorContains(t, c.SetCapacity("a", 40), "ownership core is not running")
		} else {
			require.NoError(t, c.SetCapacity("a", 40))
			require.ErrorContains(t, c.SetCapacity("q", 40), "known node")
			require.ErrorContains(t, c.SetCapacity("b", 0), "positive capacity")
		}
		require.NoError(t, d.Stop(5*time.Second))
	}
}
