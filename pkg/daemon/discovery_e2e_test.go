package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/initiator"
)

// fastCore makes the ownership core tick every 20 ms, with a discovery
// window of 20 ticks and a debounce of 3.
func fastCore(t *testing.T) *Daemon {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.Ownership.Tick = 20 * time.Millisecond
	cfg.Ownership.DiscoveryWindow = 400 * time.Millisecond
	cfg.Ownership.AlertDelay = 60 * time.Millisecond
	d, err := Start(cfg, Options{Logger: quiet()})
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	return d
}

// fakeCore is fastCore on a fake clock: the core ticks only when the
// test moves the clock, with ticks(n).
func fakeCore(t *testing.T) (d *Daemon, ticks func(n int)) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.Ownership.Tick = 20 * time.Millisecond
	cfg.Ownership.DiscoveryWindow = 400 * time.Millisecond
	cfg.Ownership.AlertDelay = 60 * time.Millisecond
	clk := clock.NewFake(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
	d, err := Start(cfg, Options{Logger: quiet(), Clock: clk})
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	return d, coreTicks(t, d, clk, cfg.Ownership.Tick)
}

// coreTicks moves a daemon's fake clock a tick at a time, each stepped by
// the core before the next (a query runs after the tick it follows).
func coreTicks(t *testing.T, d *Daemon, clk *clock.Fake, tick time.Duration) func(n int) {
	return func(n int) {
		for range n {
			probeAll(d)
			clk.Advance(tick)
			require.NoError(t, d.ctl.Do(func(*ownership.Core) {}))
		}
	}
}

// raised lists the conditions the core raises now, as "condition host node".
func raised(d *Daemon) map[string]bool {
	out := map[string]bool{}
	rs, _ := d.ctl.Reports()
	for _, r := range rs {
		out[string(r.Condition)+" "+r.Host+" "+r.Node] = true
	}
	return out
}

// TestMNDFromMediaEvidence, through the real target with the Go
// initiator: a host with no multipath logs in on both nodes and scans
// every path (INQUIRY, TEST UNIT READY, READ CAPACITY and a partition
// table read), then sends its media I/O through node a only; a
// multipath host reads RTPG on both nodes and spreads its media I/O over
// both. Only the first raises Multipath Not Discovering Paths, for node b.
func TestMNDFromMediaEvidence(t *testing.T) {
	d := fastCore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const single, multi = "iqn.2026-11.org.example:single", "iqn.2026-11.org.example:multi"
	sa, sb := dial(t, d, 0, 1, single), dial(t, d, 2, 2, single) // node a, node b
	ma, mb := dial(t, d, 0, 3, multi), dial(t, d, 2, 4, multi)
	for _, s := range []*initiator.Session{sa, sb, ma, mb} {
		defer s.Close()
		for _, lun := range []uint64{0, 1} {
			_, err := s.ClearUA(ctx, lun, 4)
			require.NoError(t, err)
			_, err = s.Inquiry(ctx, lun, false, 0)
			require.NoError(t, err)
			require.NoError(t, s.TestUnitReady(ctx, lun))
			_, _, err = s.ReadCapacity16(ctx, lun)
			require.NoError(t, err)
			_, err = s.Read16(ctx, lun, 0, 1, 512) // the partition table, once per path
			require.NoError(t, err)
		}
	}
	for _, s := range []*initiator.Session{ma, mb} {
		for _, lun := range []uint64{0, 1} {
			_, err := s.ReportTargetPortGroups(ctx, lun, true)
			require.NoError(t, err)
		}
	}
	io := func(s *initiator.Session, lun uint64) {
		// The owner's path answers GOOD; an ANO path is forwarded, GOOD
		// too. The array may move a LUN meanwhile (the single-path host
		// reaches node a only): its unit attention is read and the
		// command sent again, as a host does.
		for try := 0; ; try++ {
			_, err := s.Read16(ctx, lun, 8, 1, 512)
			if err == nil {
				err = s.Write16(ctx, lun, 16, make([]byte, 512), 512, false)
			}
			var ce *initiator.CheckError
			if err != nil && errors.As(err, &ce) && try < 3 {
				if k, _, _ := ce.KeyASC(); k == 6 {
					continue
				}
			}
			require.NoError(t, err)
			return
		}
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		for _, lun := range []uint64{0, 1} {
			io(sa, lun)
			io(ma, lun)
			io(mb, lun)
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		return raised(d)[string(ownership.MultipathNotDiscovering)+" "+single+" b"]
	}, 5*time.Second, 20*time.Millisecond, "MND for the scanning host on node b: %v", raised(d))
	r := raised(d)
	require.False(t, r[string(ownership.MultipathNotDiscovering)+" "+single+" a"], "it uses node a: %v", r)
	for k := range r {
		if strings.HasPrefix(k, string(ownership.PathDegraded)+" ") {
			continue // a latency judgement: a loaded machine slows one path now and then
		}
		require.NotContains(t, k, multi, "the multipath host uses every path: nothing is raised for it")
	}
	hosts := d.Hosts()
	for _, h := range hosts {
		switch h.Name {
		case single:
			require.Equal(t, "reaches", h.Nodes["a"])
			require.Equal(t, "protocol-only", h.Nodes["b"])
			require.False(t, h.RTPG)
		case multi:
			require.Equal(t, "reaches", h.Nodes["a"])
			require.Equal(t, "reaches", h.Nodes["b"])
			require.True(t, h.RTPG)
			require.True(t, h.ExtendedRTPG)
		}
	}
}

