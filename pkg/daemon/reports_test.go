package daemon

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/reports"
)

// waitReports polls the control socket until cond holds on the raised
// reports (the core debounces over a few ticks).
func waitReports(t *testing.T, c *api.Client, what string, cond func([]reports.Report) bool) []reports.Report {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a loaded machine
	for {
		rs, err := c.Reports()
		require.NoError(t, err)
		if cond(rs) {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: reports now %+v", what, rs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tickReports is waitReports on a fake clock: it moves the core a tick at
// a time (at most 500) until cond holds, with no sleep.
func tickReports(t *testing.T, c *api.Client, ticks func(int), what string, cond func([]reports.Report) bool) []reports.Report {
	t.Helper()
	for i := 0; ; i++ {
		rs, err := c.Reports()
		require.NoError(t, err)
		if cond(rs) {
			return rs
		}
		if i == 500 {
			t.Fatalf("%s: after 500 ticks, reports %+v", what, rs)
		}
		ticks(1)
	}
}

func find(rs []reports.Report, c ownership.Condition, host string) *reports.Report {
	for i := range rs {
		if rs[i].Condition == c && rs[i].Host == host {
			return &rs[i]
		}
	}
	return nil
}

// A partial fault (host h1 loses its path to node a) raises Host
// Redundancy Lost for h1 and node a, with a's ports and home LUNs, and the
// repair clears it. A host logged in on both nodes that never reads RTPG
// or does I/O raises Multipath Not Discovering Paths. The core runs on a
// fake clock: each report comes after the ticks its windows take.
func TestReportsOverControlSocket(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Ownership.Tick = 20 * time.Millisecond
	cfg.Ownership.DiscoveryWindow = 100 * time.Millisecond
	cfg.Ownership.FailbackWindow = 200 * time.Millisecond
	ctl := filepath.Join(dir, "aluad.sock")
	clk := clock.NewFake(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
	d, err := Start(cfg, Options{Logger: quiet(), Control: ctl, StatsInterval: -1, Clock: clk})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	ticks := coreTicks(t, d, clk, cfg.Ownership.Tick)
	c := api.NewClient(ctl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const h1, h2 = "iqn.2026-11.org.example:h1", "iqn.2026-11.org.example:h2"
	onA, onB := dial(t, d, 0, 1, h1), dial(t, d, 2, 2, h1)
	defer onA.Close()
	defer onB.Close()
	rtpg := func(s *initiator.Session) {
		_, err := s.ClearUA(ctx, 0, 4) // the power-on UA comes first
		require.NoError(t, err)
		_, err = s.ReportTargetPortGroups(ctx, 0, true)
		require.NoError(t, err)
	}
	rtpg(onA)
	rtpg(onB)
	checker(t, d, onA, onB)
	// h2: sessions on both nodes, never an RTPG.
	for i, port := range []int{0, 2} {
		s := dial(t, d, port, byte(3+i), h2)
		defer s.Close()
	}
	rs := tickReports(t, c, ticks, "multipath not discovering", func(rs []reports.Report) bool {
		return find(rs, ownership.MultipathNotDiscovering, h2) != nil
	})
	require.Nil(t, find(rs, ownership.HostRedundancyLost, h1), "h1 has both nodes")
	mnd := find(rs, ownership.MultipathNotDiscovering, h2)
	require.Equal(t, "MND", mnd.Code)
	require.Contains(t, mnd.Cause, "multipath")

	_, err = d.Inject(api.Fault{Kind: api.FaultPathDown, Port: "a0", Initiator: h1})
	require.NoError(t, err)
	rs = tickReports(t, c, ticks, "host redundancy lost", func(rs []reports.Report) bool {
		return find(rs, ownership.HostRedundancyLost, h1) != nil
	})
	hrl := find(rs, ownership.HostRedundancyLost, h1)
	require.Equal(t, "a", hrl.Node)
	require.Equal(t, []string{"a0", "a1"}, hrl.Ports)
	require.Equal(t, []uint64{0, 2, 4, 6}, hrl.LUNs, "node a's home LUNs")
	require.Equal(t, ownership.Critical, hrl.Severity)
	require.Equal(t, "Host Redundancy Lost", rs[0].Title, "the critical report comes first")
	require.False(t, hrl.Since.IsZero())
	require.Contains(t, hrl.Cause, "lost every path to node a")

	// Repair: the path comes back and h1 logs in again there.
	_, err = d.Inject(api.Fault{Kind: api.FaultClear})
	require.NoError(t, err)
	again := dial(t, d, 0, 1, h1)
	defer again.Close()
	rtpg(again)
	checker(t, d, again)
	tickReports(t, c, ticks, "host redundancy restored", func(rs []reports.Report) bool {
		return find(rs, ownership.HostRedundancyLost, h1) == nil
	})
}

// With the ownership core off there are no reports, and the API says why.
func TestReportsWithoutCore(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Ownership.Off = true
	ctl := filepath.Join(dir, "aluad.sock")
	d, err := Start(cfg, Options{Logger: quiet(), Control: ctl, StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	_, err = api.NewClient(ctl).Reports()
	require.ErrorContains(t, err, "ownership core is not running")
}
