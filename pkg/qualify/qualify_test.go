package qualify

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSchedule(t *testing.T) {
	for name := range Builtin {
		s, err := LoadBuiltin(name)
		require.NoError(t, err, name)
		assert.Equal(t, name, s.Name)
		assert.NotEmpty(t, s.Events)
	}
	s, err := ParseSchedule(strings.NewReader("settle 1s\nfollow 2s # comment\nmove luns=0,3\nfail node=b kind=panic down=3s\n"))
	require.NoError(t, err)
	assert.Equal(t, time.Second, s.Settle)
	assert.Equal(t, 2*time.Second, s.Follow)
	require.Len(t, s.Events, 2)
	assert.Equal(t, "0,3", s.Events[0].Args["luns"])
	assert.Equal(t, 3*time.Second, s.Events[1].duration("down", 0))
	assert.Equal(t, 4, s.Events[1].Line)

	for _, tc := range []struct{ src, want string }{
		{"", "no events"},
		{"dance\n", `unknown directive "dance"`},
		{"move luns\n", "not key=value"},
		{"move lun=1\n", "move takes luns"},
		{"move luns=x\n", "LUN numbers"},
		{"fail kind=panic\n", "fail needs node="},
		{"fail node=a kind=meltdown\n", "power-loss, panic or crash"},
		{"fail node=a down=forever\n", "down="},
		{"settle -1s\nmove\n", "between 0 and 1h"},
		{"name\nmove\n", "name takes one word"},
		{"port ports=a0 ports=a1\n", "given twice"},
	} {
		_, err := ParseSchedule(strings.NewReader(tc.src))
		if assert.Error(t, err, tc.src) {
			assert.Contains(t, err.Error(), tc.want, tc.src)
		}
	}
	_, err = LoadBuiltin("slow")
	assert.ErrorContains(t, err, "no built-in schedule")
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range Builtin {
		f.Add(s)
	}
	f.Add("move luns=1,2,3\nupgrade nodes=a,b down=0s\nrebalance node=b\n")
	f.Fuzz(func(t *testing.T, src string) {
		s, err := ParseSchedule(strings.NewReader(src))
		if err != nil {
			return
		}
		if len(s.Events) == 0 || s.Name == "" || s.Settle < 0 || s.Follow < 0 {
			t.Fatalf("accepted a schedule it should not: %+v", s)
		}
		for _, e := range s.Events {
			if _, ok := eventArgs[e.Kind]; !ok {
				t.Fatalf("event kind %q accepted", e.Kind)
			}
		}
	})
}

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits(strings.NewReader("types:\n  \"*\":\n    failover_stall: 20s\n  linux:\n    planned_follow: 10s\n    rtpg: false\n"))
	require.NoError(t, err)
	assert.Equal(t, 20*time.Second, l.For("windows").FailoverStall, "the default type applies to types not listed")
	lin := l.For("linux")
	assert.Equal(t, 10*time.Second, lin.PlannedFollow)
	assert.Equal(t, 20*time.Second, lin.FailoverStall, "a listed type starts from the default type")
	assert.False(t, lin.RTPG)
	assert.True(t, lin.Follow)
	assert.False(t, l.For("legacy").Follow, "the built-in legacy limits stay")
	for _, tc := range []struct{ src, want string }{
		{"types:\n  solaris:\n    rtpg: true\n", `unknown host type "solaris"`},
		{"types:\n  linux:\n    planed_follow: 1s\n", "planed_follow"},
		{"types:\n  linux:\n    port_stall: -1s\n", "positive"},
		{"kinds: {}\n", "kinds"},
	} {
		_, err := ParseLimits(strings.NewReader(tc.src))
		if assert.Error(t, err, tc.src) {
			assert.Contains(t, err.Error(), tc.want, tc.src)
		}
	}
}

const ms1 = int64(time.Millisecond)

// sl is a bucket of n commands arriving and completing at t (ms) via node.
func sl(node string, tms int64, n uint32) slot {
	t := tms * ms1
	return slot{start: t - t%(10*ms1), node: node, arrived: n, good: n, firstArr: t, lastArr: t, firstGood: t, lastGood: t}
}

