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
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/qualify"
)

// The qualify scenario runs aluad qualify against the guests, as a user
// would against their own hosts, and checks it against the guests' own
// view: a sampler of the guest's disk counters every 10 ms
// (/sys/block/dm-N/stat, the multipath device the application uses, for
// the stalls; /sys/block/sdX/stat, one per path, for the follows), and
// multipathd's topology at the end of each step for the verdicts.

// QualifyAgreement is one host and event (step): qualify's figures
// against the guest's own.
type QualifyAgreement struct {
	Host string `json:"host"`
	Step int    `json:"step"`
	Name string `json:"step_name"`
	// Stall and follow in ms, array side (qualify) and guest side; -1:
	// never followed.
	// The guest's figures are ranges "lo-hi" (ms): its counters are read
	// every 10 ms when the guest gets the CPU, and a rise is known to lie
	// between two reads.
	ArrayStall  float64  `json:"array_stall_ms"`
	GuestStall  string   `json:"guest_stall_ms"`
	ArrayFollow *float64 `json:"array_follow_ms,omitempty"`
	GuestFollow string   `json:"guest_follow_ms,omitempty"`
	// Topology: per LUN that moved, whether multipathd's active path
	// group at the end of the step is on the LUN's owner.
	Topology  []string `json:"topology,omitempty"`
	StallOK   bool     `json:"stall_ok"`
	FollowOK  bool     `json:"follow_ok"`
	VerdictOK bool     `json:"verdict_ok"`
}

const guestSamples = "/tmp/aluad-paths.log"

// qualifyRun starts the guests' samplers, runs the schedule and writes
// qualify's report under dir/qualify.
func (l *lab) qualifyRun(ctx context.Context) error {
	if err := l.startSamplers(ctx); err != nil {
		return err
	}
	var names []string
	for _, c := range l.res.Clients {
		names = append(names, c.Spec.Name)
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
			t := time.Now()
			outs := make([]string, len(l.res.Clients))
			var wg sync.WaitGroup
			for i, c := range l.res.Clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// multipathd's view (multipath -ll's format, without running
					// the path checkers, which block on a dead controller's paths).
					out, err := c.vm.Sh(ctx, 30*time.Second, "multipathd show topology")
					if err != nil || !strings.Contains(out, "policy=") {
						out, _ = c.vm.Sh(ctx, 30*time.Second, "multipath -ll")
					}
					outs[i] = out
				}()
			}
			wg.Wait()
			for i, c := range l.res.Clients {
				if l.mpll[c.Spec.Name] == nil {
					l.mpll[c.Spec.Name] = map[int]string{}
				}
				l.mpll[c.Spec.Name][st.Index] = outs[i]
			}
			l.opt.Log("multipathd's topology of every client after step %d in %v", st.Index, time.Since(t).Round(10*time.Millisecond))
		}})
	if rep == nil {
		return err
	}
	l.qrep = rep
	l.res.Topology = l.mpll
	dir := filepath.Join(l.dir, "qualify")
	if werr := qualify.WriteFiles(dir, rep); werr != nil && err == nil {
		err = werr
	}
	var tab strings.Builder
	qualify.WriteTable(&tab, rep)
	_ = os.WriteFile(filepath.Join(dir, "table.txt"), []byte(tab.String()), 0o644)
	return err
}

// guestView is what one guest recorded: for each block device (the
// paths sdX and the multipath devices dm-N), when its completed I/O
// count rose, each rise known to within the sampler's interval, on the
// lab's clock.
type guestView struct {
	steps map[string][]rise
}

// rise: the device's count rose to count after lo and by hi.
type rise struct {
	lo, hi time.Time
	count  uint64
}

// span is a guest measurement with its resolution: the true value lies
// in [lo, hi].
type span struct{ lo, hi time.Duration }

// agrees: the array's value a is within 20% or 100 ms (whichever is
// larger) of some value the guest's measurement allows.
func (s span) agrees(a time.Duration) bool {
	tol := func(x time.Duration) time.Duration { return max(x/5, 100*time.Millisecond) }
	return a >= s.lo-tol(s.lo) && a <= s.hi+tol(s.hi)
}

func (s span) String() string {
	if s.hi-s.lo < time.Millisecond {
		return fmt.Sprintf("%.0f", float64(s.lo.Microseconds())/1000)
	}
	return fmt.Sprintf("%.0f-%.0f", float64(s.lo.Microseconds())/1000, float64(s.hi.Microseconds())/1000)
}

