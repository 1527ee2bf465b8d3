package qemulab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/qualify"
)

// The qualify scenario runs aluad qualify against the guests, as a user
// would against their own hosts, and checks it against the guests' own
// view: fio's per-I/O completion log for the stalls, a sampler of the
// guest's per-path disk counters (/sys/block/sdX/stat every 10 ms) for
// the follows, and `multipath -ll` at the end of each step for the
// verdicts.

// QualifyAgreement is one host, LUN and step: qualify's figures against
// the guest's own.
type QualifyAgreement struct {
	Host string `json:"host"`
	LUN  uint64 `json:"lun"`
	Step int    `json:"step"`
	Name string `json:"step_name"`
	// Stall and follow in ms, array side (qualify) and guest side; -1:
	// never followed.
	ArrayStall  float64  `json:"array_stall_ms"`
	GuestStall  float64  `json:"guest_stall_ms"`
	ArrayFollow *float64 `json:"array_follow_ms,omitempty"`
	GuestFollow *float64 `json:"guest_follow_ms,omitempty"`
	// MultipathFollows: at the end of the step `multipath -ll` shows the
	// active path group on the LUN's owner.
	MultipathFollows *bool `json:"multipath_follows,omitempty"`
	StallOK          bool  `json:"stall_ok"`
	FollowOK         bool  `json:"follow_ok"`
	VerdictOK        bool  `json:"verdict_ok"`
}

// within: a and b agree within 20% or 100 ms, whichever is larger.
func within(a, b float64) bool {
	tol := max(0.2*max(a, b), 100)
	return a-b <= tol && b-a <= tol
}

const guestSamples = "/tmp/aluad-paths.log"

// qualifyRun starts the guests' samplers, runs the schedule and writes
// qualify's report under dir/qualify.
func (l *lab) qualifyRun(ctx context.Context) error {
	var names []string
	for _, c := range l.res.Clients {
		off, rtt, err := c.vm.ClockOffset(ctx, 20)
		if err != nil {
			return err
		}
		c.ClockOffset, c.ClockRTT = off, rtt
		if err := c.vm.StartSampler(ctx, guestSamples, 10*time.Millisecond); err != nil {
			return err
		}
		names = append(names, c.Spec.Name)
		l.opt.Log("%s: guest clock offset %v (round trip %v); sampler on", c.Spec.Name, off.Round(time.Microsecond), rtt.Round(time.Microsecond))
	}
	s, err := qualify.LoadBuiltin(l.opt.Scenario.Qualify)
	if err != nil {
		return err
	}
	l.mpll = map[string]map[int]string{}
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l.opt.Log("qualify %s", sc.Text())
		}
	}()
	defer pw.Close()
	rep, err := qualify.Run(ctx, qualify.Options{Source: l.arr.Client, Schedule: s, Hosts: names, Wait: 2 * time.Minute,
		Progress: pw, AfterStep: func(st qualify.Step) {
			for _, c := range l.res.Clients {
				out, _ := c.vm.Sh(ctx, 30*time.Second, "multipath -ll")
				if l.mpll[c.Spec.Name] == nil {
					l.mpll[c.Spec.Name] = map[int]string{}
				}
				l.mpll[c.Spec.Name][st.Index] = out
			}
		}})
	if rep == nil {
		return err
	}
	l.qrep = rep
	dir := filepath.Join(l.dir, "qualify")
	if werr := writeQualify(dir, rep); werr != nil && err == nil {
		err = werr
	}
	var tab strings.Builder
	qualify.WriteTable(&tab, rep)
	_ = os.WriteFile(filepath.Join(dir, "table.txt"), []byte(tab.String()), 0o644)
	return err
}

