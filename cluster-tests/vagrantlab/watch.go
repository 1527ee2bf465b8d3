package vagrantlab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// Controller is one controller VM's API on the management network.
type Controller struct {
	Machine, Node, Base, Token string
}

func (c Controller) get(ctx context.Context, hc *http.Client, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Base+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s%s: %s", c.Base, path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Client is the API client of the full API (moves, LUNs).
func (c Controller) Client() *api.Client { return api.NewHTTPClient(c.Base, c.Token) }

type ioKey struct {
	Initiator, Node string
	LUN             uint64
}

type sample struct {
	t    time.Time
	good uint64 // READs and WRITEs completed GOOD
}

// Watcher polls every controller's GET /v1/io and keeps, per initiator,
// node and LUN, the host-clock times its GOOD READ and WRITE count rose.
type Watcher struct {
	mu    sync.Mutex
	last  map[ioKey]sample
	rises map[ioKey][]time.Time
	gap   time.Duration        // the longest time between two answered polls of a controller
	down  map[string]time.Time // controllers powered off, and when: their next answer to a later call starts afresh
	// answered: when each node's latest answered poll was asked. What a
	// node did after it is not known yet: a slow answer's rise lands
	// later.
	answered map[string]time.Time
	polls    int
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func newWatcher() *Watcher {
	return &Watcher{last: map[ioKey]sample{}, rises: map[ioKey][]time.Time{}, down: map[string]time.Time{}, answered: map[string]time.Time{}}
}

// Watch starts polling each controller every interval.
func Watch(cs []Controller, interval time.Duration) *Watcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := newWatcher()
	w.cancel = cancel
	for _, c := range cs {
		w.wg.Add(1)
		go w.poll(ctx, c, interval)
	}
	return w
}

func (w *Watcher) poll(ctx context.Context, c Controller, interval time.Duration) {
	defer w.wg.Done()
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var prev time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var ios []api.PathIO
		asked := time.Now()
		if err := c.get(ctx, hc, "/v1/io", &ios); err != nil {
			continue
		}
		now := time.Now()
		w.AddPoll(asked, now, c.Node, ios)
		w.mu.Lock()
		if off, ok := w.down[c.Node]; ok && asked.After(off) {
			// Its first answer since it was powered off: the time it was
			// off is not a gap of the polling.
			delete(w.down, c.Node)
			prev = time.Time{}
		}
		if !prev.IsZero() {
			w.gap = max(w.gap, now.Sub(prev))
		}
		w.polls++
		w.mu.Unlock()
		prev = now
	}
}

// Add takes one poll of a controller's per-path I/O answered at time t,
// asked then too (AddPoll).
func (w *Watcher) Add(t time.Time, node string, ios []api.PathIO) { w.AddPoll(t, t, node, ios) }

// AddPoll takes one poll of a controller's per-path I/O, asked at asked
// and answered at t: a count above the previous one is a rise, stamped t.
// A count below it is a new baseline, not I/O: a session that ended took
// its counters with it, or the controller restarted (its new process's
// first I/O is then seen one poll later, at the next rise). The answer
// covers what the node did up to asked, not up to t.
func (w *Watcher) AddPoll(asked, t time.Time, node string, ios []api.PathIO) {
	sum := map[ioKey]uint64{}
	for _, p := range ios {
		n := p.Node
		if n == "" {
			n = node
		}
		sum[ioKey{p.Initiator, n, p.LUN}] += p.Reads + p.Writes
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if asked.After(w.answered[node]) {
		w.answered[node] = asked
	}
	for k, v := range sum {
		prev, seen := w.last[k]
		if seen && v > prev.good {
			w.rises[k] = append(w.rises[k], t)
		}
		w.last[k] = sample{t, v}
	}
}

// Close stops polling.
func (w *Watcher) Close() {
	w.cancel()
	w.wg.Wait()
}

// Down says the controller of node was powered off: the time until it
// answers again is not counted as a gap of the polling.
func (w *Watcher) Down(node string) {
	w.mu.Lock()
	w.down[node] = time.Now()
	w.mu.Unlock()
}

// AnsweredSince says whether node answered a poll asked at or after t.
func (w *Watcher) AnsweredSince(node string, t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.answered[node].Before(t)
}

// Resolution is the longest time between two answered polls of one
// controller (but for the time one was powered off: Down).
func (w *Watcher) Resolution() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gap
}