// collectGuest stops the sampler and reads what it wrote.
func (l *lab) collectGuest(ctx context.Context, c *ClientResult) (*guestView, error) {
	g := &guestView{steps: map[string][]rise{}}
	if _, err := c.vm.StopSampler(ctx); err != nil {
		return nil, err
	}
	out, err := c.vm.Sh(ctx, 2*time.Minute, "cat "+guestSamples)
	if err != nil {
		return nil, err
	}
	_ = os.WriteFile(filepath.Join(l.dir, c.Spec.Name+".samples.log"), []byte(out), 0o644)
	last := map[string]uint64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		prev, _ := strconv.ParseInt(f[1], 10, 64)
		r, _ := strconv.ParseUint(f[3], 10, 64)
		w, _ := strconv.ParseUint(f[4], 10, 64)
		dev, n := f[2], r+w
		if old, seen := last[dev]; seen && n > old {
			g.steps[dev] = append(g.steps[dev], rise{time.Unix(0, prev).Add(-c.ClockOffset), time.Unix(0, ns).Add(-c.ClockOffset), n})
		}
		last[dev] = n
	}
	return g, nil
}

// guestStall is the longest time inside [from, to) without a completion
// at the LUN's multipath device, as the guest's counters bound it.
func (g *guestView) guestStall(dm string, from, to time.Time) span {
	rs := g.steps[dm]
	var best span
	clip := func(a, b time.Time) time.Duration { return max(minT(b, to).Sub(maxT(a, from)), 0) }
	for i := 1; i < len(rs); i++ {
		p, n := rs[i-1], rs[i]
		if !n.hi.After(from) || !p.lo.Before(to) {
			continue
		}
		best.lo = max(best.lo, clip(p.hi, n.lo))
		best.hi = max(best.hi, clip(p.lo, n.hi))
	}
	// Nothing more by the end.
	i := sort.Search(len(rs), func(i int) bool { return !rs[i].lo.Before(to) })
	if i > 0 {
		p := rs[i-1]
		best.lo = max(best.lo, clip(p.hi, to))
		best.hi = max(best.hi, clip(p.lo, to))
	} else {
		best = span{to.Sub(from), to.Sub(from)}
	}
	return best
}

