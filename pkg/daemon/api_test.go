package daemon

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/reports"
)

const (
	hostIQN    = "iqn.2026-11.org.example:h1"
	unknownIQN = "iqn.2026-11.org.example:stranger"
	apiToken   = "s3cret-token"
)

// apiDaemon starts a daemon with its management API on loopback, guarded
// by a token, with host h1 declared as linux-dmmp.
func apiDaemon(t *testing.T, tick time.Duration) (*Daemon, *api.Client) {
	t.Helper()
	d, c, _ := apiDaemonOn(t, tick, nil)
	return d, c
}

// apiDaemonOn is apiDaemon on a clock (nil: the real one); with a fake
// one, ticks moves the core n ticks, each stepped before the next.
func apiDaemonOn(t *testing.T, tick time.Duration, clk *clock.Fake) (*Daemon, *api.Client, func(n int)) {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.Hosts = []array.HostConfig{{Name: "h1", Type: "linux-dmmp", Initiators: []string{hostIQN}}}
	cfg.Ownership.Tick = tick
	cfg.Ownership.DiscoveryWindow = 5 * tick
	cfg.Ownership.FailbackWindow = 10 * tick
	cfg.Ownership.AlertDelay = 2 * tick
	require.NoError(t, cfg.Validate())
	opt := Options{Logger: quiet(), API: "127.0.0.1:0", APIToken: apiToken, StatsInterval: -1}
	if clk != nil {
		opt.Clock = clk
	}
	d, err := Start(cfg, opt)
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	var ticks func(int)
	if clk != nil {
		ticks = coreTicks(t, d, clk, tick)
	}
	return d, api.NewHTTPClient("http://"+d.APIAddr(), apiToken), ticks
}

// loginAll logs initiator name in on every portal (ISIDs from isid up)
// with an RTPG on each, and a checker probing them, as a multipath driver
// discovering its paths does.
func loginAll(t *testing.T, d *Daemon, name string, isid byte) []*initiator.Session {
	t.Helper()
	var ss []*initiator.Session
	for i := range d.Portals() {
		s := dial(t, d, i, isid+byte(i), name)
		t.Cleanup(func() { s.Close() })
		rtpgOn(t, s)
		ss = append(ss, s)
	}
	checker(t, d, ss...)
	return ss
}

func rtpgOn(t *testing.T, s *initiator.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	for i := 0; i < 4; i++ { // the first answers carry the power-on UA
		if _, err = s.ReportTargetPortGroups(ctx, 0, true); err == nil {
			return
		}
	}
	require.NoError(t, err)
}

func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	// The legacy (strictest) name rules: what every Prometheus accepts.
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	require.NoError(t, err, "the exposition must parse:\n%s", text)
	return fams
}

// metricValue finds the sample of family name whose labels include want.
func metricValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
	require.NotNil(t, f, "family %s", name)
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no %s sample with %v", name, want)
	return 0
}

