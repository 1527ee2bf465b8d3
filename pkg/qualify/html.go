package qualify

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"
)

var nodeColours = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// WriteHTML writes the report as one self-contained HTML page: the
// verdict, a card per failed check (what the array observed, what to
// change), each host's completed I/O per node over time with the steps
// marked, and the full table.
func WriteHTML(w io.Writer, rep *Report) error {
	var b strings.Builder
	e := html.EscapeString
	verdict, vcls := "PASS", "pass"
	if !rep.Pass {
		verdict, vcls = "FAIL", "fail"
	}
	fmt.Fprintf(&b, `<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>aluad qualify: %s</title>
<style>
body{font-family:sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px} h2{font-size:18px;margin-top:28px}
.verdict{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;font-weight:bold}
.pass{background:#2e7d32}.fail{background:#c62828}.na{background:#888}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #ddd;border-left:6px solid #c62828;border-radius:4px;padding:10px 14px;width:360px;background:#fffafa}
.card h3{margin:0 0 6px 0;font-size:15px}.card .what{color:#555;font-size:13px;margin:4px 0}
.card .fix{font-size:13px;margin-top:6px}.card .fix b{color:#2e7d32}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;text-align:left}
th{background:#f4f4f4} tr.fail td{background:#fdecea} .small{color:#666;font-size:12px}
</style></head><body>
<h1>aluad qualify: schedule <code>%s</code> on %s <span class="verdict %s">%s</span></h1>
<p class="small">%s to %s (%v); ALUA %s; nodes %s. Measured at the array only: its command trace (10 ms buckets) and event feed.</p>
`, e(rep.Schedule), e(rep.Schedule), e(rep.Target), vcls, verdict, rep.Start.Format(time.RFC3339), rep.End.Format(time.RFC3339),
		rep.End.Sub(rep.Start).Round(time.Second), e(rep.ALUA), e(strings.Join(rep.Nodes, ", ")))
	b.WriteString("<h2>Hosts</h2><table><tr><th>host</th><th>type</th><th>LUNs</th><th>paths at the start</th><th>steps failed</th><th>verdict</th></tr>\n")
	for _, h := range rep.Hosts {
		v, c := "PASS", "pass"
		if !h.Pass {
			v, c = "FAIL", "fail"
		}
		var paths []string
		for _, n := range rep.Nodes {
			paths = append(paths, n+": "+h.Nodes[n])
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%v</td><td>%s</td><td>%d of %d</td><td><span class=\"verdict %s\">%s</span></td></tr>\n",
			e(h.Name), e(h.Type), h.LUNs, e(strings.Join(paths, ", ")), h.Failed, h.Steps, c, v)
	}
	b.WriteString("</table>\n")
	if len(rep.Findings) > 0 {
		b.WriteString("<h2>What failed</h2><div class=\"cards\">\n")
		for _, f := range rep.Findings {
			fmt.Fprintf(&b, `<div class="card"><h3>%s: %s</h3><div class="what">%s (%s), step %d: %s</div><div>%s</div><div class="fix"><b>Change:</b> %s</div></div>`+"\n",
				e(f.Host), e(f.Check), e(f.Host), e(f.Type), f.Step, e(f.StepName), e(f.Observed), e(f.Advice))
		}
		b.WriteString("</div>\n")
	}
	if rep.Error != "" {
		fmt.Fprintf(&b, "<h2>The run ended early</h2><p>%s</p>\n", e(rep.Error))
		if len(rep.NotRun) > 0 {
			fmt.Fprintf(&b, "<p>Not run: %s</p>\n", e(strings.Join(rep.NotRun, "; ")))
		}
		if len(rep.Restored) > 0 {
			fmt.Fprintf(&b, "<p>Restored: %s</p>\n", e(strings.Join(rep.Restored, "; ")))
		}
	}
	b.WriteString("<h2>Array checks</h2><ul>\n")
	for _, c := range rep.Array {
		m := "ok"
		if !c.OK {
			m = "<b style=\"color:#c62828\">FAIL</b>"
		}
		fmt.Fprintf(&b, "<li>%s %s: %s</li>\n", m, e(c.Name), e(c.Detail))
	}
	b.WriteString("</ul>\n<h2>I/O per host over time</h2>\n<p class=\"small\">Commands completed per second through each node; dashed lines are the steps, triangles the array's ownership changes.</p>\n")
	for _, h := range rep.Hosts {
		b.WriteString(hostChart(rep, h.Name))
	}
	b.WriteString("<h2>Steps</h2><table><tr><th>#</th><th>step</th><th>start</th><th>length</th><th>changes</th><th>note</th></tr>\n")
	for _, st := range rep.Steps {
		var ch []string
		for _, c := range st.Changes {
			ch = append(ch, fmt.Sprintf("LUN %v %s->%s (%s, held %.1f ms)", c.LUNs, c.From, c.To, c.Cause, c.HoldMs)) // escaped below
		}
		fmt.Fprintf(&b, "<tr><td>%d</td><td>%s</td><td>%.1f s</td><td>%.1f s</td><td>%s</td><td>%s</td></tr>\n", st.Index, e(st.Name),
			st.Start.Sub(rep.Steps[0].Start).Seconds(), st.End.Sub(st.Start).Seconds(), e(strings.Join(ch, "; ")), e(st.Note))
	}
	b.WriteString("</table>\n<h2>Every host, every step</h2><table><tr><th>host</th><th>step</th><th>follow</th><th>stall</th><th>CHECK CONDITION</th><th>TMF</th><th>drops</th><th>logins</th><th>RTPG after UA</th><th>verdict</th></tr>\n")
	for _, res := range rep.Results {
		st := rep.Steps[res.Step]
		follow := "-"
		if res.FollowMs != nil {
			follow = fmtMs(*res.FollowMs)
		}
		cls := ""
		if res.Verdict == "fail" {
			cls = ` class="fail"`
		}
		fmt.Fprintf(&b, "<tr%s><td>%s</td><td>%d %s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td></tr>\n",
			cls, e(res.Host), st.Index, e(st.Name), follow, fmtMs(res.StallMs), e(summary(res.Checks)), e(summary(res.TMFs)), res.Drops,
			res.Relogins, e(res.RTPG), strings.ToUpper(res.Verdict))
	}
	b.WriteString("</table>\n</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// hostChart draws one host's completions per second per node.
func hostChart(rep *Report, host string) string {
	per := rep.Timeline[host]
	const W, H, ml, mt, mb = 1000.0, 160.0, 50.0, 24.0, 30.0
	n := 0
	top := 1
	for _, v := range per {
		n = max(n, len(v))
		for _, x := range v {
			top = max(top, x)
		}
	}
	if n == 0 {
		return ""
	}
	scale := float64(time.Second) / float64(rep.TimelineBucket)
	topRate := float64(top) * scale
	t0 := rep.Steps[0].Start
	span := float64(n) * rep.TimelineBucket.Seconds()
	x := func(t time.Time) float64 { return ml + t.Sub(t0).Seconds()/span*W }
	y := func(v float64) float64 { return mt + H - v/topRate*H }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", ml+W+20, mt+H+mb)
	fmt.Fprintf(&b, `<text x="%.0f" y="14" font-weight="bold">%s</text>`+"\n", ml, html.EscapeString(host))
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", ml, mt, W, H)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f/s</text><text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n",
		ml-4, mt+8, topRate, ml-4, mt+H)
	for _, st := range rep.Steps[1:] {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#777" stroke-dasharray="4 3"><title>%d %s</title></line><text x="%.1f" y="%.0f" fill="#333">%d</text>`+"\n",
			x(st.Start), x(st.Start), mt, mt+H, st.Index, html.EscapeString(st.Name), x(st.Start)+2, mt+10, st.Index)
		for _, c := range st.Changes {
			fmt.Fprintf(&b, `<path d="M%.1f %.0f l-4 8 h8 z" fill="#ff7f0e"><title>%s</title></path>`+"\n",
				x(c.Time), mt+H-8, html.EscapeString(fmt.Sprintf("LUN %v %s->%s (%s)", c.LUNs, c.From, c.To, c.Cause)))
		}
	}
	for i, node := range rep.Nodes {
		v := per[node]
		var pts []string
		for j, c := range v {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", ml+float64(j)/float64(n)*W, y(float64(c)*scale)))
		}
		col := nodeColours[i%len(nodeColours)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`+"\n", col, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">node %s</text>`+"\n", ml+float64(i)*80, mt+H+24, col, html.EscapeString(node))
	}
	for t := 0.0; t <= span; t += 30 {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0fs</text>`+"\n", ml+t/span*W, mt+H+12, t)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