// guestFollow is qualify's follow from the guest's per-path counters:
// from the change at tc until all of the LUN's completions were on paths
// to node to (the later of the first rise there and the last one
// elsewhere), with the counters' resolution; false if no path to node
// to rose.
//
// A path's counter also counts the commands that failed on it, at the
// array (02/04/0B on a standby path) or in the guest without reaching it
// (scsi_dh_alua fails I/O to a path it knows is standby at once: udev's
// probe of a path that changed state). The clients group paths by
// priority and send I/O to one group at a time, so a rise on an old path
// after the new owner's paths carried I/O is such a failure, not I/O
// running on the old owner, and is not counted.
func (g *guestView) guestFollow(c *ClientResult, lun uint64, to string, tc, end time.Time) (span, bool) {
	var newLo, newHi, oldLo, oldHi time.Time
	type pathRise struct {
		rise
		onNew bool
	}
	var rises []pathRise
	for dev, rs := range g.steps {
		d, ok := c.disks[dev]
		if !ok || d.LUN != lun {
			continue
		}
		for _, r := range rs {
			if r.hi.After(tc) && r.lo.Before(end) {
				rises = append(rises, pathRise{r, nodeOfPortal(d.Portal) == to})
			}
		}
	}
	for _, r := range rises {
		if r.onNew && (newHi.IsZero() || r.hi.Before(newHi)) {
			newLo, newHi = maxT(r.lo, tc), r.hi
		}
	}
	for _, r := range rises {
		if !r.onNew && (newHi.IsZero() || !r.lo.After(newHi)) && r.hi.After(oldHi) {
			oldLo, oldHi = maxT(r.lo, tc), r.hi
		}
	}

	if newHi.IsZero() || oldLo.After(end.Add(-time.Second)) {
		return span{}, false
	}
	return span{maxT(newLo, oldLo).Sub(tc), maxT(newHi, oldHi).Sub(tc)}, true
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

// mpFollows reads `multipath -ll`: whether the LUN's active path group
// is all on node to (nil: the map was not found).
func (c *ClientResult) mpFollows(out string, lun uint64, to string) *bool {
	// A path whose disk is gone (a dead controller's) prints as
	// "#:#:#:# - #:# ...": it is in no group that carries I/O.
	var keep []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, "#:#:#:#") {
			keep = append(keep, line)
		}
	}
	maps, err := ParseMultipathLL(strings.Join(keep, "\n"))
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
		// I/O goes to the group's paths that dm-multipath has active.
		n, ok := 0, true
		for _, p := range g.Paths {
			if p.DMState != "active" {
				continue
			}
			n++
			if d, known := c.disks[p.Dev]; !known || nodeOfPortal(d.Portal) != to {
				ok = false
			}
		}
		ok = ok && n > 0
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
		var bad, badV []string
		n := 0
		for _, res := range rep.Results {
			if res.Host != c.Spec.Name || res.Step == 0 || len(res.LUNs) == 0 {
				continue
			}
			st := rep.Steps[res.Step]
			// The event's figures, as qualify reports them: the longest
			// stall over the host's LUNs, the slowest follow over the LUNs
			// that moved.
			a := QualifyAgreement{Host: c.Spec.Name, Step: st.Index, Name: st.Name, ArrayStall: res.StallMs, ArrayFollow: res.FollowMs,
				FollowOK: true, VerdictOK: true}
			var gs, gf span
			never, moved, dmOK := false, 0, true
			for _, lr := range res.LUNs {
				dm := c.dmOf(lr.LUN)
				dmOK = dmOK && dm != ""
				s := g.guestStall(dm, onLab(st.Start), onLab(st.End))
				gs.lo, gs.hi = max(gs.lo, s.lo), max(gs.hi, s.hi)
				if !lr.Moved {
					continue
				}
				moved++
				until := st.End
				if !lr.Until.IsZero() {
					until = lr.Until // the array moved it again: the window qualify used
				}
				f, ok := g.guestFollow(c, lr.LUN, lr.To, onLab(lr.MovedAt), onLab(until))
				never = never || !ok
				gf.lo, gf.hi = max(gf.lo, f.lo), max(gf.hi, f.hi)
				mf := c.mpFollows(l.mpll[c.Spec.Name][st.Index], lr.LUN, lr.To)
				a.Topology = append(a.Topology, fmt.Sprintf("LUN %d: %s", lr.LUN, bptr(mf)))
				a.VerdictOK = a.VerdictOK && mf != nil && *mf == (*lr.FollowMs >= 0)
			}
			a.GuestStall = gs.String()
			a.StallOK = dmOK && gs.agrees(time.Duration(res.StallMs*1e6))
			if moved > 0 {
				a.GuestFollow = "never"
				if !never {
					a.GuestFollow = gf.String()
				}
				af := *res.FollowMs
				a.FollowOK = (af < 0 && never) || (af >= 0 && !never && gf.agrees(time.Duration(af*1e6)))
			}
			n++
			if !a.StallOK || !a.FollowOK {
				bad = append(bad, fmt.Sprintf("step %d %s: stall %.0f/%s ms, follow %s/%s", st.Index, st.Name, a.ArrayStall, a.GuestStall,
					fptr(a.ArrayFollow), a.GuestFollow))
			}
			if !a.VerdictOK {
				badV = append(badV, fmt.Sprintf("step %d %s: follow %s, active group on the owner %v", st.Index, st.Name, fptr(a.ArrayFollow), a.Topology))
			}
			l.res.Qualify = append(l.res.Qualify, a)
		}
		l.res.check(fmt.Sprintf("%s (%s): qualify's follow verdicts are multipathd's (the LUN's active path group on its owner at the end of each step)", c.Spec.Name, c.Spec.HostType),
			len(badV) == 0 && n > 0, "%d events; %s", n, strings.Join(badV, "; "))
		if l.opt.Scenario.QualifyAgree {
			l.res.check(fmt.Sprintf("%s (%s): qualify's stall and follow of every event agree with the guest's within 20%% or 100 ms", c.Spec.Name, c.Spec.HostType),
				len(bad) == 0 && n > 0, "%d events; %s", n, strings.Join(bad, "; "))
		}
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

// dmOf is the multipath device of a LUN (dm-N; "" if none).
func (c *ClientResult) dmOf(lun uint64) string {
	for _, m := range c.maps {
		if l, ok := c.lunOf(m); ok && l == lun {
			return m.DM
		}
	}
	return ""
}
