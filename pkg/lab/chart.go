package lab

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// chartBucket is the timeline's resolution.
const chartBucket = 250 * time.Millisecond

// LatencySVG draws each run's I/O latency over time, one panel per run
// side by side on one log scale: per host the worst I/O started in each
// 250 ms, the scenario's events as dashed lines, ownership moves as
// marks along the bottom.
func LatencySVG(r *Result, s *Scenario) string {
	const pw, ph, ml, mt, mb = 560.0, 300.0, 56.0, 40.0, 46.0
	top := 10 * time.Millisecond
	for _, m := range r.Modes {
		for _, x := range m.samples {
			top = max(top, x.Latency)
		}
	}
	lo, hi := math.Log10(0.05), math.Ceil(math.Log10(float64(top)/1e6))
	y := func(d time.Duration) float64 {
		v := math.Log10(max(float64(d)/1e6, 0.05))
		return mt + ph - (v-lo)/(hi-lo)*ph
	}
	width := float64(len(r.Modes))*(pw+ml+20) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n",
		width, mt+ph+mb+20*float64(len(s.Hosts)/4+1))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, m := range r.Modes {
		ox := 10 + float64(i)*(pw+ml+20) + ml
		x := func(d time.Duration) float64 { return ox + float64(d)/float64(s.Duration)*pw }
		fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="13" font-weight="bold">%s ALUA: worst I/O latency per host per %v</text>`+"\n",
			ox, m.Mode, chartBucket)
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", ox, mt, pw, ph)
		for e := lo; e <= hi+1e-9; e++ {
			d := time.Duration(math.Pow(10, e) * 1e6)
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
				ox, ox+pw, y(d), y(d), ox-4, y(d)+4, fmtMS(d))
		}
		for t := time.Duration(0); t <= s.Duration; t += 10 * time.Second {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%.0fs</text>`+"\n", x(t), mt+ph+14, t.Seconds())
		}
		for _, e := range m.Events {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#555" stroke-dasharray="4 3"/><text x="%.1f" y="%.0f" fill="#333">%s</text>`+"\n",
				x(e.At), x(e.At), mt, mt+ph, x(e.At)+3, mt+12, html.EscapeString(e.Label))
		}
		for _, mv := range m.Moves {
			fmt.Fprintf(&b, `<path d="M%.1f %.0f l-4 8 h8 z" fill="#ff7f0e"><title>%s: LUN %v %s->%s</title></path>`+"\n",
				x(mv.At), mt+ph-8, mv.Cause, mv.LUNs, mv.From, mv.To)
		}
		n := int(s.Duration/chartBucket) + 1
		for hn, h := range m.Hosts {
			worst := make([]time.Duration, n)
			for _, smp := range m.samples {
				if smp.Host != hn {
					continue
				}
				k := int(smp.Start.Sub(m.Start) / chartBucket)
				if k >= 0 && k < n {
					worst[k] = max(worst[k], smp.Latency)
				}
			}
			var pts []string
			for k, d := range worst {
				if d > 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(time.Duration(k)*chartBucket+chartBucket/2), y(d)))
				}
			}
			c := palette[hn%len(palette)]
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.3" points="%s"/>`+"\n", c, strings.Join(pts, " "))
			lx, ly := ox+float64(hn%4)*140, mt+ph+32+float64(hn/4)*16
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s (%s)</text>`+"\n",
				lx, ly-9, c, lx+14, ly, h.Name, h.Stack)
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func fmtMS(d time.Duration) string {
	ms := float64(d) / 1e6
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%.0fs", ms/1000)
	case ms >= 1:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.2gms", ms)
}
