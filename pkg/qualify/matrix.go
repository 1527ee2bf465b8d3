package qualify

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// An interoperability matrix is many qualify runs read together: each
// run qualifies several hosts, each host is one row (a release, a
// multipath configuration, the host type it was declared with), and each
// kind of event the schedule made is a column. A cell holds every run's
// figures for that host and event, and their median and spread.

// MatrixRow names one row: a host stack and how it was declared.
type MatrixRow struct {
	Release string `json:"release"` // e.g. bookworm
	Stack   string `json:"stack,omitempty"`
	Config  string `json:"config"` // the multipath configuration's name
	Type    string `json:"type"`   // the host type declared to the array
	// Right: Type is the host type the array should be told for this
	// configuration (the other row of the pair declares a wrong one).
	Right bool `json:"right"`
}

func (r MatrixRow) key() string { return r.Release + "/" + r.Config + "/" + r.Type }

// MatrixHost ties a host of one run's report to its row.
type MatrixHost struct {
	Host string
	Row  MatrixRow
}

// MatrixRun is one qualify run and the rows of its hosts.
type MatrixRun struct {
	Report *Report
	Hosts  []MatrixHost
	// Dir is where the run's own results and report live.
	Dir string
}

// CellRun is one run's figures for a row and column: the slowest follow
// and the longest stall over the column's steps.
type CellRun struct {
	Run      int      `json:"run"`
	FollowMs *float64 `json:"follow_ms,omitempty"` // nil: nothing to follow; -1: never
	StallMs  float64  `json:"stall_ms"`
	Verdict  string   `json:"verdict"` // pass, fail, n/a
	Failures []string `json:"failures,omitempty"`
}

// Spread is a median with the smallest and largest value it was taken
// over.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func (s Spread) String() string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmtMs(s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", fmtMs(s.Median), fmtMs(s.Min), fmtMs(s.Max))
}

// Cell is one row and column over every run.
type Cell struct {
	Column string    `json:"column"`
	Runs   []CellRun `json:"runs"`
	// Follow is over the runs that followed; Never counts the runs whose
	// I/O never reached the new owner.
	Follow Spread `json:"follow_ms"`
	Never  int    `json:"never"`
	Stall  Spread `json:"stall_ms"`
	// Verdict: pass (every run), fail (every run), mixed (some of each,
	// or passes beside runs that did not exercise it), not exercised (the
	// event moved none of the host's LUNs in any run), n/a (no run had
	// the event for this host). Passed of Measured runs passed.
	Verdict  string   `json:"verdict"`
	Passed   int      `json:"passed"`
	Measured int      `json:"measured"`
	Advice   []string `json:"advice,omitempty"`
}

// MatrixRowResult is a row with its cells, in the matrix's column order.
type MatrixRowResult struct {
	Row   MatrixRow `json:"row"`
	Cells []Cell    `json:"cells"`
}

// Matrix is the whole table.
type Matrix struct {
	Schedule string            `json:"schedule"`
	Runs     int               `json:"runs"`
	Start    time.Time         `json:"start"` // the first run's
	Columns  []string          `json:"columns"`
	Rows     []MatrixRowResult `json:"rows"`
	// Errors are the runs that ended early, with why.
	Errors []string `json:"errors,omitempty"`
}

// Column is the matrix column of a step ("" for none: the discovery).
func Column(st Step) string {
	switch st.Event {
	case EvMove:
		return "planned move"
	case EvRebalance:
		// The array's own balance; the operator's skew before it and the
		// restore after are set-up.
		if st.Cause != "balance" {
			return ""
		}
		return "rebalance"
	case EvPort:
		return "port loss"
	case EvUpgrade:
		return "rolling upgrade"
	case EvFail:
		if st.Cause == "failback" {
			return "failback"
		}
		// "node a power-loss (failover)"
		if f := strings.Fields(st.Name); len(f) >= 3 {
			return "controller " + strings.ReplaceAll(f[2], "-", " ")
		}
		return "controller failure"
	}
	return ""
}

