package qualify

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// tailQuiet: a host whose I/O still arrived at a non-owner this close to
// the end of a step has not followed.
const tailQuiet = time.Second

// TimelineBucket is the charts' resolution.
const TimelineBucket = 250 * time.Millisecond

func (r *runner) eventHost(e api.Event) string {
	if e.Host != "" {
		return e.Host
	}
	return e.Initiator
}

// analyse measures every host in every step and judges it.
func (r *runner) analyse(hosts map[string]HostReport) {
	rep := r.rep
	for i := range rep.Steps {
		st := &rep.Steps[i]
		st.Changes = []Change{}
		for _, e := range r.col.changes(st.Start, st.End) {
			c := e.Change
			st.Changes = append(st.Changes, Change{Time: e.Time, LUNs: c.LUNs, From: c.From, To: c.To, Cause: c.Cause, HoldMs: ms(c.Stop)})
		}
	}
	events := r.col.eventsSince(r.t0)
	changes := r.col.changes(r.t0, r.rep.End.Add(time.Hour))
	notes := r.col.notesCopy()
	for _, name := range sortedHosts(hosts) {
		h := hosts[name]
		lim := r.o.Limits.For(h.Type)
		for _, st := range rep.Steps {
			res := Result{Host: name, Type: h.Type, Step: st.Index}
			if st.Class == ClassDiscovery {
				res.Verdict = "pass"
				for _, n := range r.nodes {
					if v := h.Nodes[n]; v != "reaches" && v != "logged-in" {
						res.fails = append(res.fails, discoveryFailure(n, v))
					}
				}
				// A stall is told from a pause only under steady I/O.
				for _, l := range h.LUNs {
					g, _, _ := longestGap(r.col.series(name, l), st.Start.UnixNano(), st.End.UnixNano())
					res.StallMs = max(res.StallMs, ms(g))
					if g > lim.PlannedStall/2 {
						res.fails = append(res.fails, failure{"steady I/O", fmt.Sprintf("LUN %d: a gap of %s in its I/O before any event", l, fmtMs(ms(g))),
							"qualify tells a stall from a pause only under steady I/O: run a steady load on every LUN through the run (fio --rate_iops, vdbench)"})
					}
				}
			} else {
				r.measure(&res, h, st, events, changes, notes)
				judge(&res, st, lim, r.hadSessions(name, st))
			}
			if len(res.fails) > 0 {
				res.Verdict = "fail"
			}
			rep.Results = append(rep.Results, res)
		}
	}
	r.hostAdvice(hosts)
	for i := range rep.Results {
		res := &rep.Results[i]
		for _, f := range res.fails {
			res.Failures = append(res.Failures, f.check+": "+f.observed)
		}
	}
	rep.Pass = true
	for _, name := range sortedHosts(hosts) {
		h := hosts[name]
		h.Pass = true
		for _, res := range rep.Results {
			if res.Host != name || res.Verdict == "n/a" {
				continue
			}
			h.Steps++
			if res.Verdict == "fail" {
				h.Failed++
				h.Pass = false
			}
		}
		rep.Pass = rep.Pass && h.Pass
		rep.Hosts = append(rep.Hosts, h)
	}
	for _, res := range rep.Results {
		st := rep.Steps[res.Step]
		for _, f := range res.fails {
			rep.Findings = append(rep.Findings, Finding{Host: res.Host, Type: res.Type, Step: res.Step, StepName: st.Name,
				Check: f.check, Observed: f.observed, Advice: f.advice})
		}
	}
	r.col.mu.Lock()
	lost, restarts, others, synced := r.col.lost+r.col.lostBefore, r.col.restarts, r.col.othersSeen, r.col.synced
	r.col.mu.Unlock()
	detail := plural(int(lost), "trace row") + " dropped"
	if restarts > 0 {
		detail += fmt.Sprintf("; the trace was turned off and on %s during the run (DELETE /v1/trace): what it held then is missing", plural(restarts, "time"))
	}
	if others {
		detail += "; another reader read the trace during the run (the trace keeps one reader's rows)"
	}
	if !synced {
		detail += "; the trace and the feed could not be read to the end of the run"
	}
	rep.Array = append(rep.Array, Check{Name: "the array's trace kept every command", OK: lost == 0 && restarts == 0 && !others && synced, Detail: detail})
	r.col.mu.Lock()
	evLost, errs, lastErr := r.col.evLost, r.col.errs, r.col.lastErr
	r.col.mu.Unlock()
	detail = plural(int(evLost), "event") + " lost"
	if errs > 0 {
		detail += fmt.Sprintf("; %s of the trace or the feed failed (the next read caught up), the last: %v", plural(errs, "read"), lastErr)
	}
	rep.Array = append(rep.Array, Check{Name: "the array's event feed kept every event", OK: evLost == 0, Detail: detail})
	for _, c := range rep.Array {
		rep.Pass = rep.Pass && c.OK
	}
	rep.Pass = rep.Pass && rep.Error == ""
	rep.TimelineBucket = TimelineBucket
	rep.Timeline = r.timeline(hosts)
}

