package qemulab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// pathKey names the I/O of one host initiator to one LUN through one node.
type pathKey struct {
	Initiator, Node string
	LUN             uint64
}

type mediaStep struct {
	t     time.Time // when the poll saw the count
	media uint64
}

// Watcher polls the array's per-path I/O every 10 ms and its event feed
// every 100 ms, so a host's switch after a move can be timed afterwards
// at the array's clock.
type Watcher struct {
	c *api.Client
	// offset is the array's clock minus the lab's (aluad in the storage
	// guest runs on the guest's clock); times read from it are moved onto
	// the lab's clock.
	offset time.Duration

	mu     sync.Mutex
	steps  map[pathKey][]mediaStep // only when the count changed
	last   map[pathKey]time.Time   // latest media arrival
	events []api.Event
	polls  int
	errs   int
	start  time.Time
	// gap is the longest time between two successful polls: the real
	// resolution of FirstNew on a busy machine.
	gap      time.Duration
	lastPoll time.Time
	stop     context.CancelFunc
	done     chan struct{}
}

// Watch starts polling.
func Watch(c *api.Client, offset time.Duration) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Watcher{c: c, offset: offset, steps: map[pathKey][]mediaStep{}, last: map[pathKey]time.Time{}, stop: cancel, done: make(chan struct{}),
		start: time.Now()}
	go w.loop(ctx)
	return w
}

func (w *Watcher) loop(ctx context.Context) {
	defer close(w.done)
	var seq uint64
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ios, err := w.c.IO()
		now := time.Now()
		w.mu.Lock()
		w.polls++
		if err != nil {
			w.errs++
		} else {
			if !w.lastPoll.IsZero() {
				w.gap = max(w.gap, now.Sub(w.lastPoll))
			}
			w.lastPoll = now
		}
		sum := map[pathKey]uint64{}
		for _, p := range ios {
			k := pathKey{p.Initiator, p.Node, p.LUN}
			sum[k] += p.Media
			if lm := p.LastMedia.Add(-w.offset); lm.After(w.last[k]) {
				w.last[k] = lm
			}
		}
		for k, m := range sum {
			s := w.steps[k]
			if len(s) == 0 || s[len(s)-1].media != m {
				w.steps[k] = append(s, mediaStep{now, m})
			}
		}
		w.mu.Unlock()
		if i%10 == 0 {
			if ev, err := w.c.Events(seq); err == nil && len(ev.Events) > 0 {
				w.mu.Lock()
				for _, e := range ev.Events {
					e.Time = e.Time.Add(-w.offset)
					w.events = append(w.events, e)
				}
				w.mu.Unlock()
				seq = ev.Events[len(ev.Events)-1].Seq
			}
		}
	}
}

// PollStats says how the polling went: the polls made, the failed ones,
// the mean interval and the longest gap between two successful polls.
type PollStats struct {
	Polls   int           `json:"polls"`
	Errors  int           `json:"errors"`
	Mean    time.Duration `json:"mean_ns"`
	Longest time.Duration `json:"longest_gap_ns"`
}

// Stats returns the polling statistics so far.
func (w *Watcher) Stats() PollStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := PollStats{Polls: w.polls, Errors: w.errs, Longest: w.gap}
	if w.polls > 0 {
		st.Mean = time.Since(w.start) / time.Duration(w.polls)
	}
	return st
}

// Close stops polling.
func (w *Watcher) Close() {
	w.stop()
	<-w.done
}

