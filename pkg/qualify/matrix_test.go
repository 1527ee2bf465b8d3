package qualify

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestColumn(t *testing.T) {
	for _, tc := range []struct {
		st   Step
		want string
	}{
		{Step{Event: "discovery", Name: "paths at the start"}, ""},
		{Step{Event: EvMove, Name: "move LUN 0 to b", Cause: "manual"}, "planned move"},
		{Step{Event: EvRebalance, Name: "skew: every LUN onto a", Cause: "manual"}, ""},
		{Step{Event: EvRebalance, Name: "rebalance by the array", Cause: "balance"}, "rebalance"},
		{Step{Event: EvRebalance, Name: "restore: every LUN to its preferred owner", Cause: "manual"}, ""},
		{Step{Event: EvPort, Name: "port a0 down"}, "port loss"},
		{Step{Event: EvFail, Name: "node a power-loss (failover)", Cause: "failover"}, "controller power loss"},
		{Step{Event: EvFail, Name: "node b panic (failover)", Cause: "failover"}, "controller panic"},
		{Step{Event: EvFail, Name: "node a restart (failback)", Cause: "failback"}, "failback"},
		{Step{Event: EvUpgrade, Name: "upgrade a: drain", Cause: "manual"}, "rolling upgrade"},
	} {
		assert.Equal(t, tc.want, Column(tc.st), tc.st.Name)
	}
}

// sampleMatrix: three runs of two hosts. h1 (trixie, alua, right type)
// follows everything; h2 (bullseye, defaults, wrong type) never follows
// the second planned move in run 2 (a finding with advice), and the
// failback moves none of its LUNs (the array withheld it): judged pass
// by qualify, not exercised in the matrix.
func sampleMatrix() Matrix {
	f := func(v float64) *float64 { return &v }
	steps := []Step{
		{Index: 0, Event: "discovery"},
		{Index: 1, Event: EvMove, Name: "move LUN 0 to b", Cause: "manual"},
		{Index: 2, Event: EvMove, Name: "move LUN 0 to a", Cause: "manual"},
		{Index: 3, Event: EvFail, Name: "node a power-loss (failover)", Cause: "failover"},
		{Index: 4, Event: EvFail, Name: "node a restart (failback)", Cause: "failback"},
	}
	run := func(follow1, follow2, stall float64, h2Never bool) *Report {
		r := &Report{Schedule: "matrix", Steps: steps, Start: time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)}
		h2second := f(follow2)
		verdict2 := "pass"
		if h2Never {
			h2second, verdict2 = f(-1), "fail"
			r.Findings = append(r.Findings, Finding{Host: "h2", Step: 2, Check: "follow", Observed: "never", Advice: "set failback immediate"})
		}
		r.Results = []Result{
			{Host: "h1", Step: 0, Verdict: "pass"},
			{Host: "h1", Step: 1, FollowMs: f(follow1), StallMs: stall, Verdict: "pass"},
			{Host: "h1", Step: 2, FollowMs: f(follow2), StallMs: stall / 2, Verdict: "pass"},
			{Host: "h1", Step: 3, FollowMs: f(9000), StallMs: 9000, Verdict: "pass"},
			{Host: "h1", Step: 4, FollowMs: f(3000), StallMs: 100, Verdict: "pass"},
			{Host: "h2", Step: 1, FollowMs: f(follow1), StallMs: stall, Verdict: "pass"},
			{Host: "h2", Step: 2, FollowMs: h2second, StallMs: stall, Verdict: verdict2},
			{Host: "h2", Step: 3, FollowMs: f(8000), StallMs: 8000, Verdict: "pass"},
			{Host: "h2", Step: 4, StallMs: 50, Verdict: "pass"},
		}
		return r
	}
	hosts := []MatrixHost{
		{Host: "h1", Row: MatrixRow{Release: "trixie", Config: "alua", Type: "linux", Right: true, Stack: "Debian 13.8"}},
		{Host: "h2", Row: MatrixRow{Release: "bullseye", Config: "defaults", Type: "linux", Right: false}},
	}
	// The stack is known in one run only: the same row all the same.
	noStack := slices.Clone(hosts)
	noStack[0].Row.Stack = ""
	return BuildMatrix([]MatrixRun{
		{Report: run(1000, 2000, 400, false), Hosts: noStack},
		{Report: run(3000, 1500, 800, true), Hosts: hosts},
		{Report: run(2000, 2500, 600, false), Hosts: noStack},
	}, []string{"bullseye", "bookworm", "trixie", "sid"})
}