func writeQualify(dir string, rep *qualify.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, w := range map[string]func(io.Writer, *qualify.Report) error{
		"report.html": qualify.WriteHTML, "results.json": qualify.WriteJSON, "junit.xml": qualify.WriteJUnit} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = w(f, rep)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// guestView is what one guest recorded: per LUN its fio completions and
// per path device its completion counts over time, on the lab's clock.
type guestView struct {
	done  map[uint64][]time.Time
	steps map[string][]pathStep // dev -> counts
}

type pathStep struct {
	t     time.Time
	count uint64
}

// collectGuest stops the sampler and reads the guest's logs (after fio
// has stopped and written its completion logs).
func (l *lab) collectGuest(ctx context.Context, c *ClientResult) (*guestView, error) {
	g := &guestView{done: map[uint64][]time.Time{}, steps: map[string][]pathStep{}}
	if _, err := c.vm.StopSampler(ctx); err != nil {
		return nil, err
	}
	out, err := c.vm.Sh(ctx, time.Minute, "cat "+guestSamples)
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		r, _ := strconv.ParseUint(f[2], 10, 64)
		w, _ := strconv.ParseUint(f[3], 10, 64)
		g.steps[f[1]] = append(g.steps[f[1]], pathStep{time.Unix(0, ns).Add(-c.ClockOffset), r + w})
	}
	for i, m := range c.maps {
		lun, ok := c.lunOf(m)
		if !ok {
			continue
		}
		out, err := c.vm.Sh(ctx, time.Minute, fmt.Sprintf("cat /tmp/lat_lat.%d.log", i+1))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Split(line, ",")
			if len(f) < 2 {
				continue
			}
			msec, err := strconv.ParseInt(strings.TrimSpace(f[0]), 10, 64)
			if err != nil {
				continue
			}
			g.done[lun] = append(g.done[lun], time.UnixMilli(msec).Add(-c.ClockOffset))
		}
		sort.Slice(g.done[lun], func(a, b int) bool { return g.done[lun][a].Before(g.done[lun][b]) })
	}
	return g, nil
}

// gapIn is the longest time without a completion inside [from, to).
func gapIn(done []time.Time, from, to time.Time) time.Duration {
	var best time.Duration
	var prev time.Time
	for _, t := range done {
		if !prev.IsZero() && t.After(from) && prev.Before(to) {
			best = max(best, minT(t, to).Sub(maxT(prev, from)))
		}
		prev = t
	}
	if !prev.IsZero() && prev.Before(to) {
		best = max(best, to.Sub(maxT(prev, from)))
	}
	if prev.IsZero() {
		best = to.Sub(from)
	}
	return best
}