// ownerAt is the LUN's owner at t, from the owners at the start of the
// run and the changes since.
func (r *runner) ownerAt(l uint64, t time.Time, changes []api.Event) string {
	o := r.owner0[l]
	for _, e := range changes {
		if e.Time.After(t) {
			break
		}
		if slices.Contains(e.Change.LUNs, l) {
			o = e.Change.To
		}
	}
	return o
}

func (r *runner) measure(res *Result, h HostReport, st Step, events, all []api.Event, notes []api.TraceNote) {
	start, end := st.Start.UnixNano(), st.End.UnixNano()
	var uaSeen, rtpgAfter = 0, 0
	for _, l := range h.LUNs {
		lr := LUNResult{LUN: l}
		series := r.col.series(h.Name, l)
		// The step's change of the LUN (the first of the step's cause, or
		// the first at all), and the next change after it, if any: the
		// follow is measured up to that.
		var mine []api.Event
		for _, e := range all {
			if !e.Time.Before(st.Start) && e.Time.Before(st.End) && slices.Contains(e.Change.LUNs, l) {
				mine = append(mine, e)
			}
		}
		pick := slices.IndexFunc(mine, func(e api.Event) bool { return st.Cause == "" || e.Change.Cause == st.Cause })
		if pick < 0 && len(mine) > 0 {
			pick = 0
		}
		winEnd := st.End
		if pick >= 0 {
			e := mine[pick]
			lr.Moved, lr.From, lr.To, lr.MovedAt = true, e.Change.From, e.Change.To, e.Time
			if pick+1 < len(mine) {
				n := mine[pick+1]
				winEnd, lr.Until = n.Time, n.Time
				lr.Then = fmt.Sprintf("%s to %s %s later", n.Change.Cause, n.Change.To, fmtMs(ms(n.Time.Sub(e.Time))))
			}
		}
		if lr.Moved {
			never := -1.0
			lr.FollowMs = &never
			if d, ok := follow(series, lr.To, lr.MovedAt.UnixNano(), winEnd.UnixNano()); ok {
				lr.FollowMs = msp(d)
			}
			for _, e := range events {
				if e.Kind == api.EventUA && e.Reason == "2A/06" && r.eventHost(e) == h.Name && e.LUN != nil && *e.LUN == l &&
					!e.Time.Before(lr.MovedAt.Add(-100*time.Millisecond)) && e.Time.Before(winEnd) {
					lr.UA, lr.UAMs = true, msp(max(e.Time.Sub(lr.MovedAt), 0))
					for _, x := range events {
						if x.Kind == api.EventRTPG && r.eventHost(x) == h.Name && !x.Time.Before(e.Time) && x.Time.Before(st.End) &&
							(x.LUN == nil || *x.LUN == l) {
							lr.RTPG = true
							break
						}
					}
					break
				}
			}
			if lr.UA {
				uaSeen++
				if lr.RTPG {
					rtpgAfter++
				}
			}
		}
		gap, at, idle := longestGap(series, start, end)
		lr.StallMs, lr.StallAt, lr.Idle = ms(gap), at, idle
		owner := r.ownerAt(l, st.End, all)
		lr.OnOwner = onOwner(series, owner, end-int64(time.Second), end)
		for _, n := range notes {
			if hostOf(n.TraceNexus) != h.Name || n.Time < start || n.Time >= end {
				continue
			}
			switch {
			case n.Kind == api.TraceCheck && n.LUN == l:
				lr.Checks = inc(lr.Checks, n.Sense)
			case n.Kind == api.TraceTMF && (n.LUN == l || n.Function == "target-warm-reset" || n.Function == "target-cold-reset"):
				lr.TMFs = inc(lr.TMFs, n.Function)
			}
		}
		res.LUNs = append(res.LUNs, lr)
		if lr.FollowMs != nil {
			v := *lr.FollowMs
			switch {
			case res.FollowMs == nil:
				res.FollowMs = &v
			case *res.FollowMs < 0:
			case v < 0 || v > *res.FollowMs:
				*res.FollowMs = v
			}
		}
		res.StallMs = max(res.StallMs, lr.StallMs)
		for k, v := range lr.Checks {
			res.Checks = add(res.Checks, k, v)
		}
		for k, v := range lr.TMFs {
			res.TMFs = add(res.TMFs, k, v)
		}
	}
	// A target reset counts once per host, not once per LUN.
	for _, f := range []string{"target-warm-reset", "target-cold-reset"} {
		if res.TMFs[f] > 0 {
			n := 0
			for _, x := range notes {
				if hostOf(x.TraceNexus) == h.Name && x.Kind == api.TraceTMF && x.Function == f && x.Time >= start && x.Time < end {
					n++
				}
			}
			res.TMFs[f] = n
		}
	}
	if uaSeen > 0 {
		res.RTPG = "no"
		if rtpgAfter == uaSeen {
			res.RTPG = "yes"
		}
	}
	for _, e := range events {
		if r.eventHost(e) != h.Name || e.Time.Before(st.Start) || !e.Time.Before(st.End) {
			continue
		}
		switch e.Kind {
		case api.EventLogin:
			res.Relogins++
			if (st.Port != "" && e.TargetPort == r.portID[st.Port]) || (st.Node != "" && st.Port == "" && e.Node == st.Node) {
				res.LoginsHere++
			}
		case api.EventLogout:
			if e.Reason == "logout" {
				res.Logouts++
			} else {
				res.Drops++
			}
		}
	}
}