// The management API over TCP: the token guards data but not the
// dashboard's files; the views report the declared host and the unknown
// initiator, the connectivity matrix and per-path counters; rebalance
// says why it moves nothing; /metrics parses with Prometheus's own text
// parser and counts a manual move, its stop time and the UAs it raised;
// the event stream speaks server-sent events.
func TestManagementAPI(t *testing.T) {
	d, c := apiDaemon(t, 50*time.Millisecond)
	base := "http://" + d.APIAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// No token: refused, with a clear message; the dashboard loads.
	for _, path := range []string{"/v1/status", "/metrics", "/v1/reports"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		require.Contains(t, string(body), "bearer token is required")
	}
	_, err := api.NewHTTPClient(base, "wrong").Status()
	require.ErrorContains(t, err, "bearer token is required")
	for path, want := range map[string]string{"/": "Recovery Guru", "/app.js": "renderGuru", "/style.css": ".problem"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, string(body), want, path)
	}

	// h1 on every port with RTPG; a stranger on one port.
	h1 := loginAll(t, d, hostIQN, 1)
	_, err = h1[0].Read16(ctx, 0, 0, 8, 512)
	require.NoError(t, err)
	stranger := dial(t, d, 1, 9, unknownIQN)
	defer stranger.Close()
	// Its checker probes every path: discovered within the discovery
	// window. No move is being followed: its non-owner paths are handed
	// off (ANO), STANDBY only as the push after a move.
	require.Eventually(t, func() bool {
		hs, err := c.Hosts()
		return err == nil && len(hs) > 0 && hs[0].Nodes["a"] == "reaches" && hs[0].Nodes["b"] == "reaches"
	}, 10*time.Second, 20*time.Millisecond, "h1's probed paths discovered")
	require.True(t, d.Array.HandedOff("h1", "a"))
	d.EmitIOStats()

	st, err := c.Status()
	require.NoError(t, err)
	require.Equal(t, 5, st.Sessions)
	require.Equal(t, 1, st.Hosts)
	require.Equal(t, 1, st.Unknown)
	require.Len(t, st.Nodes, 2)
	require.True(t, st.Ownership)
	require.Equal(t, 2, st.Nodes[0].Ports[1].Sessions, "a1 has h1 and the stranger")

	hs, err := c.Hosts()
	require.NoError(t, err)
	require.Len(t, hs, 2)
	require.Equal(t, "h1", hs[0].Name)
	require.True(t, hs[0].Declared)
	require.Equal(t, "linux-dmmp", hs[0].Type)
	require.Equal(t, "STANDBY", hs[0].NonOwner)
	require.Equal(t, 4, hs[0].Sessions)
	require.Equal(t, map[string]string{"a": "reaches", "b": "reaches"}, hs[0].Nodes)
	require.Equal(t, unknownIQN, hs[1].Name)
	require.False(t, hs[1].Declared, "an initiator no host declares shows up as unknown")
	require.Equal(t, "default", hs[1].Type)
	require.Equal(t, "protocol-only", hs[1].Nodes["a"], "logged in, never an RTPG")
	require.Equal(t, "none", hs[1].Nodes["b"])

	conn, err := c.Connectivity()
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, conn.Nodes)
	require.Equal(t, []string{"reaches", "reaches"}, conn.Hosts[0].Cells)

	ps, err := c.Paths()
	require.NoError(t, err)
	require.Len(t, ps, 5)
	var a0 *api.PathInfo
	for i := range ps {
		if ps[i].Host == "h1" && ps[i].Port == "a0" {
			a0 = &ps[i]
		}
	}
	require.NotNil(t, a0)
	require.Equal(t, "a", a0.Node)
	require.True(t, a0.Discovered)
	require.GreaterOrEqual(t, a0.Commands, uint64(3), "UA clearing, RTPG and the read")
	require.Equal(t, uint64(4096), a0.BytesRead)
	require.Positive(t, a0.Exchanges)
	require.Positive(t, a0.LatencyUs)
	require.Len(t, a0.LUNs, 8)
	require.Equal(t, "AO", a0.LUNs[0].State, "LUN 0 is a's")
	require.Equal(t, "ANO", a0.LUNs[1].State, "linux-dmmp sees the non-owner as ANO while no move pushes it")
	// In use: I/O in the last stats interval. The core's 50 ms tick also
	// closes intervals, so one may end between EmitIOStats and the query:
	// read again until a query sees the interval with the read in it.
	reads := 1
	require.Eventually(t, func() bool {
		if _, err := h1[0].Read16(ctx, 0, 0, 8, 512); err != nil {
			return false
		}
		reads++
		d.EmitIOStats()
		ps, err := c.Paths()
		if err != nil {
			return false
		}
		for _, p := range ps {
			if p.Host == "h1" && p.Port == "a0" {
				return p.LUNs[0].InUse && !p.LUNs[1].InUse
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "the read was in the last interval")

	// Rebalance with next to no load: nothing to do, and why. The reads
	// above are load on a; the core's 50 ms tick may fold them in before
	// the plan, so the reason is "balanced" or that no move pays.
	rb, err := c.Rebalance()
	require.NoError(t, err)
	require.Zero(t, rb.Moves)
	require.NotEmpty(t, rb.Reason, "a plan with no move says why")

	// A manual move: counted in /metrics with its stop time, and the UA
	// it queues is counted when a nexus reports it. LUN 2, not 0: the
	// checker's probes go to LUN 0 every 5 ms and would take the UA.
	_, err = c.Move(2, "b")
	require.NoError(t, err)
	got, err := h1[2].ClearUA(ctx, 2, 4) // b0: the owner now
	require.NoError(t, err)
	require.Contains(t, got, [2]byte{0x2a, 0x06})
	text, err := c.Metrics()
	require.NoError(t, err)
	fams := parseMetrics(t, text)
	require.Equal(t, 1.0, metricValue(t, fams, "aluad_node_up", map[string]string{"node": "a"}))
	sessions := 0.0
	for _, m := range fams["aluad_sessions"].Metric {
		sessions += m.Gauge.GetValue()
	}
	require.Equal(t, 5.0, sessions, "summed over the ports")
	require.Equal(t, 2.0, metricValue(t, fams, "aluad_sessions", map[string]string{"node": "a", "port": "a1"}), "h1 and the stranger")
	require.Equal(t, 1.0, metricValue(t, fams, "aluad_path_up", map[string]string{"host": "h1", "port": "a0"}))
	require.GreaterOrEqual(t, metricValue(t, fams, "aluad_lun_commands_total", map[string]string{"lun": "0", "node": "a"}), float64(reads))
	require.Equal(t, float64(d.Array.LUN(0).Size), metricValue(t, fams, "aluad_lun_size_bytes", map[string]string{"lun": "0"}))
	require.Positive(t, metricValue(t, fams, "aluad_cache_size_bytes", map[string]string{"node": "a"}))
	require.Positive(t, metricValue(t, fams, "aluad_node_capacity_units", map[string]string{"node": "b"}))
	require.Equal(t, 1.0, metricValue(t, fams, "aluad_ownership_moves_total", map[string]string{"cause": "manual"}))
	require.Equal(t, 1.0, metricValue(t, fams, "aluad_ownership_stop_seconds", map[string]string{"cause": "manual"}))
	require.Equal(t, dto.MetricType_HISTOGRAM, fams["aluad_ownership_stop_seconds"].GetType())
	require.GreaterOrEqual(t, metricValue(t, fams, "aluad_unit_attentions_total", map[string]string{"asc_ascq": "2A/06"}), 1.0)
	require.Equal(t, 1.0, metricValue(t, fams, "aluad_lun_owner", map[string]string{"lun": "2", "node": "b"}))
	require.Equal(t, 0.0, metricValue(t, fams, "aluad_lun_on_preferred", map[string]string{"lun": "2"}))
	require.Equal(t, float64(4096*reads), metricValue(t, fams, "aluad_port_read_bytes_total", map[string]string{"port": "a0"}))
	require.Positive(t, metricValue(t, fams, "aluad_port_exchanges_total", map[string]string{"port": "a0"}))
	metricValue(t, fams, "aluad_reports_active", map[string]string{"condition": "host-redundancy-lost", "severity": "critical"})

	// Unknown calls get a JSON error; the stream speaks SSE.
	nope, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/nope", nil)
	nope.Header.Set("Authorization", "Bearer "+apiToken)
	nr, err := http.DefaultClient.Do(nope)
	require.NoError(t, err)
	nb, _ := io.ReadAll(nr.Body)
	nr.Body.Close()
	require.Equal(t, http.StatusNotFound, nr.StatusCode)
	require.Contains(t, string(nb), "no such API call")
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events/stream?since=0", nil)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "id: 1\n", line)
	line, err = br.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, `data: {"seq":1,`), line)
}