func TestFollow(t *testing.T) {
	tc := int64(1000) * ms1
	end := int64(10000) * ms1
	for _, c := range []struct {
		name   string
		series []slot
		want   time.Duration
		ok     bool
	}{
		{"moves at once", []slot{sl("a", 900, 1), sl("b", 1003, 1), sl("b", 2000, 1)}, 3 * time.Millisecond, true},
		{"old owner until 1.5 s", []slot{sl("a", 1200, 1), sl("a", 1500, 1), sl("b", 1600, 1), sl("b", 5000, 1)}, 600 * time.Millisecond, true},
		{"new owner late, old meanwhile", []slot{sl("b", 1400, 1), sl("a", 1800, 1), sl("b", 1900, 1)}, 800 * time.Millisecond, true},
		{"still on the old owner near the end", []slot{sl("b", 1100, 1), sl("a", 9500, 1)}, 0, false},
		{"no I/O on the new owner", []slot{sl("a", 1100, 1)}, 0, false},
		{"already on the new owner", []slot{sl("b", 500, 1), sl("b", 1001, 1)}, time.Millisecond, true},
	} {
		d, ok := follow(c.series, "b", tc, end)
		assert.Equal(t, c.ok, ok, c.name)
		if c.ok {
			assert.Equal(t, c.want, d, c.name)
		}
	}
}

func TestLongestGap(t *testing.T) {
	start, end := int64(1000)*ms1, int64(5000)*ms1
	for _, c := range []struct {
		name   string
		series []slot
		want   time.Duration
		idle   bool
	}{
		{"steady", []slot{sl("a", 900, 1), sl("a", 1900, 1), sl("a", 2900, 1), sl("a", 3900, 1), sl("a", 4900, 1)}, time.Second, false},
		{"a gap across the start counts from the start", []slot{sl("a", 500, 1), sl("a", 1700, 1), sl("a", 2000, 1), sl("b", 3000, 1), sl("b", 4000, 1), sl("b", 4900, 1)}, 1000 * time.Millisecond, false},
		{"a gap across the end counts to the end", []slot{sl("a", 900, 1), sl("a", 1500, 1), sl("a", 2000, 1), sl("a", 2500, 1), sl("a", 3000, 1), sl("a", 3500, 1), sl("a", 6000, 1)}, 1500 * time.Millisecond, false},
		{"still stalled", []slot{sl("a", 900, 1), sl("a", 1200, 1)}, 3800 * time.Millisecond, false},
		{"nothing in the step", []slot{sl("a", 100, 1), sl("a", 7000, 1)}, 4000 * time.Millisecond, true},
		{"nothing at all", nil, 4000 * time.Millisecond, true},
		{"two nodes interleaved", []slot{sl("a", 900, 1), sl("b", 1200, 1), sl("a", 1250, 1), sl("b", 1300, 1), sl("a", 4800, 1), sl("a", 5100, 1)}, 3500 * time.Millisecond, false},
	} {
		g, _, idle := longestGap(c.series, start, end)
		assert.Equal(t, c.want, g, c.name)
		assert.Equal(t, c.idle, idle, c.name)
	}
}

func f64(v float64) *float64 { return &v }

