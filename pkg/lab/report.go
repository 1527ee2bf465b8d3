package lab

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

// Reduction is how much lower the implicit figure is than the explicit
// one, in percent.
func Reduction(implicit, explicit time.Duration) float64 {
	if explicit <= 0 {
		return 0
	}
	return 100 * (1 - float64(implicit)/float64(explicit))
}

// Table writes the comparison table: per event and run, the worst I/O
// through the event, the longest stall, p99, moves, thrash, errors and
// how long the slowest host took to follow a move; then the reduction.
func (r *Result) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "event\tALUA\tworst I/O\tstall\tp99\tI/Os\terrors\tmoves\tthrash\tslowest host follow\toperator moves' worst")
	for i := range r.Modes[0].Events {
		for _, m := range r.Modes {
			if i >= len(m.Events) {
				continue
			}
			e := m.Events[i]
			op := "-"
			if e.OperatorWorst > 0 {
				op = ms(e.OperatorWorst)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", e.Label, m.Mode, ms(e.Worst), ms(e.Stall), ms(e.P99),
				e.IOs, e.Errors, e.Moves, e.Thrash, ms(e.Follow), op)
		}
		if len(r.Modes) == 2 && i < len(r.Modes[1].Events) {
			a, b := r.Modes[0].Events[i], r.Modes[1].Events[i]
			fmt.Fprintf(tw, "%s\treduction\t%.1f%%\t%.1f%%\t\t\t\t\t\t\t\n", a.Label, Reduction(a.Worst, b.Worst), Reduction(a.Stall, b.Stall))
		}
	}
	tw.Flush()
	for _, m := range r.Modes {
		b := m.Baseline
		fmt.Fprintf(w, "%s ALUA steady state before the first event: %.0f IOPS, p50 %s, p99 %s, max %s; %d I/Os in the run, %d errors\n",
			m.Mode, b.IOPS, ms(b.P50), ms(b.P99), ms(b.Max), m.IOs, m.Errors)
	}
}

// HostTable writes each host's counters for one run.
func (m *ModeResult) HostTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "host\tstack\tI/Os\terrors\tUAs\t04/0A\tRTPGs\tSTPGs\tpath failures\trelogins\tswitches\tfollow median\tfollow max")
	for _, h := range m.Hosts {
		med, mx := time.Duration(0), time.Duration(0)
		if n := len(h.Follow); n > 0 {
			med, mx = h.Follow[n/2], h.Follow[n-1]
		}
		s := h.Stats
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", h.Name, h.Stack, s.IOs, s.IOErrors, s.UAs,
			s.Transitioning, s.RTPGs, s.STPGs, s.PathFailures, s.Relogins, s.GroupSwitches, ms(med), ms(mx))
	}
	tw.Flush()
}

// PathTable writes per-path counters (reference 000's `ra mlm load show`).
func (m *ModeResult) PathTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "path\tup\treads\twrites\tMiB read\tMiB written\tmax pending\tavg latency\tavg service\terrors")
	for _, h := range m.Hosts {
		for _, p := range h.Paths {
			c := p.Counters
			fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%.1f\t%.1f\t%d\t%.0f µs\t%.0f µs\t%d\n", p.Name, p.Up, c.IOs[0], c.IOs[1],
				float64(c.Bytes[0])/(1<<20), float64(c.Bytes[1])/(1<<20), c.MaxPending, c.AvgLatency, c.AvgService, c.Errors)
		}
	}
	tw.Flush()
}