// TestLogoutIsOrderly: a session ended with a Logout Request is reported
// as an orderly logout, one whose connection drops as a fault. The core
// runs on a fake clock: it ticks when the test says. Two hosts
// use LUN 0 (owned by a) through both nodes: h1 logging out of node a
// moves nothing; h2 losing its connection to node a fails LUN 0 over.
func TestLogoutIsOrderly(t *testing.T) {
	d, ticks := fakeCore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const h1, h2 = "iqn.2026-11.org.example:h1", "iqn.2026-11.org.example:h2"
	a1, b1 := dial(t, d, 0, 1, h1), dial(t, d, 2, 2, h1)
	a2, b2 := dial(t, d, 0, 3, h2), dial(t, d, 2, 4, h2)
	for _, s := range []*initiator.Session{a1, b1, a2, b2} {
		defer s.Close()
		_, err := s.ClearUA(ctx, 0, 4)
		require.NoError(t, err)
		_, err = s.ReportTargetPortGroups(ctx, 0, true)
		require.NoError(t, err)
	}
	checker(t, d, a1, b1, a2, b2)
	owner := func() string { return d.Array.LUN(0).Owner().Name }
	require.Equal(t, "a", owner())
	ticks(15) // both hosts settled
	pa := d.Portals()[0].RelativeID
	reason := func(ini string) string {
		ev, _ := d.Events.Since(0)
		for _, e := range ev {
			if e.Kind == api.EventLogout && e.Initiator == ini && e.TargetPort == pa {
				return e.Reason
			}
		}
		return ""
	}
	require.NoError(t, a1.Logout(ctx))
	require.Eventually(t, func() bool { return reason(h1) != "" }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "logout", reason(h1))
	ticks(10)
	require.Equal(t, "a", owner(), "h1 left node a on purpose: LUN 0 stays")

	a2.Close()
	require.Eventually(t, func() bool { return reason(h2) != "" }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, "connection closed", reason(h2))
	// A fault fails over within a tick, once the batch is carried out.
	ticks(1)
	require.Eventually(t, func() bool { return owner() == "b" }, 5*time.Second, 10*time.Millisecond,
		"h2 lost node a: LUN 0 fails over to b, which both hosts reach")
}

// Clearing a report through the API: what is not latched, or cannot be
// cleared by hand, is refused with a message; a malformed body too.
func TestClearReportErrors(t *testing.T) {
	_, c := apiDaemon(t, 20*time.Millisecond)
	for _, tt := range []struct {
		req  api.ClearRequest
		want string
	}{
		{api.ClearRequest{Condition: "path-flapping", LUN: 0}, "LUN 0 is not damped"},
		{api.ClearRequest{Condition: "path-flapping", LUN: 99}, "no LUN 99"},
		{api.ClearRequest{Condition: "host-type-incorrect", Host: "nobody"}, `no host "nobody"`},
		{api.ClearRequest{Condition: "node-offline"}, "clears by itself"},
	} {
		err := c.ClearReport(tt.req)
		require.Error(t, err, "%+v", tt.req)
		require.Contains(t, err.Error(), tt.want)
	}
	require.NoError(t, c.ClearReport(api.ClearRequest{Condition: "host-type-incorrect", Host: "h1"}),
		"a declared host's observations can always be restarted")
	var out map[string]any
	err := c.Do("POST", "/v1/reports/clear", map[string]any{"condition": "path-flapping", "colour": "red"}, &out)
	require.ErrorContains(t, err, "unknown field")
}