func TestJudge(t *testing.T) {
	lim := DefaultLimits().For("linux")
	planned := Step{Index: 1, Name: "move LUN 0 to b", Class: ClassPlanned, Changes: []Change{{LUNs: []uint64{0}, HoldMs: 1.5}}}
	failover := Step{Index: 2, Name: "node a power-loss (failover)", Class: ClassFailure}
	portUp := Step{Index: 3, Name: "port a0 up", Class: ClassPort, Port: "a0"}
	for _, c := range []struct {
		name   string
		typ    string
		st     Step
		res    Result
		hadP   int
		checks []string
		advice string
	}{
		{"follows fast", "linux", planned, Result{StallMs: 40, RTPG: "yes", LUNs: []LUNResult{{LUN: 0, Moved: true, From: "a", To: "b", FollowMs: f64(80), UA: true, RTPG: true, StallMs: 40}}}, 0, nil, ""},
		{"never follows, reads RTPG", "linux", planned, Result{StallMs: 40, RTPG: "yes", LUNs: []LUNResult{{LUN: 0, Moved: true, From: "a", To: "b", FollowMs: f64(-1), UA: true, RTPG: true}}}, 0,
			[]string{"follow"}, "failback immediate"},
		{"never follows, no RTPG", "linux", planned, Result{RTPG: "no", LUNs: []LUNResult{{LUN: 0, Moved: true, From: "a", To: "b", FollowMs: f64(-1), UA: true}}}, 0,
			[]string{"follow"}, "scsi_dh_alua"},
		{"follows at the priority check", "linux", planned, Result{RTPG: "yes", LUNs: []LUNResult{{LUN: 0, Moved: true, From: "a", To: "b", FollowMs: f64(9000), UAMs: f64(2), UA: true, RTPG: true}}}, 0,
			[]string{"follow time"}, "polling_interval"},
		{"long stall and a reset", "linux", planned, Result{StallMs: 31000, TMFs: map[string]int{"lun-reset": 1}, Drops: 1, LUNs: []LUNResult{{LUN: 0, StallMs: 31000}}}, 0,
			[]string{"stall", "task management", "session"}, ""},
		{"legacy need not follow", "legacy", planned, Result{RTPG: "no", LUNs: []LUNResult{{LUN: 0, Moved: true, From: "a", To: "b", FollowMs: f64(-1), UA: true}}}, 0, nil, ""},
		{"failover within the limit", "linux", failover, Result{StallMs: 15000, LUNs: []LUNResult{{LUN: 0, Moved: true, To: "b", FollowMs: f64(15000), StallMs: 15000}}}, 0, nil, ""},
		{"failover too slow", "linux", failover, Result{StallMs: 45000, LUNs: []LUNResult{{LUN: 0, Moved: true, To: "b", FollowMs: f64(45000), StallMs: 45000}}}, 0,
			[]string{"failover stall"}, "fast_io_fail_tmo"},
		{"no relogin after the port returns", "linux", portUp, Result{StallMs: 10, LUNs: []LUNResult{{LUN: 0}}}, 1, []string{"relogin"}, ""},
		{"a host that had no session there need not log in", "linux", portUp, Result{StallMs: 10, LUNs: []LUNResult{{LUN: 0}}}, 0, nil, ""},
		{"no LUNs", "linux", planned, Result{}, 0, nil, ""},
	} {
		res := c.res
		res.Type = c.typ
		judge(&res, c.st, DefaultLimits().For(c.typ), c.hadP)
		var got []string
		for _, f := range res.fails {
			got = append(got, f.check)
			if c.advice != "" {
				assert.Contains(t, f.advice, c.advice, c.name)
			}
		}
		assert.Equal(t, c.checks, got, c.name)
		if len(c.checks) > 0 {
			assert.Equal(t, "fail", res.Verdict, c.name)
		}
	}
	assert.True(t, lim.Follow)
}

