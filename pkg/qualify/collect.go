package qualify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// Source is what a run needs of the array: the management API's calls
// (api.Client implements it; tests wrap it to inject faults).
type Source interface {
	Status() (api.StatusInfo, error)
	LUNs() ([]api.LUNInfo, error)
	Hosts() ([]api.HostInfo, error)
	Move(lun uint64, to string) (*api.ChangeInfo, error)
	Rebalance() (api.RebalanceReply, error)
	Inject(f api.Fault) (api.FaultResult, error)
	Events(seq uint64) (api.EventsReply, error)
	Trace(bucket, note uint64, reader string) (api.TraceReply, error)
}

// slot is one host's commands to one LUN through one node in one trace
// bucket (the nexuses merged).
type slot struct {
	start               int64
	node                string
	arrived, done, good uint32
	checks              uint32
	firstArr, lastArr   int64 // absolute Unix ns
	firstGood, lastGood int64
}

type hlKey struct {
	host string
	lun  uint64
}

// collector polls the trace and the event feed for the whole run.
type collector struct {
	src   Source
	every time.Duration

	mu      sync.Mutex
	slots   map[hlKey]map[[2]any]*slot // (start, node) -> slot
	notes   []api.TraceNote
	events  []api.Event
	bucket  time.Duration
	lost    uint64
	evLost  uint64
	errs    int
	lastErr error
	polled  time.Time
	// the cursors of the trace's buckets and notes and of the feed
	curB, curN, curE uint64
	// reader names this run to the trace; others is how many other
	// readers the first read found; delay how long buckets stay open.
	reader string
	others int
	delay  time.Duration
	first  bool
	// started is the trace's start; restarts counts the times it changed
	// (the trace was turned off and on by someone else), lostBefore the
	// rows lost in the traces before.
	started    int64
	restarts   int
	lostBefore uint64
	// lostBase is what the trace had dropped before the run; skipped what
	// another reader's cursor took before this one read it; othersSeen:
	// another reader read the trace during the run.
	lostBase, skipped uint64
	othersSeen        bool
	// feedPolled is the start of the last good read of the feed; synced:
	// a final read covered the end of the run.
	feedPolled time.Time
	synced     bool

	stop context.CancelFunc
	done chan struct{}
}

func hostOf(n api.TraceNexus) string {
	if n.Host != "" {
		return n.Host
	}
	return n.Initiator
}

func startCollector(src Source, every time.Duration) (*collector, error) {
	ctx, cancel := context.WithCancel(context.Background())
	var id [8]byte
	_, _ = rand.Read(id[:])
	c := &collector{src: src, every: every, slots: map[hlKey]map[[2]any]*slot{}, stop: cancel, done: make(chan struct{}),
		reader: "qualify-" + hex.EncodeToString(id[:]), first: true}
	c.poll() // turns the trace on before anything is measured
	c.mu.Lock()
	err, others := c.lastErr, c.others
	c.mu.Unlock()
	switch {
	case err != nil:
		cancel()
		return nil, fmt.Errorf("qualify: the array's trace (GET /v1/trace): %w", err)
	case others > 0:
		cancel()
		return nil, errors.New("qualify: another qualification is reading the array's trace: one run at a time (each moves LUNs and injects faults, and the trace keeps one reader's rows)")
	}
	go c.loop(ctx)
	return c, nil
}

func (c *collector) loop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			c.poll()
			return
		case <-t.C:
			c.poll()
		}
	}
}