// Path Degraded end to end: h1 reads through a0 and a1 (both node a, LUN
// 0's owner); a 20 ms delay on h1's path through a1 makes its exchange
// time expand while a0's and the node's do not, and the report names h1,
// node a and port a1; it clears when the delay goes. A node crash then
// raises Node Offline alone (no Host Redundancy Lost or Path Degraded
// under it), cleared when the node is back.
func TestPathDegradedAndNodeOffline(t *testing.T) {
	d, c := apiDaemon(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ss := loginAll(t, d, hostIQN, 1)
	// QD1 readers on a0 and a1, until the test ends.
	stop := make(chan struct{})
	done := make(chan struct{}, 2)
	for _, s := range ss[:2] {
		go func(s *initiator.Session) {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Read16(ctx, 0, 0, 8, 512); err != nil && ctx.Err() != nil {
					return
				}
			}
		}(s)
	}
	defer func() {
		close(stop)
		<-done
		<-done
	}()
	// The brain emits the intervals on its ticks; wait until both paths
	// have been judged (a best interval and an expansion).
	waitPaths := func(what string, cond func(map[string]api.PathInfo) bool) map[string]api.PathInfo {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ps, err := c.Paths()
			require.NoError(t, err)
			by := map[string]api.PathInfo{}
			for _, p := range ps {
				by[p.Port] = p
			}
			if cond(by) {
				return by
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: paths now %+v", what, by)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitPaths("both read paths judged", func(by map[string]api.PathInfo) bool {
		return by["a0"].Expansion > 0 && by["a1"].Expansion > 0
	})
	_, err := c.Inject(api.Fault{Kind: api.FaultDelay, Port: "a1", Initiator: hostIQN, Delay: 20 * time.Millisecond})
	require.NoError(t, err)
	// On a loaded machine the healthy path may be judged slow for a
	// while too: wait for the report to name the slow path alone.
	rs := waitReports(t, c, "path degraded on a1 alone", func(rs []reports.Report) bool {
		pd := find(rs, ownership.PathDegraded, "h1")
		return pd != nil && len(pd.Ports) == 1 && pd.Ports[0] == "a1"
	})
	pd := find(rs, ownership.PathDegraded, "h1")
	require.Equal(t, "a", pd.Node)
	require.Equal(t, ownership.Minor, pd.Severity)
	require.Contains(t, pd.Cause, "port 2")
	by := waitPaths("a1 marked degraded, a0 not", func(by map[string]api.PathInfo) bool {
		return by["a1"].Degraded && !by["a0"].Degraded
	})
	require.GreaterOrEqual(t, by["a1"].Expansion, 3.0)

	_, err = c.Inject(api.Fault{Kind: api.FaultDelay, Port: "a1", Initiator: hostIQN, Delay: 0})
	require.NoError(t, err)
	waitReports(t, c, "path degraded cleared", func(rs []reports.Report) bool {
		return find(rs, ownership.PathDegraded, "h1") == nil
	})

	// Node b crashes: one Node Offline report.
	_, err = c.Inject(api.Fault{Kind: api.FaultCrash, Node: "b"})
	require.NoError(t, err)
	rs = waitReports(t, c, "node offline", func(rs []reports.Report) bool {
		for _, r := range rs {
			if r.Condition == ownership.NodeOffline && r.Node == "b" {
				return true
			}
		}
		return false
	})
	for _, r := range rs {
		require.NotEqual(t, ownership.HostRedundancyLost, r.Condition, "explained by Node Offline: %+v", r)
		// (a path to node a may be judged slow on its own: this test
		// runs on a shared, loaded machine)
		require.False(t, r.Condition == ownership.PathDegraded && r.Node == "b", "explained by Node Offline: %+v", r)
	}
	require.Equal(t, ownership.Critical, rs[0].Severity)
	require.Equal(t, []string{"b0", "b1"}, rs[0].Ports)
	require.Contains(t, rs[0].Cause, "hosts that lost their paths to it: h1")
	st, err := c.Status()
	require.NoError(t, err)
	require.False(t, st.Nodes[1].Up)
	require.Equal(t, 1, st.Reports["critical"])

	_, err = c.Inject(api.Fault{Kind: api.FaultRestart, Node: "b"})
	require.NoError(t, err)
	waitReports(t, c, "node offline cleared", func(rs []reports.Report) bool {
		for _, r := range rs {
			if r.Condition == ownership.NodeOffline {
				return false
			}
		}
		return true
	})
}
