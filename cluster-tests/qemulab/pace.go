package qemulab

import (
	"fmt"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// The lab's waits on things the guests do by their own timers (iscsid's
// reconnects, multipathd's path checker, udev) are scaled by the guests'
// measured pace: on a loaded 2-core machine a TCG guest runs several
// times slower than on a quiet one, and a wait sized for the quiet one
// then fails a run the array did nothing wrong in. The waits on the
// array's own decisions (a failover: the cut is the array's) are not
// scaled, and a wait that runs out says what the array saw (evidence),
// so a real fault is not mistaken for a slow guest.

// Quiet-machine figures (docs/qemu-lab.md): a guest answers 9 s after
// QEMU starts (25 s when five boot at once), and one guest is set up in
// 12-23 s (80-110 s for five).
const (
	nominalBootOne  = 9 * time.Second
	nominalBootMore = 4 * time.Second // each more guest booting at once
	nominalUpOne    = 35 * time.Second
	nominalUpMore   = 20 * time.Second
	maxPace         = 4.0
	// multipathd's path checker interval grows to 20 s (max_polling_interval).
	checkerMax = 20 * time.Second
	// The lab array's discovery window (ArraySpec.Config).
	discoveryWindow = 30 * time.Second
	// silenceWindow: the array's (ownership.Config.SilenceWindow, a
	// minute of wall time): how long a node's paths must be silent before
	// a host a scan made it take for multipath is judged to run none.
	silenceWindow = time.Minute
)

// nominalBoot is the boot time of a guest on a quiet machine when n boot at once.
func nominalBoot(n int) time.Duration {
	return nominalBootOne + time.Duration(max(n-1, 0))*nominalBootMore
}

// nominalUp is boot plus set-up on a quiet machine when n come up at once.
func nominalUp(n int) time.Duration { return nominalUpOne + time.Duration(max(n-1, 0))*nominalUpMore }

// scaleDur scales d by pace p (clamped to [1, maxPace]).
func scaleDur(d time.Duration, p float64) time.Duration {
	return time.Duration(float64(d) * min(max(p, 1), maxPace))
}

// setPace measures the guests' pace from their bring-up (boot and
// set-up) against a quiet machine's, and records the waits derived.
func (l *lab) setPace() {
	var slowest time.Duration
	for _, c := range l.res.Clients {
		slowest = max(slowest, c.Booted+c.SetUp)
	}
	l.pace = min(max(slowest.Seconds()/nominalUp(len(l.res.Clients)).Seconds(), 1), maxPace)
	l.res.Pace = l.pace
	r := func(d time.Duration) string { return d.Round(time.Second).String() }
	l.res.Waits = map[string]string{
		"follow window":      r(l.scaled(l.opt.Follow)),
		"guest back (paths)": r(l.scaled(90 * time.Second)),
		"failback after the guest is back": fmt.Sprintf("failback window %v + discovery window %v + checker %v",
			l.failbackWindow(), discoveryWindow, r(l.scaled(checkerMax))),
	}
	l.opt.Log("guests' pace %.2fx a quiet machine's (slowest bring-up %v, nominal %v): follow window %v",
		l.pace, slowest.Round(100*time.Millisecond), nominalUp(len(l.res.Clients)), r(l.scaled(l.opt.Follow)))
}

// scaled is d at the guests' pace.
func (l *lab) scaled(d time.Duration) time.Duration { return scaleDur(d, l.pace) }

func (l *lab) failbackWindow() time.Duration { return 5 * time.Second } // ArraySpec.FailbackWindow in run

// failbackDeadline is when the array's failback to node, after the
// repair at start, is late: every guest back on node (its last login
// there, waited for at the guests' pace) plus the array's failback
// window, its discovery window and one path-checker interval at the
// guests' pace. Before every guest is back: start + fallback at the
// guests' pace.
func (l *lab) failbackDeadline(start time.Time, node string, fallback time.Duration) time.Time {
	var back time.Time
	for _, c := range l.res.Clients {
		t, _ := l.w.LastLogin(c.IQN, node, start)
		if t.IsZero() {
			return start.Add(l.scaled(fallback))
		}
		back = maxT(back, t)
	}
	return back.Add(l.failbackWindow() + discoveryWindow + l.scaled(checkerMax))
}

// evidence says, for each guest, what the array saw of it on node since
// start: its logins, its RTPGs, its media I/O (what discovery rests on).
func (l *lab) evidence(start time.Time, node string) string {
	var out []string
	for _, c := range l.res.Clients {
		t, n := l.w.LastLogin(c.IQN, node, start)
		s := fmt.Sprintf("%s: %d logins on node %s", c.Spec.Name, n, node)
		if n > 0 {
			s += fmt.Sprintf(" (last +%v)", t.Sub(start).Round(100*time.Millisecond))
		}
		rtpg := 0
		for _, e := range l.w.Events(api.EventRTPG, start) {
			if e.Initiator == c.IQN && e.Node == node {
				rtpg++
			}
		}
		s += fmt.Sprintf(", %d RTPGs there, %d media commands there", rtpg, l.w.media(c.IQN, node, start))
		out = append(out, s)
	}
	return "the array saw " + strings.Join(out, "; ")
}

// media is how many media commands of initiator arrived at node since t
// (as the polls saw the counts rise).
func (w *Watcher) media(initiator, node string, t time.Time) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var n uint64
	for k, s := range w.steps {
		if k.Initiator != initiator || k.Node != node || len(s) == 0 {
			continue
		}
		// The rises after t (a count falls when a session's counters
		// start again after a relogin: that step adds nothing).
		for i := 1; i < len(s); i++ {
			if !s[i].t.Before(t) && s[i].media > s[i-1].media {
				n += s[i].media - s[i-1].media
			}
		}
	}
	return n
}