// Changes returns the ALUA changes made at or after t.
func (w *Watcher) Changes(t time.Time) []api.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []api.Event
	for _, e := range w.events {
		if e.Kind == api.EventALUA && e.Change != nil && !e.Change.Failed && !e.Time.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// Follow is how one host followed one LUN's move.
type Follow struct {
	Host, Initiator string
	LUN             uint64
	From, To, Cause string
	Moved           time.Time // the change committed (UA queued)
	// UA: the host's first 2A/06 for the LUN after the move (zero if none).
	UA time.Time
	// FirstNew: the first READ/WRITE seen at the new owner (poll time,
	// 10 ms resolution); LastOld: the last to arrive at the old owner
	// after the move (zero if none).
	FirstNew, LastOld time.Time
	// Switched: from then on, all of the host's I/O to the LUN ran on the
	// new owner (the later of FirstNew and LastOld); zero if not yet.
	Switched time.Time
	Stop     time.Duration // the array's I/O hold for the move
	// Already: the host was sending I/O to the new owner in the 2 s
	// before the move (its multipath used the non-owner's paths).
	Already bool
}

// Done says whether the host runs all I/O on the new owner.
func (f Follow) Done() bool { return !f.Switched.IsZero() }

// MoveToSwitch and UAToSwitch are the figures reported.
func (f Follow) MoveToSwitch() time.Duration { return f.Switched.Sub(f.Moved) }

// UAToSwitch is the time from the host's UA to its switch (negative: the
// host switched before it was told, e.g. its old path failed first).
func (f Follow) UAToSwitch() time.Duration {
	if f.UA.IsZero() {
		return 0
	}
	return f.Switched.Sub(f.UA)
}

// follow computes how initiator followed a change of lun (from -> to),
// as seen at time at: a host that still sent I/O to the old owner in the
// 2 s before at has not switched.
func (w *Watcher) follow(initiator string, lun uint64, ch api.Event, at time.Time) Follow {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := ch.Change
	f := Follow{Initiator: initiator, LUN: lun, From: c.From, To: c.To, Cause: c.Cause, Moved: ch.Time, Stop: c.Stop}
	for _, e := range w.events {
		if e.Kind == api.EventUA && e.Initiator == initiator && e.LUN != nil && *e.LUN == lun &&
			e.Reason == "2A/06" && !e.Time.Before(ch.Time.Add(-2*time.Second)) {
			f.UA, f.Host = e.Time, e.Host
			break
		}
	}
	s := w.steps[pathKey{initiator, c.To, lun}]
	var base uint64
	i := sort.Search(len(s), func(i int) bool { return !s[i].t.Before(ch.Time) })
	if i > 0 {
		base = s[i-1].media
		// Two counts before the move, the latest within 2 s of it, that differ.
		f.Already = i > 1 && s[i-1].t.After(ch.Time.Add(-2*time.Second)) && s[i-2].media < base
	}
	for ; i < len(s); i++ {
		if s[i].media > base {
			f.FirstNew = s[i].t
			break
		}
	}
	if l := w.last[pathKey{initiator, c.From, lun}]; l.After(ch.Time) {
		f.LastOld = l
	}
	if !f.FirstNew.IsZero() {
		f.Switched = f.FirstNew
		if f.LastOld.After(f.Switched) {
			f.Switched = f.LastOld
		}
		if f.LastOld.After(at.Add(-2 * time.Second)) {
			f.Switched = time.Time{}
		}
	}
	return f
}

// Events returns the feed's events of a kind at or after t.
func (w *Watcher) Events(kind string, t time.Time) []api.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []api.Event
	for _, e := range w.events {
		if e.Kind == kind && !e.Time.Before(t) {
			out = append(out, e)
		}
	}
	return out
}

// Moves returns the ALUA changes at or after t that moved a LUN from one
// node to another (not a node going down or coming up).
func (w *Watcher) Moves(t time.Time) []api.Event {
	var out []api.Event
	for _, e := range w.Changes(t) {
		if e.Change.From != "" && e.Change.To != "" {
			out = append(out, e)
		}
	}
	return out
}

// LastLogin is the latest login of initiator on node at or after t (zero
// if none), and how many there were.
func (w *Watcher) LastLogin(initiator, node string, t time.Time) (time.Time, int) {
	var last time.Time
	n := 0
	for _, e := range w.Events(api.EventLogin, t) {
		if e.Initiator == initiator && (node == "" || e.Node == node) {
			n++
			if e.Time.After(last) {
				last = e.Time
			}
		}
	}
	return last, n
}

// LastCommand is the end of the last interval in which the initiator's
// commands arrived on node (path events with exchanges) at or after t and
// before until (zero: no bound); zero if none.
func (w *Watcher) LastCommand(initiator, node string, t, until time.Time) time.Time {
	var last time.Time
	for _, e := range w.Events(api.EventPath, t) {
		if e.Initiator == initiator && e.Node == node && e.Path != nil && e.Path.Exchanges > 0 &&
			(until.IsZero() || e.Time.Before(until)) && e.Time.After(last) {
			last = e.Time
		}
	}
	return last
}

// Raised is the first time a report of condition was raised for host on
// node at or after t (zero if never).
func (w *Watcher) Raised(condition, host, node string, t time.Time) time.Time {
	for _, e := range w.Events(api.EventReport, t) {
		if r := e.Report; r != nil && r.Raised && r.Condition == condition && r.Host == host && (node == "" || r.Node == node) {
			return e.Time
		}
	}
	return time.Time{}
}

// describeMoves renders moves for a check's detail.
func describeMoves(es []api.Event, base time.Time) string {
	if len(es) == 0 {
		return "none"
	}
	var s []string
	for _, e := range es {
		s = append(s, fmt.Sprintf("LUNs %v %s->%s (%s) at +%v", e.Change.LUNs, e.Change.From, e.Change.To, e.Change.Cause,
			e.Time.Sub(base).Round(100*time.Millisecond)))
	}
	return strings.Join(s, "; ")
}

// WriteEvents writes the array's event feed as the lab saw it (times on
// the lab's clock), one JSON object a line, without the per-interval I/O
// and path samples.
func (w *Watcher) WriteEvents(path string) error {
	return w.writeEvents(path, func(e api.Event) bool { return e.Kind != api.EventIO && e.Kind != api.EventPath })
}

// WriteTraffic writes the per-interval traffic events (io, and path with
// exchanges), one JSON object a line: what the array saw arrive on each
// nexus, the evidence its discovery is judged on.
func (w *Watcher) WriteTraffic(path string) error {
	return w.writeEvents(path, func(e api.Event) bool {
		return e.Kind == api.EventIO || (e.Kind == api.EventPath && e.Path != nil && e.Path.Exchanges > 0)
	})
}

func (w *Watcher) writeEvents(path string, keep func(api.Event) bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, e := range w.events {
		if !keep(e) {
			continue
		}
		j, err := json.Marshal(e)
		if err != nil {
			return err
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