func minT(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxT(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// guestFollow is qualify's follow from the guest's per-path counters:
// from the change at tc until all of the LUN's completions were on paths
// to node to (the later of the first count rise there and the last one
// elsewhere); false if that had not happened by end (or a path elsewhere
// still rose within 2 s of it).
func (g *guestView) guestFollow(c *ClientResult, lun uint64, to string, tc, end time.Time) (time.Duration, bool) {
	var firstNew, lastOld time.Time
	for dev, st := range g.steps {
		d, ok := c.disks[dev]
		if !ok || d.LUN != lun {
			continue
		}
		node := nodeOfPortal(d.Portal)
		for i := 1; i < len(st); i++ {
			if st[i].count == st[i-1].count || st[i].t.Before(tc) || !st[i].t.Before(end) {
				continue
			}
			if node == to {
				if firstNew.IsZero() || st[i].t.Before(firstNew) {
					firstNew = st[i].t
				}
			} else if st[i].t.After(lastOld) {
				lastOld = st[i].t
			}
		}
	}
	if firstNew.IsZero() || lastOld.After(end.Add(-2*time.Second)) {
		return 0, false
	}
	return maxT(firstNew, lastOld).Sub(tc), true
}

// mpFollows reads `multipath -ll`: whether the LUN's active path group
// is all on node to (nil: the map was not found).
func (c *ClientResult) mpFollows(out string, lun uint64, to string) *bool {
	maps, err := ParseMultipathLL(out)
	if err != nil {
		return nil
	}
	for _, m := range maps {
		if l, ok := c.lunOf(m); !ok || l != lun {
			continue
		}
		g := m.ActiveGroup()
		if g == nil {
			return nil
		}
		ok := len(g.Paths) > 0
		for _, p := range g.Paths {
			if d, known := c.disks[p.Dev]; !known || nodeOfPortal(d.Portal) != to {
				ok = false
			}
		}
		return &ok
	}
	return nil
}

// judgeQualify compares qualify's measurements with the guests' and its
// verdicts with `multipath -ll`.
func (l *lab) judgeQualify(views map[string]*guestView) {
	rep := l.qrep
	if rep == nil {
		l.res.check("qualify ran", false, "no report")
		return
	}
	l.res.check("qualify ran the whole schedule", len(rep.Steps) > 1 && rep.Steps[len(rep.Steps)-1].End.After(rep.Steps[len(rep.Steps)-1].Start),
		"%d steps", len(rep.Steps)-1)
	// qualify's times are the array's clock; the guests' were moved onto
	// the lab's.
	onLab := func(t time.Time) time.Time { return t.Add(-l.arr.ClockOffset) }
	for _, c := range l.res.Clients {
		g := views[c.Spec.Name]
		if g == nil {
			continue
		}
		var bad []string
		n := 0
		for _, res := range rep.Results {
			if res.Host != c.Spec.Name || res.Step == 0 {
				continue
			}
			st := rep.Steps[res.Step]
			for _, lr := range res.LUNs {
				a := QualifyAgreement{Host: c.Spec.Name, LUN: lr.LUN, Step: st.Index, Name: st.Name, ArrayStall: lr.StallMs,
					GuestStall: float64(gapIn(g.done[lr.LUN], onLab(st.Start), onLab(st.End)).Microseconds()) / 1000}
				a.StallOK = within(a.ArrayStall, a.GuestStall)
				a.FollowOK, a.VerdictOK = true, true
				if lr.Moved {
					a.ArrayFollow = lr.FollowMs
					v := -1.0
					if d, ok := g.guestFollow(c, lr.LUN, lr.To, onLab(lr.MovedAt), onLab(st.End)); ok {
						v = float64(d.Microseconds()) / 1000
					}
					a.GuestFollow = &v
					af := *lr.FollowMs
					a.FollowOK = (af < 0 && v < 0) || (af >= 0 && v >= 0 && within(af, v))
					a.MultipathFollows = c.mpFollows(l.mpll[c.Spec.Name][st.Index], lr.LUN, lr.To)
					a.VerdictOK = a.MultipathFollows != nil && *a.MultipathFollows == (af >= 0)
				}
				n++
				if !a.StallOK || !a.FollowOK || !a.VerdictOK {
					bad = append(bad, fmt.Sprintf("step %d %s LUN %d: stall %.0f/%.0f ms, follow %s/%s, multipath -ll follows %s",
						st.Index, st.Name, lr.LUN, a.ArrayStall, a.GuestStall, fptr(a.ArrayFollow), fptr(a.GuestFollow), bptr(a.MultipathFollows)))
				}
				l.res.Qualify = append(l.res.Qualify, a)
			}
		}
		l.res.check(fmt.Sprintf("%s (%s): qualify's stall and follow agree with the guest's within 20%% or 100 ms, and its follow verdicts with multipath -ll", c.Spec.Name, c.Spec.HostType),
			len(bad) == 0 && n > 0, "%d host/LUN/steps; %s", n, strings.Join(bad, "; "))
	}
	// What a reader of `multipath -ll` would say of the followover client:
	// it never leaves the old owner after a planned move.
	for _, c := range l.res.Clients {
		if c.Spec.Conf != "multipath-followover.conf" {
			continue
		}
		failed := false
		for _, f := range rep.Findings {
			if f.Host == c.Spec.Name && (f.Check == "follow" || f.Check == "follow time") && strings.HasPrefix(f.StepName, "move ") {
				failed = true
			}
		}
		l.res.check(c.Spec.Name+": failback followover fails the planned-move checks", failed, "%d findings", len(rep.Findings))
	}
}

func fptr(p *float64) string {
	if p == nil {
		return "-"
	}
	if *p < 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f", *p)
}

func bptr(p *bool) string {
	if p == nil {
		return "?"
	}
	return strconv.FormatBool(*p)
}