// sample is a small report with a pass, a failure and a step that did not
// apply.
func sample() *Report {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	st := []Step{{Index: 0, Name: "paths at the start", Class: ClassDiscovery, Start: t0, End: t0.Add(5 * time.Second)},
		{Index: 1, Name: "move LUN 0 to b", Class: ClassPlanned, Start: t0.Add(5 * time.Second), End: t0.Add(15 * time.Second),
			Changes: []Change{{Time: t0.Add(6 * time.Second), LUNs: []uint64{0}, From: "a", To: "b", Cause: "manual", HoldMs: 1.2}}}}
	rep := &Report{Schedule: "quick", Target: "iqn.2026-11.org.aluad:array", ALUA: "implicit", Nodes: []string{"a", "b"},
		Start: t0, End: t0.Add(15 * time.Second), Steps: st, TimelineBucket: TimelineBucket,
		Hosts: []HostReport{{Name: "h1", Type: "linux-dmmp", LUNs: []uint64{0}, Pass: true, Steps: 2, Nodes: map[string]string{"a": "reaches", "b": "reaches"}},
			{Name: "h<2>", Type: "linux", LUNs: []uint64{0}, Failed: 1, Steps: 2, Nodes: map[string]string{"a": "reaches", "b": "reaches"}},
			{Name: "h3", Type: "linux", Nodes: map[string]string{"a": "reaches", "b": "none"}}},
		Timeline: map[string]map[string][]int{"h1": {"a": {5, 5, 0, 0}, "b": {0, 0, 6, 6}}, "h<2>": {"a": {5, 5, 5, 5}, "b": {0, 0, 0, 0}}}}
	for _, h := range []string{"h1", "h<2>", "h3"} {
		rep.Results = append(rep.Results, Result{Host: h, Step: 0, Verdict: "pass"})
	}
	rep.Results = append(rep.Results,
		Result{Host: "h1", Step: 1, Type: "linux-dmmp", FollowMs: f64(120), StallMs: 40, RTPG: "yes", Verdict: "pass",
			LUNs: []LUNResult{{LUN: 0, Moved: true, From: "a", To: "b", FollowMs: f64(120), StallMs: 40, UA: true, RTPG: true, Checks: map[string]int{"6/2A/06": 1}}}},
		Result{Host: "h<2>", Step: 1, Type: "linux", FollowMs: f64(-1), StallMs: 40, RTPG: "yes", Verdict: "fail", Failures: []string{"follow: x & y"},
			LUNs: []LUNResult{{LUN: 0, Moved: true, From: "a", To: "b", FollowMs: f64(-1), StallMs: 40, UA: true, RTPG: true}}},
		Result{Host: "h3", Step: 1, Type: "linux", Verdict: "n/a"})
	rep.Findings = []Finding{{Host: "h<2>", Type: "linux", Step: 1, StepName: "move LUN 0 to b", Check: "follow",
		Observed: "LUN 0 moved a -> b; I/O still arrived at a & at the end", Advice: "set failback immediate <or> declare linux-dmmp"}}
	rep.Array = []Check{{Name: "trace", OK: true, Detail: "0 dropped"}}
	return rep
}

// TestJUnitValidates checks the JUnit XML against the schema CI systems
// read (xmllint --schema) and that its counts say what the report says.
func TestJUnitValidates(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteJUnit(&b, sample()))
	checkJUnit(t, b.Bytes(), 4, 1, 1, 0)
	// A run that ended early: an error case in the array's suite, and a
	// failed array check fails the gate too.
	rep := sample()
	rep.Error, rep.NotRun = "step 2 (port a0 down): inject: refused", []string{"port a0 up"}
	rep.Array = append(rep.Array, Check{Name: "every LUN on its preferred owner", Detail: "LUN 1 on a"})
	b.Reset()
	require.NoError(t, WriteJUnit(&b, rep))
	checkJUnit(t, b.Bytes(), 4, 2, 1, 1)
	assert.Contains(t, b.String(), "not run: port a0 up")
}

