package lab

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/hosts"
)

// EventResult is what one scenario event did, measured over its phase
// (from the event to the next one, or the end of the run).
type EventResult struct {
	Label string        `json:"label"`
	Kind  string        `json:"kind"`
	At    time.Duration `json:"at_ns"`
	// Worst is the longest I/O in flight at the event or during any
	// ownership move the array or a host made in its phase; Stall the
	// longest time one host's stream to one LUN completed nothing, over the
	// same moments. The scenario's own operator moves (skew) are the
	// injected condition, not the reaction to it: the longest I/O through
	// them is OperatorWorst.
	Worst         time.Duration `json:"worst_ns"`
	Stall         time.Duration `json:"stall_ns"`
	OperatorWorst time.Duration `json:"operator_worst_ns,omitempty"`
	// P99 and Max over every I/O that started in the phase.
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
	IOs    int           `json:"ios"`
	Errors int           `json:"errors"`
	// Moves counts LUN ownership changes in the phase; Thrash those that
	// undid an earlier automatic change of the same LUN in the phase (a
	// host's or the core's decision reversed while the condition lasted).
	Moves  int `json:"moves"`
	Thrash int `json:"thrash"`
	// Follow is the longest time from an ownership move to the last host
	// using that LUN moving its I/O to the new owner; HostFollow is each
	// host's longest in the phase.
	Follow     time.Duration            `json:"follow_ns"`
	HostFollow map[string]time.Duration `json:"host_follow_ns,omitempty"`
}

// HistBucket counts I/Os with latency below Below.
type HistBucket struct {
	Below time.Duration `json:"below_ns"`
	Count int           `json:"count"`
}

func analyse(mr *ModeResult, s *Scenario, env *Env, actual []time.Time) {
	t0 := mr.Start
	end := t0.Add(s.Duration)
	for _, x := range mr.samples {
		mr.IOs++
		if x.Err {
			mr.Errors++
		}
	}
	firstEvent := end
	if len(actual) > 0 && !actual[0].IsZero() {
		firstEvent = actual[0]
	}
	mr.Baseline = Summarise(mr.samples, t0.Add(time.Second), firstEvent)
	mr.Hist = histogram(mr.samples)
	follows := followTimes(mr)
	for i, e := range s.Events {
		from := actual[i]
		to := end
		if i+1 < len(actual) {
			to = actual[i+1]
		}
		er := EventResult{Label: e.Label, Kind: e.Kind, At: from.Sub(t0)}
		st := Summarise(mr.samples, from, to)
		er.P99, er.Max, er.IOs, er.Errors = st.P99, st.Max, st.Count, st.Errors
		windows := [][2]time.Time{{from, from.Add(10 * time.Millisecond)}}
		var opWindows [][2]time.Time
		last := map[uint64]MoveRecord{}
		for mi, m := range mr.Moves {
			at := t0.Add(m.At)
			if at.Before(from) || !at.Before(to) {
				continue
			}
			w := [2]time.Time{at.Add(-m.Flush - m.Stop), at}
			if m.Cause == "manual" {
				opWindows = append(opWindows, w) // the scenario's own moves (skew)
			} else {
				windows = append(windows, w)
			}
			for _, lun := range m.LUNs {
				er.Moves++
				if p, ok := last[lun]; ok && p.From == m.To && p.Cause != "manual" && m.Cause != "manual" {
					er.Thrash++
				}
				last[lun] = m
				for _, f := range follows {
					if f.move == mi && f.lun == lun {
						er.Follow = max(er.Follow, f.d)
						if er.HostFollow == nil {
							er.HostFollow = map[string]time.Duration{}
						}
						name := env.Hosts[f.host].Name
						er.HostFollow[name] = max(er.HostFollow[name], f.d)
					}
				}
			}
		}
		er.Worst, er.Stall = worstAndStall(mr.samples, windows)
		if len(opWindows) > 0 {
			er.OperatorWorst, _ = worstAndStall(mr.samples, opWindows)
		}
		mr.Events = append(mr.Events, er)
	}
	for i, h := range env.Hosts {
		hr := HostResult{Name: h.Name, Stack: h.P.Name, Stats: h.Stats()}
		for _, p := range h.Paths() {
			hr.Paths = append(hr.Paths, PathResult{Name: p.Name, Up: p.Up(), Counters: p.Counters()})
		}
		for _, f := range follows {
			if f.host == i {
				hr.Follow = append(hr.Follow, f.d)
			}
		}
		slices.Sort(hr.Follow)
		mr.Hosts = append(mr.Hosts, hr)
	}
}