// BuildMatrix reads the runs into one matrix: rows in the order of
// release (as releases lists them, unknown ones last), configuration and
// right before wrong type; columns in the order the first run's schedule
// made them.
func BuildMatrix(runs []MatrixRun, releases []string) Matrix {
	m := Matrix{Runs: len(runs)}
	type key struct {
		row MatrixRow
		col string
	}
	cells := map[key]*Cell{}
	rows := map[MatrixRow]bool{}
	stacks := map[string]string{}
	moved := map[key]map[int]bool{} // row and column -> the runs in which a LUN of the host moved
	for i, run := range runs {
		rep := run.Report
		if rep == nil {
			m.Errors = append(m.Errors, fmt.Sprintf("run %d: no report", i+1))
			continue
		}
		if m.Schedule == "" {
			m.Schedule = rep.Schedule
		}
		if m.Start.IsZero() || rep.Start.Before(m.Start) {
			m.Start = rep.Start
		}
		if rep.Error != "" {
			m.Errors = append(m.Errors, fmt.Sprintf("run %d: %s", i+1, rep.Error))
		}
		for _, st := range rep.Steps {
			if c := Column(st); c != "" && !slices.Contains(m.Columns, c) {
				m.Columns = append(m.Columns, c)
			}
		}
		for _, h := range run.Hosts {
			if h.Row.Stack != "" {
				stacks[h.Row.key()] = h.Row.Stack
			}
			h.Row.Stack = "" // part of what the row is, not of which row it is
			rows[h.Row] = true
			per := map[string]*CellRun{}
			var order []string
			for _, res := range rep.Results {
				if res.Host != h.Host || res.Step <= 0 || res.Step >= len(rep.Steps) {
					continue
				}
				st := rep.Steps[res.Step]
				col := Column(st)
				if col == "" {
					continue
				}
				cr := per[col]
				if cr == nil {
					cr = &CellRun{Run: i + 1, Verdict: "n/a"}
					per[col] = cr
					order = append(order, col)
				}
				cr.StallMs = max(cr.StallMs, res.StallMs)
				if res.FollowMs != nil {
					k := key{h.Row, col}
					if moved[k] == nil {
						moved[k] = map[int]bool{}
					}
					moved[k][i+1] = true
				}
				if f := res.FollowMs; f != nil {
					switch {
					case cr.FollowMs == nil || *f < 0:
						cr.FollowMs = f
					case *cr.FollowMs >= 0 && *f > *cr.FollowMs:
						cr.FollowMs = f
					}
				}
				switch {
				case res.Verdict == "fail":
					cr.Verdict = "fail"
				case res.Verdict == "pass" && cr.Verdict == "n/a":
					cr.Verdict = "pass"
				}
				for _, f := range rep.Findings {
					if f.Host == h.Host && f.Step == res.Step {
						cr.Failures = append(cr.Failures, fmt.Sprintf("%s: %s: %s", st.Name, f.Check, f.Observed))
						k := key{h.Row, col}
						if cells[k] == nil {
							cells[k] = &Cell{Column: col}
						}
						if f.Advice != "" && !slices.Contains(cells[k].Advice, f.Advice) {
							cells[k].Advice = append(cells[k].Advice, f.Advice)
						}
					}
				}
			}
			for _, col := range order {
				k := key{h.Row, col}
				if cells[k] == nil {
					cells[k] = &Cell{Column: col}
				}
				cells[k].Runs = append(cells[k].Runs, *per[col])
			}
		}
	}
	var keys []MatrixRow
	for r := range rows {
		keys = append(keys, r)
	}
	relIdx := func(r string) int {
		if i := slices.Index(releases, r); i >= 0 {
			return i
		}
		return len(releases)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if relIdx(a.Release) != relIdx(b.Release) {
			return relIdx(a.Release) < relIdx(b.Release)
		}
		if a.Release != b.Release {
			return a.Release < b.Release
		}
		if a.Config != b.Config {
			return a.Config < b.Config
		}
		if a.Right != b.Right {
			return a.Right
		}
		return a.Type < b.Type
	})
	for _, r := range keys {
		rr := MatrixRowResult{Row: r}
		rr.Row.Stack = stacks[r.key()]
		for _, col := range m.Columns {
			c := cells[key{r, col}]
			if c == nil {
				c = &Cell{Column: col}
			}
			// An event that should move the host's LUNs but moved none of
			// them in a run (the array withheld a failback, saw nothing to
			// balance) did not exercise the host: not a pass.
			if col != "port loss" {
				for j := range c.Runs {
					if c.Runs[j].Verdict == "pass" && !moved[key{r, col}][c.Runs[j].Run] {
						c.Runs[j].Verdict = "not exercised"
					}
				}
			}
			c.summarise()
			rr.Cells = append(rr.Cells, *c)
		}
		m.Rows = append(m.Rows, rr)
	}
	return m
}