// follow is the time from the change at tc (Unix ns) until all of the
// host's I/O to the LUN arrived at node to: the later of the first
// arrival there and the last arrival elsewhere after tc. Negative: it had
// not by the end (or still sent I/O elsewhere within tailQuiet of it): false.
func follow(series []slot, to string, tc, end int64) (time.Duration, bool) {
	var firstNew, lastOld int64
	for _, s := range series {
		if s.arrived == 0 || s.lastArr < tc || s.start >= end {
			continue
		}
		if s.node == to {
			f := max(s.firstArr, tc)
			if firstNew == 0 || f < firstNew {
				firstNew = f
			}
		} else {
			lastOld = max(lastOld, s.lastArr)
		}
	}
	tail := min(int64(tailQuiet), (end-tc)/2)
	if firstNew == 0 || lastOld > end-tail {
		return 0, false
	}
	return time.Duration(max(firstNew, lastOld) - tc), true
}

// longestGap is the longest time without a GOOD completion that overlaps
// [start, end), when it began, and whether nothing completed in the step
// at all.
func longestGap(series []slot, start, end int64) (time.Duration, time.Time, bool) {
	type span struct{ f, l int64 }
	var spans []span
	for _, s := range series {
		if s.good > 0 {
			spans = append(spans, span{s.firstGood, s.lastGood})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].f < spans[j].f })
	var best, at int64
	var prev int64
	inStep := false
	for _, sp := range spans {
		if sp.f >= start && sp.f < end {
			inStep = true
		}
		if prev != 0 && sp.f > prev && prev < end && sp.f > start {
			// Only the part of the gap inside the step counts.
			if g := min(sp.f, end) - max(prev, start); g > best {
				best, at = g, max(prev, start)
			}
		}
		prev = max(prev, sp.l)
	}
	if prev != 0 && prev < end {
		// Nothing completed from prev to the end of what was read.
		if g := end - max(prev, start); g > best {
			best, at = g, max(prev, start)
		}
	}
	if prev == 0 {
		return time.Duration(end - start), time.Unix(0, start), true
	}
	return time.Duration(best), time.Unix(0, at), !inStep
}

// onOwner: I/O arrived in [from, to) and all of it at owner.
func onOwner(series []slot, owner string, from, to int64) bool {
	seen := false
	for _, s := range series {
		if s.arrived == 0 || s.lastArr < from || s.start >= to {
			continue
		}
		if s.node != owner {
			return false
		}
		seen = true
	}
	return seen
}

func inc(m map[string]int, k string) map[string]int { return add(m, k, 1) }

func add(m map[string]int, k string, v int) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[k] += v
	return m
}

// timeline counts each host's GOOD completions per TimelineBucket and node.
func (r *runner) timeline(hosts map[string]HostReport) map[string]map[string][]int {
	t0, t1 := r.rep.Steps[0].Start.UnixNano(), r.rep.End.UnixNano()
	n := max(int((t1-t0)/int64(TimelineBucket))+1, 1)
	out := map[string]map[string][]int{}
	for name, h := range hosts {
		per := map[string][]int{}
		for _, node := range r.nodes {
			per[node] = make([]int, n)
		}
		for _, l := range h.LUNs {
			for _, s := range r.col.series(name, l) {
				if s.good == 0 || s.lastGood < t0 || s.lastGood >= t1 {
					continue
				}
				if c, i := per[s.node], (s.lastGood-t0)/int64(TimelineBucket); c != nil && i >= 0 && i < int64(len(c)) {
					c[i] += int(s.good)
				}
			}
		}
		out[name] = per
	}
	return out
}

// hadSessions counts the host's sessions at the start through the port
// or the node a step acts on.
func (r *runner) hadSessions(host string, st Step) int {
	n := 0
	if st.Port != "" {
		n += r.start[st.Port][host]
	}
	if st.Node != "" && st.Class == ClassRestart {
		for _, p := range r.ports[st.Node] {
			n += r.start[p][host]
		}
	}
	return n
}