// follow is one host moving one LUN's I/O to the new owner after one
// ownership move.
type follow struct {
	move int
	lun  uint64
	host int
	d    time.Duration
}

// followTimes: for each move, LUN and host that had I/O on the LUN, the
// time from the move to the host's switch to the new owner (a host that
// did not switch before the LUN's next move is not counted).
func followTimes(mr *ModeResult) []follow {
	var out []follow
	users := map[int]map[uint64]bool{}
	for _, x := range mr.samples {
		if users[x.Host] == nil {
			users[x.Host] = map[uint64]bool{}
		}
		users[x.Host][x.LUN] = true
	}
	for mi, m := range mr.Moves {
		at := mr.Start.Add(m.At)
		for _, lun := range m.LUNs {
			until := time.Time{}
			for _, n := range mr.Moves[mi+1:] {
				if slices.Contains(n.LUNs, lun) {
					until = mr.Start.Add(n.At)
					break
				}
			}
			for hi, evs := range mr.hostEvts {
				if !users[hi][lun] {
					continue
				}
				if d, ok := switchAfter(evs, lun, m.To, at, at.Add(-m.Stop-m.Flush), until); ok {
					out = append(out, follow{mi, lun, hi, d})
				}
			}
		}
	}
	return out
}

// switchAfter is how long after at a host's I/O for lun went to node to:
// 0 when it was already there (its last switch before from went there),
// else the first switch there in [from, until). ok is false when it did
// not get there in time.
func switchAfter(evs []hosts.Event, lun uint64, to string, at, from, until time.Time) (time.Duration, bool) {
	cur := ""
	for _, e := range evs {
		if e.Kind != "switch" || e.LUN != lun {
			continue
		}
		if e.Time.Before(from) {
			_, cur, _ = strings.Cut(e.Detail, "->")
			continue
		}
		if cur == to {
			return 0, true
		}
		if !until.IsZero() && e.Time.After(until) {
			return 0, false
		}
		if strings.HasSuffix(e.Detail, "->"+to) {
			return max(e.Time.Sub(at), 0), true
		}
	}
	return 0, cur == to
}

// worstAndStall: the longest I/O in flight during any window, and the
// longest gap between completions of one (host, LUN) stream that
// overlaps a window.
func worstAndStall(samples []Sample, windows [][2]time.Time) (time.Duration, time.Duration) {
	overlaps := func(a, b time.Time) bool {
		for _, w := range windows {
			if !a.After(w[1]) && !b.Before(w[0]) {
				return true
			}
		}
		return false
	}
	var worst, stall time.Duration
	type key struct {
		h   int
		lun uint64
	}
	ends := map[key][]time.Time{}
	for _, x := range samples {
		end := x.Start.Add(x.Latency)
		if overlaps(x.Start, end) {
			worst = max(worst, x.Latency)
		}
		k := key{x.Host, x.LUN}
		ends[k] = append(ends[k], end)
	}
	for _, e := range ends {
		slices.SortFunc(e, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(e); i++ {
			if overlaps(e[i-1], e[i]) {
				stall = max(stall, e[i].Sub(e[i-1]))
			}
		}
	}
	return worst, stall
}

// histogram counts latencies in power-of-two buckets from 64 µs up.
func histogram(samples []Sample) []HistBucket {
	var out []HistBucket
	for b := 64 * time.Microsecond; b <= 64*time.Second; b *= 2 {
		out = append(out, HistBucket{Below: b})
	}
	for _, x := range samples {
		i := 0
		if x.Latency >= 64*time.Microsecond {
			i = int(math.Ceil(math.Log2(float64(x.Latency)/float64(64*time.Microsecond)) + 1e-9))
		}
		if i >= len(out) {
			i = len(out) - 1
		}
		out[i].Count++
	}
	for len(out) > 1 && out[len(out)-1].Count == 0 {
		out = out[:len(out)-1]
	}
	return out
}