// checkJUnit validates doc against testdata/junit.xsd and checks its
// totals.
func checkJUnit(t *testing.T, doc []byte, suites, failures, skipped, errs int) {
	t.Helper()
	var got junitSuites
	require.NoError(t, xml.Unmarshal(doc, &got))
	require.Len(t, got.Suites, suites)
	f, s, n, e := 0, 0, 0, 0
	for _, su := range got.Suites {
		cf, cs := 0, 0
		e += su.Errors
		for _, c := range su.Cases {
			if len(c.Failures) > 0 {
				cf++
				for _, x := range c.Failures {
					assert.NotEmpty(t, x.Body, "a failure carries its advice")
				}
			}
			if c.Skipped != nil {
				cs++
			}
		}
		assert.Equal(t, su.Failures, cf, su.Name)
		assert.Equal(t, su.Skipped, cs, su.Name)
		assert.Equal(t, su.Tests, len(su.Cases), su.Name)
		f, s, n = f+cf, s+cs, n+len(su.Cases)
	}
	assert.Equal(t, failures, f)
	assert.Equal(t, skipped, s)
	assert.Equal(t, got.Tests, n)
	assert.Equal(t, got.Failures, f)
	assert.Equal(t, errs, e)
	assert.Equal(t, got.Errors, e)
	xmllint, err := exec.LookPath("xmllint")
	if err != nil {
		if os.Getenv("ALUAD_REQUIRE_EXTERNAL") != "" {
			t.Fatal("ALUAD_REQUIRE_EXTERNAL is set but xmllint (libxml2-utils) is not installed")
		}
		t.Log("xmllint not installed: the schema check did not run (scripts/deps.sh installs it)")
		return
	}
	path := t.TempDir() + "/junit.xml"
	require.NoError(t, os.WriteFile(path, doc, 0o644))
	out, err := exec.Command(xmllint, "--noout", "--schema", "testdata/junit.xsd", path).CombinedOutput()
	require.NoError(t, err, "xmllint: %s", out)
	assert.Contains(t, string(out), "validates")
}

func TestOutputsEscapeAndSay(t *testing.T) {
	rep := sample()
	var h, tab, js bytes.Buffer
	require.NoError(t, WriteHTML(&h, rep))
	WriteTable(&tab, rep)
	require.NoError(t, WriteJSON(&js, rep))
	page := h.String()
	assert.Contains(t, page, "h&lt;2&gt;", "host names are escaped")
	assert.NotContains(t, page, "h<2>")
	assert.Contains(t, page, `class="card"`)
	assert.Contains(t, page, "set failback immediate &lt;or&gt; declare linux-dmmp")
	assert.Equal(t, 2, strings.Count(page, "<svg"), "a chart per host with a timeline")
	assert.Contains(t, tab.String(), "FAIL: 3 hosts, 1 steps, 1 findings")
	assert.Contains(t, tab.String(), "-> set failback immediate")
	assert.Contains(t, js.String(), `"follow_ms": -1`)
}

// fakeSource is an array's API with canned answers, for the refusals.
type fakeSource struct {
	st      api.StatusInfo
	hosts   []api.HostInfo
	readers int
}

func (f *fakeSource) Status() (api.StatusInfo, error) { return f.st, nil }
func (f *fakeSource) LUNs() ([]api.LUNInfo, error) {
	return []api.LUNInfo{{ID: 0, Owner: "a", Preferred: "a"}}, nil
}
func (f *fakeSource) Hosts() ([]api.HostInfo, error)               { return f.hosts, nil }
func (f *fakeSource) Move(uint64, string) (*api.ChangeInfo, error) { return nil, errors.New("no") }
func (f *fakeSource) Rebalance() (api.RebalanceReply, error)       { return api.RebalanceReply{}, nil }
func (f *fakeSource) Inject(api.Fault) (api.FaultResult, error)    { return api.FaultResult{}, nil }
func (f *fakeSource) Events(uint64) (api.EventsReply, error)       { return api.EventsReply{}, nil }
func (f *fakeSource) Trace(uint64, uint64, string) (api.TraceReply, error) {
	return api.TraceReply{BucketNs: 1e7, Readers: f.readers}, nil
}
func (f *fakeSource) StopTrace() error { return nil }