func TestBuildMatrix(t *testing.T) {
	m := sampleMatrix()

	assert.Equal(t, 3, m.Runs)
	assert.Equal(t, "matrix", m.Schedule)
	assert.Equal(t, []string{"planned move", "controller power loss", "failback"}, m.Columns)
	require.Len(t, m.Rows, 2)
	// bullseye before trixie: the releases' order, not the runs'.
	assert.Equal(t, "bullseye", m.Rows[0].Row.Release)
	h2, h1 := m.Rows[0], m.Rows[1]

	// h1's planned moves: the slower of the two moves of each run
	// (2000, 3000, 2500), their median and spread; the stall the longer.
	mv := h1.Cells[0]
	assert.Equal(t, "planned move", mv.Column)
	assert.Equal(t, Spread{Median: 2500, Min: 2000, Max: 3000, N: 3}, mv.Follow)
	assert.Equal(t, Spread{Median: 600, Min: 400, Max: 800, N: 3}, mv.Stall)
	assert.Equal(t, "pass", mv.Verdict)
	assert.Len(t, mv.Runs, 3)
	green, n := h1.Green(3)
	assert.True(t, green)
	assert.Equal(t, 3, n)
	assert.Equal(t, "Debian 13.8", h1.Row.Stack)
	green, _ = h1.Green(4)
	assert.False(t, green, "three runs are not the four asked for")

	// h2: one run never followed: mixed, the advice kept once, the never
	// counted apart from the follows that happened.
	mv2 := h2.Cells[0]
	assert.Equal(t, "mixed", mv2.Verdict)
	assert.Equal(t, 1, mv2.Never)
	assert.Equal(t, 2, mv2.Follow.N)
	assert.Equal(t, []string{"set failback immediate"}, mv2.Advice)
	assert.Contains(t, mv2.Runs[1].Failures[0], "move LUN 0 to a: follow: never")
	// The failback moved none of its LUNs: not exercised, no figures.
	assert.Equal(t, "not exercised", h2.Cells[2].Verdict)
	assert.Equal(t, 0, h2.Cells[2].Stall.N)
	green, _ = h2.Green(3)
	assert.False(t, green)
}

func TestBuildMatrixErrors(t *testing.T) {
	m := BuildMatrix([]MatrixRun{{Report: nil}, {Report: &Report{Schedule: "matrix", Error: "hosts not ready"}}}, nil)
	assert.Equal(t, []string{"run 1: no report", "run 2: hosts not ready"}, m.Errors)
	assert.Empty(t, m.Rows)
}

func TestSpread(t *testing.T) {
	assert.Equal(t, Spread{}, spread(nil))
	assert.Equal(t, Spread{Median: 5, Min: 5, Max: 5, N: 1}, spread([]float64{5}))
	assert.Equal(t, Spread{Median: 3, Min: 1, Max: 9, N: 4}, spread([]float64{9, 1, 2, 4}))
	assert.Equal(t, "-", Spread{}.String())
}

func TestMatrixOutputs(t *testing.T) {
	m := sampleMatrix()
	var md bytes.Buffer
	WriteMatrixMarkdown(&md, m)
	assert.Contains(t, md.String(), "| bullseye | defaults | linux (wrong) | mixed 2/3, follow 2250 ms (2000 ms-2500 ms) (never in 1), stall 600 ms (400 ms-800 ms) | pass 3/3, follow 8000 ms, stall 8000 ms | not exercised |")
	assert.Contains(t, md.String(), "| trixie | alua | linux | pass 3/3, follow 2500 ms (2000 ms-3000 ms), stall 600 ms (400 ms-800 ms) |")
	assert.Contains(t, md.String(), "- bullseye, defaults, linux (wrong), planned move: set failback immediate")

	var js bytes.Buffer
	require.NoError(t, WriteMatrixJSON(&js, m))
	var back Matrix
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	assert.Equal(t, m.Rows[1].Cells[0].Follow, back.Rows[1].Cells[0].Follow)

	// Two rows, one mixed cell failed, h2's idle failback skipped.
	var ju bytes.Buffer
	require.NoError(t, WriteMatrixJUnit(&ju, m))
	checkJUnit(t, ju.Bytes(), 2, 1, 1, 0)
	assert.Contains(t, ju.String(), "run 2: move LUN 0 to a: follow: never")

	m.Rows[0].Row.Config = "<b>x</b>"
	var h bytes.Buffer
	require.NoError(t, WriteMatrixHTML(&h, m))
	assert.Contains(t, h.String(), "&lt;b&gt;x&lt;/b&gt;")
	assert.Contains(t, h.String(), `<td class="mixed"`)
	assert.Contains(t, h.String(), `<td class="na"`)
}