// summarise takes the median and spread of the cell's runs and its
// verdict.
func (c *Cell) summarise() {
	var follows, stalls []float64
	pass, fail, idle := 0, 0, 0
	for _, r := range c.Runs {
		switch r.Verdict {
		case "pass":
			pass++
		case "fail":
			fail++
		case "not exercised":
			idle++
			continue
		default:
			continue
		}
		stalls = append(stalls, r.StallMs)
		if r.FollowMs != nil {
			if *r.FollowMs < 0 {
				c.Never++
			} else {
				follows = append(follows, *r.FollowMs)
			}
		}
	}
	c.Follow, c.Stall = spread(follows), spread(stalls)
	c.Passed, c.Measured = pass, pass+fail
	switch {
	case pass+fail == 0 && idle > 0:
		c.Verdict = "not exercised"
	case pass+fail == 0:
		c.Verdict = "n/a"
	case fail == 0 && idle > 0:
		c.Verdict = "mixed"
	case fail == 0:
		c.Verdict = "pass"
	case pass == 0:
		c.Verdict = "fail"
	default:
		c.Verdict = "mixed"
	}
}

// spread is the median (the mean of the middle two of an even count),
// smallest and largest of xs.
func spread(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	mid := s[len(s)/2]
	if len(s)%2 == 0 {
		mid = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: mid, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// Green says whether every cell of the row passed in at least runs runs
// and failed in none (a cell not measured, or not exercised, is not
// green), and how many cells passed.
func (r MatrixRowResult) Green(runs int) (bool, int) {
	n, green := 0, len(r.Cells) > 0
	for _, c := range r.Cells {
		if c.Verdict == "pass" && c.Passed >= runs {
			n++
		} else {
			green = false
		}
	}
	return green, n
}

// cellText is a cell as one line: its verdict, follow and stall.
func (c Cell) cellText() string {
	if c.Verdict == "n/a" || c.Verdict == "not exercised" {
		return c.Verdict
	}
	s := fmt.Sprintf("%s %d/%d", c.Verdict, c.Passed, len(c.Runs))
	switch {
	case c.Follow.N > 0 && c.Never > 0:
		s += fmt.Sprintf(", follow %s (never in %d)", c.Follow, c.Never)
	case c.Follow.N > 0:
		s += ", follow " + c.Follow.String()
	case c.Never > 0:
		s += fmt.Sprintf(", follow never (%d of %d runs)", c.Never, c.Stall.N)
	}
	return s + ", stall " + c.Stall.String()
}

func (r MatrixRow) declared() string {
	if r.Right {
		return r.Type
	}
	return r.Type + " (wrong)"
}

// WriteMatrixMarkdown writes the matrix as a Markdown table, then each
// failing cell's advice.
func WriteMatrixMarkdown(w io.Writer, m Matrix) {
	fmt.Fprintf(w, "| release | configuration | declared as |")
	for _, c := range m.Columns {
		fmt.Fprintf(w, " %s |", c)
	}
	fmt.Fprintf(w, "\n|---|---|---|%s\n", strings.Repeat("---|", len(m.Columns)))
	for _, r := range m.Rows {
		fmt.Fprintf(w, "| %s | %s | %s |", r.Row.Release, r.Row.Config, r.Row.declared())
		for _, c := range r.Cells {
			fmt.Fprintf(w, " %s |", c.cellText())
		}
		fmt.Fprintln(w)
	}
	first := true
	for _, r := range m.Rows {
		for _, c := range r.Cells {
			if len(c.Advice) == 0 {
				continue
			}
			if first {
				fmt.Fprintf(w, "\nAdvice for the cells that failed:\n\n")
				first = false
			}
			fmt.Fprintf(w, "- %s, %s, %s, %s: %s\n", r.Row.Release, r.Row.Config, r.Row.declared(), c.Column, strings.Join(c.Advice, "; "))
		}
	}
	for _, e := range m.Errors {
		fmt.Fprintf(w, "\nRun error: %s\n", e)
	}
}

// WriteMatrixJSON writes the matrix as indented JSON.
func WriteMatrixJSON(w io.Writer, m Matrix) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}

// WriteMatrixJUnit writes the matrix as JUnit XML: a test suite per row,
// a test case per column; a cell that failed in any run is a failure
// with the runs' findings and the advice, one without its event skipped.
func WriteMatrixJUnit(w io.Writer, m Matrix) error {
	out := junitSuites{Name: "aluad interoperability matrix " + m.Schedule, Time: "0"}
	ts := m.Start.UTC().Format("2006-01-02T15:04:05")
	for _, r := range m.Rows {
		name := fmt.Sprintf("%s / %s / %s", r.Row.Release, r.Row.Config, r.Row.declared())
		s := junitSuite{Name: name, Time: "0", Timestamp: ts, Properties: []junitProperty{{"release", r.Row.Release}, {"stack", r.Row.Stack},
			{"config", r.Row.Config}, {"host_type", r.Row.Type}, {"right_type", strconv.FormatBool(r.Row.Right)}}}
		for _, c := range r.Cells {
			jc := junitCase{Name: c.Column, Classname: "aluad.matrix." + r.Row.Release + "." + r.Row.Config + "." + r.Row.Type,
				Time: "0", SystemOut: c.cellText()}
			switch c.Verdict {
			case "n/a":
				jc.Skipped = &junitMessage{Message: "no run had this event for the host"}
				s.Skipped++
			case "not exercised":
				jc.Skipped = &junitMessage{Message: "the event moved none of the host's LUNs in any run"}
				s.Skipped++
			case "fail", "mixed":
				var body []string
				for _, run := range c.Runs {
					for _, f := range run.Failures {
						body = append(body, fmt.Sprintf("run %d: %s", run.Run, f))
					}
				}
				body = append(body, c.Advice...)
				jc.Failures = []junitFail{{Message: c.cellText(), Type: c.Verdict, Body: strings.Join(body, "\n")}}
				s.Failures++
			}
			s.Tests++
			s.Cases = append(s.Cases, jc)
		}
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Suites = append(out.Suites, s)
	}
	if len(m.Errors) > 0 {
		s := junitSuite{Name: "runs", Time: "0", Timestamp: ts, Tests: 1, Errors: 1, Cases: []junitCase{{Name: "every run ran its schedule to the end",
			Classname: "aluad.matrix.runs", Time: "0", Errors: []junitFail{{Message: m.Errors[0], Type: "error", Body: strings.Join(m.Errors, "\n")}}}}}
		out.Tests++
		out.Errors++
		out.Suites = append(out.Suites, s)
	}
	return encodeJUnit(w, out)
}

// WriteMatrixHTML writes the matrix as one HTML page: a row per host
// stack and declaration, a cell per event coloured by its verdict, with
// each run's figures and the advice on the cell.
func WriteMatrixHTML(w io.Writer, m Matrix) error {
	e := html.EscapeString
	var b strings.Builder
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>aluad interoperability matrix</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:4px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.pass{background:#e8f5e9} td.fail{background:#fdecea} td.mixed{background:#fff8e1} td.na{color:#888}
.small{color:#666;font-size:12px} .advice{font-size:11px;color:#2e7d32}
</style></head><body>
<h1>aluad interoperability matrix: schedule <code>%s</code>, %d runs</h1>
<p class="small">Each cell: the verdict over every run (pass, fail, mixed), the follow and the stall as median (min-max) over the runs, measured at the array. Hover a cell for each run.</p>
<table><tr><th>release</th><th>configuration</th><th>declared as</th>`, e(m.Schedule), m.Runs)
	for _, c := range m.Columns {
		fmt.Fprintf(&b, "<th>%s</th>", e(c))
	}
	b.WriteString("</tr>\n")
	for _, r := range m.Rows {
		fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%s</td>`, e(r.Row.Release)+`<div class="small">`+e(r.Row.Stack)+`</div>`, e(r.Row.Config), e(r.Row.declared()))
		for _, c := range r.Cells {
			var runs []string
			for _, run := range c.Runs {
				f := "-"
				if run.FollowMs != nil {
					f = fmtMs(*run.FollowMs)
				}
				runs = append(runs, fmt.Sprintf("run %d: %s, follow %s, stall %s", run.Run, run.Verdict, f, fmtMs(run.StallMs)))
			}
			cls := c.Verdict
			if cls == "n/a" || cls == "not exercised" {
				cls = "na"
			}
			fmt.Fprintf(&b, `<td class="%s" title="%s">%s`, cls, e(strings.Join(runs, "\n")), e(c.cellText()))
			for _, a := range c.Advice {
				fmt.Fprintf(&b, `<div class="advice">%s</div>`, e(a))
			}
			b.WriteString("</td>")
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n")
	for _, er := range m.Errors {
		fmt.Fprintf(&b, "<p>Run error: %s</p>\n", e(er))
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Recommendation is the configuration to use on one release: the row
// declared with its right type that passed every cell in every run (at
// least the runs asked for) with the least stall, or, when none did, the
// fully measured one with the fewest failing cells.
type Recommendation struct {
	Release string    `json:"release"`
	Row     MatrixRow `json:"row"`
	Green   bool      `json:"green"`
	// Failing lists the cells that did not pass (when not Green).
	Failing []string `json:"failing,omitempty"`
	// StallMs is the sum of the row's median stalls, the tie-breaker.
	StallMs float64 `json:"stall_ms"`
	// Unmeasured: no row declared right was measured in every cell for
	// the runs asked; Row is then empty.
	Unmeasured bool `json:"unmeasured,omitempty"`
	// Instead: a row declared with the type thought wrong passed every
	// cell while Row did not: the host type advice is off for it.
	Instead *MatrixRow `json:"instead,omitempty"`
}

// Recommend picks a configuration per release from the matrix, in the
// matrix's release order; a cell counts only with runs runs or more.
func Recommend(m Matrix, runs int) []Recommendation {
	var out []Recommendation
	idx := map[string]int{}
	for _, r := range m.Rows {
		if _, seen := idx[r.Row.Release]; !seen {
			idx[r.Row.Release] = len(out)
			out = append(out, Recommendation{Release: r.Row.Release, Unmeasured: true})
		}
		cur := &out[idx[r.Row.Release]]
		green, _ := r.Green(runs)
		if !r.Row.Right {
			if green && cur.Instead == nil {
				row := r.Row
				cur.Instead = &row
			}
			continue
		}
		rec := Recommendation{Release: r.Row.Release, Row: r.Row, Green: green}
		measured := len(r.Cells) > 0
		for _, c := range r.Cells {
			rec.StallMs += c.Stall.Median
			if (c.Verdict != "pass" && c.Verdict != "fail" && c.Verdict != "mixed") || len(c.Runs) < runs {
				measured = false
			}
			if c.Verdict != "pass" {
				rec.Failing = append(rec.Failing, c.Column+" ("+c.cellText()+")")
			}
		}
		if !measured {
			continue
		}
		better := cur.Unmeasured || rec.Green && !cur.Green ||
			rec.Green == cur.Green && (len(rec.Failing) < len(cur.Failing) ||
				len(rec.Failing) == len(cur.Failing) && rec.StallMs < cur.StallMs)
		if better {
			rec.Instead = cur.Instead
			*cur = rec
		}
	}
	for i := range out {
		if out[i].Green {
			out[i].Instead = nil
		}
	}
	return out
}