func TestRunRefuses(t *testing.T) {
	two := []api.NodeInfo{{Name: "a"}, {Name: "b"}}
	s, err := LoadBuiltin("quick")
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		src  *fakeSource
		want string
	}{
		{"a controller process", &fakeSource{st: api.StatusInfo{Nodes: two, Controller: "a"}}, "controller a's"},
		{"one node", &fakeSource{st: api.StatusInfo{Nodes: two[:1]}}, "fewer than two nodes"},
		{"another run", &fakeSource{st: api.StatusInfo{Nodes: two}, readers: 1}, "another qualification"},
		{"nobody logged in", &fakeSource{st: api.StatusInfo{Nodes: two}}, "no host logged in"},
		{"a declared host without a session", &fakeSource{st: api.StatusInfo{Nodes: two},
			hosts: []api.HostInfo{{Name: "h1", Declared: true}}}, "h1: no session"},
		{"a host with no I/O", &fakeSource{st: api.StatusInfo{Nodes: two},
			hosts: []api.HostInfo{{Name: "h1", Declared: true, Sessions: 2}}}, "h1: logged in, no I/O"},
	} {
		rep, err := Run(context.Background(), Options{Source: c.src, Schedule: s, Wait: 300 * time.Millisecond, Poll: 50 * time.Millisecond})
		assert.Nil(t, rep, c.name)
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	_, err = Run(context.Background(), Options{Source: &fakeSource{st: api.StatusInfo{Nodes: two}}, Schedule: s, Hosts: []string{"h9"},
		Wait: 300 * time.Millisecond})
	assert.ErrorContains(t, err, "h9: not known to the array")
}

// TestHTMLInBrowser loads a report in headless Chromium and checks what
// it rendered: the verdict, a card per finding and a chart per host.
func TestHTMLInBrowser(t *testing.T) {
	bin := os.Getenv("ALUAD_CHROMIUM")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if bin != "" {
			break
		}
		bin, _ = exec.LookPath(name)
	}
	if bin == "" {
		if os.Getenv("ALUAD_REQUIRE_EXTERNAL") != "" {
			t.Fatal("ALUAD_REQUIRE_EXTERNAL is set but no chromium is installed")
		}
		t.Skip("no chromium")
	}
	dir := t.TempDir()
	f, err := os.Create(dir + "/report.html")
	require.NoError(t, err)
	require.NoError(t, WriteHTML(f, sample()))
	require.NoError(t, f.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--user-data-dir="+dir+"/profile", "--dump-dom", "file://"+dir+"/report.html")
	out, err := cmd.Output()
	require.NoError(t, err)
	dom := string(out)
	assert.Contains(t, dom, `<span class="verdict fail">FAIL</span>`)
	assert.Equal(t, 1, strings.Count(dom, `<div class="card">`))
	assert.Equal(t, 2, strings.Count(dom, "<svg"))
	assert.Contains(t, dom, "<polyline")
}

// recorder is a source that records the calls undo makes.
type recorder struct {
	fakeSource
	calls []string
}

func (r *recorder) Inject(f api.Fault) (api.FaultResult, error) {
	r.calls = append(r.calls, f.Kind+" "+f.Port+f.Node)
	return api.FaultResult{}, nil
}

func (r *recorder) Move(l uint64, to string) (*api.ChangeInfo, error) {
	r.calls = append(r.calls, fmt.Sprintf("move %d %s", l, to))
	return nil, nil
}

func (r *recorder) LUNs() ([]api.LUNInfo, error) {
	return []api.LUNInfo{{ID: 0, Owner: "b", Preferred: "a"}, {ID: 1, Owner: "b", Preferred: "b"}}, nil
}

// A run that ends early brings back the port and the node it took down
// and moves the LUNs back to where they were.
func TestUndo(t *testing.T) {
	rec := &recorder{}
	r := &runner{src: rec, rep: &Report{}, pref: map[uint64]string{}, owner: map[uint64]string{},
		downPorts: map[string]bool{"a0": true}, downNodes: map[string]bool{"a": true}, owner0: map[uint64]string{0: "a", 1: "b"},
		undoWait: time.Millisecond}
	r.undo()
	assert.Equal(t, []string{"port-up a0", "restart a", "move 0 a"}, rec.calls)
	assert.Len(t, r.rep.Restored, 3)
}

// The JUnit file of the real-guest example run in docs/ validates too.
func TestExampleJUnit(t *testing.T) {
	b, err := os.ReadFile("../../docs/qualify-example/junit.xml")
	require.NoError(t, err)
	checkJUnit(t, b, 4, 6, 0, 0)
}