func TestRecommend(t *testing.T) {
	// cell: a column with runs runs of that verdict (pass: all of them
	// passed; fail and mixed: not).
	cell := func(col, verdict string, stall float64, runs int) Cell {
		c := Cell{Column: col, Verdict: verdict, Stall: Spread{Median: stall, Min: stall, Max: stall, N: runs}, Measured: runs}
		for i := 0; i < runs; i++ {
			c.Runs = append(c.Runs, CellRun{Run: i + 1, Verdict: verdict})
		}
		if verdict == "pass" {
			c.Passed = runs
		}
		return c
	}
	row := func(rel, cfg, typ string, right bool, cells ...Cell) MatrixRowResult {
		return MatrixRowResult{Row: MatrixRow{Release: rel, Config: cfg, Type: typ, Right: right}, Cells: cells}
	}
	m := Matrix{Columns: []string{"planned move", "failback"}, Rows: []MatrixRowResult{
		// bookworm: two green rows, the one with less stall wins; a row
		// measured in fewer runs than asked is not eligible however good;
		// the wrong-type row never counts.
		row("bookworm", "alua", "linux-dmmp", true, cell("planned move", "pass", 800, 3), cell("failback", "pass", 900, 3)),
		row("bookworm", "alua", "linux", false, cell("planned move", "pass", 10, 3), cell("failback", "pass", 10, 3)),
		row("bookworm", "defaults", "linux-dmmp", true, cell("planned move", "pass", 300, 3), cell("failback", "pass", 400, 3)),
		row("bookworm", "multibus", "linux-dmmp", true, cell("planned move", "pass", 1, 1), cell("failback", "pass", 1, 1)),
		// sid: nothing green; the fewest failing cells; an unmeasured row
		// (every cell n/a: its guest never came up) is not "closest".
		row("sid", "defaults", "linux-dmmp", true, cell("planned move", "fail", 300, 3), cell("failback", "mixed", 400, 3)),
		row("sid", "followover", "linux-dmmp", true, cell("planned move", "fail", 900, 3), cell("failback", "pass", 400, 3)),
		row("sid", "none", "legacy", true, cell("planned move", "n/a", 0, 0), cell("failback", "n/a", 0, 0)),
		// trixie: the right-type row not exercised; the wrong-type row green.
		row("trixie", "alua", "linux-dmmp", true, cell("planned move", "pass", 5, 3), cell("failback", "not exercised", 0, 3)),
		row("trixie", "alua", "linux", false, cell("planned move", "pass", 5, 3), cell("failback", "pass", 5, 3)),
		// bullseye: nothing measured.
		row("bullseye", "none", "legacy", true, cell("planned move", "n/a", 0, 0), cell("failback", "n/a", 0, 0)),
	}}
	recs := Recommend(m, 3)
	require.Len(t, recs, 4)
	assert.Equal(t, "defaults", recs[0].Row.Config)
	assert.True(t, recs[0].Green)
	assert.Equal(t, 700.0, recs[0].StallMs)
	assert.Nil(t, recs[0].Instead)

	assert.Equal(t, "followover", recs[1].Row.Config)
	assert.False(t, recs[1].Green)
	require.Len(t, recs[1].Failing, 1)
	assert.Contains(t, recs[1].Failing[0], "planned move (fail 0/3")

	// A cell not exercised is not measured: the right-type row is not
	// eligible, and the wrong-type row that passed is named.
	assert.True(t, recs[2].Unmeasured)
	require.NotNil(t, recs[2].Instead)
	assert.Equal(t, "linux", recs[2].Instead.Type)

	assert.True(t, recs[3].Unmeasured)
	assert.Empty(t, recs[3].Row.Config)
}