// Follow is how a client followed a LUN from node from to node to after
// an action at t0.
type Follow struct {
	// FirstNew and LastNew: the first and last completions seen at the new
	// owner after t0; LastOld: the last at the old owner.
	FirstNew, LastNew, LastOld time.Time
	// OldKnown: the old owner's I/O is known up to then (its latest
	// answered poll's ask); OldDown: it is powered off.
	OldKnown time.Time
	OldDown  bool
	// Switched: from then on all of the client's I/O completed at the new
	// owner; zero if not (yet).
	Switched time.Time
	// Already: in the quiet window before t0 the client's I/O completed
	// at the new owner and not at the old one: it had nothing to follow.
	Already bool
}

// Follow computes the follow of initiator's I/O to lun from node from to
// node to after t0, as seen at now. The host has switched once, after
// its last completion at the old owner, its I/O has completed at the new
// owner for quiet or longer while the old owner is known to have done
// none. What the old owner did is known up to its latest answered poll
// (asked), not up to now: a slow answer still to come may hold a
// completion there; a powered-off old owner (Down, not answered since)
// completes nothing. A quiet old owner alone is no switch: I/O stalls
// while a LUN moves, and a host may send a few commands down the new
// owner's paths before (a path coming back), so a short burst there is
// not one either.
func (w *Watcher) Follow(initiator string, lun uint64, from, to string, t0, now time.Time, quiet time.Duration) Follow {
	w.mu.Lock()
	defer w.mu.Unlock()
	var f Follow
	f.OldKnown = now
	if _, off := w.down[from]; off {
		f.OldDown = true
	} else if w.answered[from].Before(now) {
		f.OldKnown = w.answered[from]
	}
	news := w.rises[ioKey{initiator, to, lun}]
	after := func(ts []time.Time, t time.Time) int {
		return sort.Search(len(ts), func(i int) bool { return ts[i].After(t) })
	}
	if i := sort.Search(len(news), func(i int) bool { return !news[i].Before(t0) }); i < len(news) {
		f.FirstNew, f.LastNew = news[i], news[len(news)-1]
	}
	olds := w.rises[ioKey{initiator, from, lun}]
	if n := len(olds); n > 0 && olds[n-1].After(t0) {
		f.LastOld = olds[n-1]
	}
	within := func(ts []time.Time, from, to time.Time) bool {
		i := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(from) })
		return i < len(ts) && ts[i].Before(to)
	}
	f.Already = within(news, t0.Add(-quiet), t0) && !within(olds, t0.Add(-quiet), t0)
	if f.FirstNew.IsZero() {
		return f
	}
	// The new owner's completions after the old owner's last, up to what
	// is known of the old owner: they must span quiet.
	since := maxTime(t0, f.LastOld)
	i := after(news, since)
	j := after(news, f.OldKnown)
	if i >= j || news[j-1].Sub(news[i]) < quiet {
		return f
	}
	f.Switched = maxTime(f.FirstNew, f.LastOld)
	return f
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Evidence says what the watcher saw of a follow that did not happen,
// from t0: the first and last completions at the new owner, the last at
// the old one, how far the old owner's polls reached (or that it was
// powered off), and when the step ended.
func (f Follow) Evidence(from, to string, t0, end time.Time) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return fmt.Sprintf("+%.1fs", t.Sub(t0).Seconds())
	}
	old := "polled up to " + at(f.OldKnown)
	if f.OldDown {
		old = "powered off"
	}
	return fmt.Sprintf("at %s first %s, last %s; at %s last %s, %s; step ended %s", to, at(f.FirstNew), at(f.LastNew), from, at(f.LastOld), old, at(end))
}