func (c *collector) poll() {
	c.mu.Lock()
	b, n, e := c.cursor()
	c.mu.Unlock()
	t0 := time.Now()
	tr, err := c.src.Trace(b, n, c.reader)
	var ev api.EventsReply
	var err2 error
	if err == nil {
		ev, err2 = c.src.Events(e)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil || err2 != nil {
		c.errs++
		c.lastErr = err
		if err == nil {
			c.lastErr = err2
		}
	}
	if err != nil {
		return
	}
	if c.first {
		c.others = tr.Readers
		c.lostBase = tr.Lost // dropped before this run
	} else if tr.Readers > 0 {
		c.othersSeen = true
	}
	c.delay = time.Duration(tr.DelayNs)
	if c.started != 0 && tr.Started != c.started {
		// The trace was stopped and started again (another reader's
		// DELETE): what it held is gone; read the new one from 0.
		c.restarts++
		c.curB, c.curN = 0, 0
		c.started = tr.Started
		c.lostBefore += c.lost
		c.lost, c.lostBase = 0, 0
		return
	}
	c.started = tr.Started
	c.polled = t0
	c.bucket = time.Duration(tr.BucketNs)
	c.skipped += tr.Skipped
	c.lost = tr.Lost - min(c.lostBase, tr.Lost) + c.skipped
	for _, r := range tr.Buckets {
		if r.LUN > 1<<40 {
			continue
		}
		k := hlKey{hostOf(r.TraceNexus), r.LUN}
		m := c.slots[k]
		if m == nil {
			m = map[[2]any]*slot{}
			c.slots[k] = m
		}
		sk := [2]any{r.Start, r.Node}
		s := m[sk]
		if s == nil {
			s = &slot{start: r.Start, node: r.Node}
			m[sk] = s
		}
		s.arrived += r.Arrived
		s.done += r.Done
		s.good += r.Good
		s.checks += r.Checks
		if r.Arrived > 0 {
			merge(&s.firstArr, &s.lastArr, r.Start+r.FirstArrival, r.Start+r.LastArrival)
		}
		if r.Good > 0 {
			merge(&s.firstGood, &s.lastGood, r.Start+r.FirstGood, r.Start+r.LastGood)
		}
	}
	c.notes = append(c.notes, tr.Notes...)
	c.setCursor(tr.NextBucket, tr.NextNote, 0)
	if err2 == nil {
		c.feedPolled = t0
		if !c.first {
			c.evLost += ev.Lost // the first read's are from before the run
		}
		c.events = append(c.events, ev.Events...)
		if len(ev.Events) > 0 {
			c.setCursor(tr.NextBucket, tr.NextNote, ev.Events[len(ev.Events)-1].Seq)
		}
		c.first = false
	}
}

func merge(first, last *int64, f, l int64) {
	if *first == 0 || f < *first {
		*first = f
	}
	if l > *last {
		*last = l
	}
}

func (c *collector) cursor() (uint64, uint64, uint64) { return c.curB, c.curN, c.curE }

func (c *collector) setCursor(b, n, e uint64) {
	c.curB, c.curN = b, n
	if e > 0 {
		c.curE = e
	}
}

// close stops polling after a last read. The trace is left on: another
// run may be reading it; the array turns it off a minute after the last
// read.
func (c *collector) close() {
	c.stop()
	<-c.done
}

// sync waits until a poll has read the trace and the feed up to now
// (buckets stay open for the trace's delay), for at most 15 s: an array
// that stopped answering leaves the run unsynced, and the report says so.
func (c *collector) sync(ctx context.Context) {
	c.mu.Lock()
	delay := c.delay
	c.mu.Unlock()
	want := time.Now().Add(delay + 2*c.bucketLen())
	deadline := want.Add(15 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		c.mu.Lock()
		ok := c.polled.After(want) && c.feedPolled.After(want)
		c.synced = ok
		c.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(c.every / 2)
	}
}

func (c *collector) bucketLen() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bucket <= 0 {
		return 10 * time.Millisecond
	}
	return c.bucket
}

// series returns a host's slots for a LUN sorted by time.
func (c *collector) series(host string, lun uint64) []slot {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.slots[hlKey{host, lun}]
	out := make([]slot, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].start != out[j].start {
			return out[i].start < out[j].start
		}
		return out[i].node < out[j].node
	})
	return out
}

// goodSince reports whether host completed a command to lun at or after t.
func (c *collector) goodSince(host string, lun uint64, t time.Time) bool {
	ns := t.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.slots[hlKey{host, lun}] {
		if s.good > 0 && s.lastGood >= ns {
			return true
		}
	}
	return false
}

// activity lists, per host, the LUNs with a completed command in [from, to).
func (c *collector) activity(from, to time.Time) map[string][]uint64 {
	f, t := from.UnixNano(), to.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]uint64{}
	for k, m := range c.slots {
		for _, s := range m {
			if s.good > 0 && s.lastGood >= f && s.firstGood < t {
				out[k.host] = append(out[k.host], k.lun)
				break
			}
		}
	}
	for h := range out {
		sort.Slice(out[h], func(i, j int) bool { return out[h][i] < out[h][j] })
	}
	return out
}

// eventsSince returns the feed's events at or after t.
func (c *collector) eventsSince(t time.Time) []api.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(c.events), func(i int) bool { return !c.events[i].Time.Before(t) })
	return append([]api.Event(nil), c.events[i:]...)
}

// changes returns the ALUA changes made in [from, to) that took effect.
func (c *collector) changes(from, to time.Time) []api.Event {
	var out []api.Event
	for _, e := range c.eventsSince(from) {
		if !e.Time.Before(to) {
			break
		}
		// A change without both owners is a group's state (a node went
		// offline or came back), not a move.
		if e.Kind == api.EventALUA && e.Change != nil && !e.Change.Failed && e.Change.Cause != "rollback" &&
			e.Change.From != "" && e.Change.To != "" && e.Change.To != e.Change.From {
			out = append(out, e)
		}
	}
	return out
}

func (c *collector) notesCopy() []api.TraceNote {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]api.TraceNote(nil), c.notes...)
}