// WriteReport writes results.json, latency.svg and report.html to dir
// and returns their paths.
func WriteReport(dir string, r *Result, s *Scenario, scenarioText string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	svg := LatencySVG(r, s)
	var table, detail strings.Builder
	r.Table(&table)
	for _, m := range r.Modes {
		fmt.Fprintf(&detail, "\n%s ALUA, hosts:\n", m.Mode)
		m.HostTable(&detail)
		fmt.Fprintf(&detail, "\n%s ALUA, paths:\n", m.Mode)
		m.PathTable(&detail)
		fmt.Fprintf(&detail, "\n%s ALUA, ownership moves:\n", m.Mode)
		for _, mv := range m.Moves {
			fmt.Fprintf(&detail, "  %7.2fs  %-9s LUN %v %s -> %s  flush %s  stop %s\n", mv.At.Seconds(), mv.Cause, mv.LUNs,
				mv.From, mv.To, ms(mv.Flush), ms(mv.Stop))
		}
		fmt.Fprintf(&detail, "\n%s ALUA, reports:\n", m.Mode)
		for _, rp := range m.Reports {
			verb := "cleared"
			if rp.Raised {
				verb = "raised"
			}
			fmt.Fprintf(&detail, "  %7.2fs  %s %s\n", rp.At.Seconds(), verb, rp.Text)
		}
		fmt.Fprintf(&detail, "\n%s ALUA, latency histogram:\n", m.Mode)
		for _, hb := range m.Hist {
			fmt.Fprintf(&detail, "  < %-8s %d\n", fmtMS(hb.Below), hb.Count)
		}
	}
	page := fmt.Sprintf(`<!doctype html>
<html><head><meta charset="utf-8"><title>aluad lab: %s</title>
<style>body{font-family:sans-serif;margin:2em}pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head>
<body><h1>aluad lab: %s</h1>
<p>Generated %s. Every figure is measured in this run on this machine.</p>
<h2>Events: implicit vs explicit ALUA</h2><pre>%s</pre>
<h2>Latency over time</h2>%s
<h2>Hosts, paths, moves, reports</h2><pre>%s</pre>
<h2>Scenario</h2><pre>%s</pre>
</body></html>
`, html.EscapeString(s.Name), html.EscapeString(s.Name), time.Now().Format(time.RFC3339), html.EscapeString(table.String()), svg,
		html.EscapeString(detail.String()), html.EscapeString(scenarioText))
	files := map[string][]byte{"results.json": js, "latency.svg": []byte(svg), "report.html": []byte(page),
		"summary.txt": []byte(table.String() + detail.String())}
	var out []string
	for _, name := range []string{"report.html", "latency.svg", "results.json", "summary.txt"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// MedianTable writes, per event and run mode, the median over repeated
// runs of each figure of Table, with the range of the worst I/O.
func MedianTable(w io.Writer, rs []*Result) {
	if len(rs) == 0 || len(rs[0].Modes) == 0 {
		return
	}
	med := func(get func(*Result) float64) (float64, float64, float64) {
		var v []float64
		for _, r := range rs {
			v = append(v, get(r))
		}
		slices.Sort(v)
		return v[len(v)/2], v[0], v[len(v)-1]
	}
	dms := func(f float64) string { return ms(time.Duration(f)) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "event\tALUA\tworst I/O (median of %d)\tworst range\tstall\tp99\tmoves\tthrash\tslowest host follow\n", len(rs))
	first := rs[0]
	for i := range first.Modes[0].Events {
		worsts := map[int]float64{}
		for mi, m := range first.Modes {
			ev := func(get func(EventResult) float64) func(*Result) float64 {
				return func(r *Result) float64 {
					if mi >= len(r.Modes) || i >= len(r.Modes[mi].Events) {
						return 0
					}
					return get(r.Modes[mi].Events[i])
				}
			}
			wm, wlo, whi := med(ev(func(e EventResult) float64 { return float64(e.Worst) }))
			st, _, _ := med(ev(func(e EventResult) float64 { return float64(e.Stall) }))
			p99, _, _ := med(ev(func(e EventResult) float64 { return float64(e.P99) }))
			mv, _, _ := med(ev(func(e EventResult) float64 { return float64(e.Moves) }))
			th, _, _ := med(ev(func(e EventResult) float64 { return float64(e.Thrash) }))
			fo, _, _ := med(ev(func(e EventResult) float64 { return float64(e.Follow) }))
			worsts[mi] = wm
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s - %s\t%s\t%s\t%.0f\t%.0f\t%s\n", m.Events[i].Label, m.Mode, dms(wm), dms(wlo), dms(whi),
				dms(st), dms(p99), mv, th, dms(fo))
		}
		if len(first.Modes) == 2 {
			fmt.Fprintf(tw, "%s\treduction\t%.1f%%\t\t\t\t\t\t\n", first.Modes[0].Events[i].Label,
				Reduction(time.Duration(worsts[0]), time.Duration(worsts[1])))
		}
	}
	tw.Flush()
}
