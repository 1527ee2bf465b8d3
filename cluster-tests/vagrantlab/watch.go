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
	// answered: each node's latest answered poll. What a node did after
	// it is not known yet: a slow answer's rise lands later.
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
		w.Add(now, c.Node, ios)
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

// Add takes one poll of a controller's per-path I/O at time t: a count
// above the previous one is a rise. A count below it is a new baseline,
// not I/O: a session that ended took its counters with it, or the
// controller restarted (its new process's first I/O is then seen one
// poll later, at the next rise).
func (w *Watcher) Add(t time.Time, node string, ios []api.PathIO) {
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
	if t.After(w.answered[node]) {
		w.answered[node] = t
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
	FirstNew, LastOld time.Time
	// Switched: from then on all of the client's I/O completed at the new
	// owner; zero if not (yet): no completion there, or one at the old
	// owner in the quiet window before now.
	Switched time.Time
	// Already: in the quiet window before t0 the client's I/O completed
	// at the new owner and not at the old one: it had nothing to follow.
	Already bool
}

// Follow computes the follow of initiator's I/O to lun from node from to
// node to after t0, as seen at now: the host has switched once its I/O
// completes at the new owner after its last completion at the old one,
// and none at the old owner within quiet before now. What the old owner
// did is known up to its latest answered poll, not up to now: a slow
// answer still to come may hold a completion there. A powered-off old
// owner (Down, not answered since) completes nothing.
func (w *Watcher) Follow(initiator string, lun uint64, from, to string, t0, now time.Time, quiet time.Duration) Follow {
	w.mu.Lock()
	defer w.mu.Unlock()
	known := now
	if _, off := w.down[from]; !off && w.answered[from].Before(now) {
		known = w.answered[from]
	}
	var f Follow
	news := w.rises[ioKey{initiator, to, lun}]
	if i := sort.Search(len(news), func(i int) bool { return !news[i].Before(t0) }); i < len(news) {
		f.FirstNew = news[i]
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
	if f.FirstNew.IsZero() || f.LastOld.After(known.Add(-quiet)) {
		return f
	}
	// A quiet old owner is no switch by itself: I/O stalls while a LUN
	// moves, and a host may have sent a few commands down the new owner's
	// paths before (a path coming back). It ran at the new owner after
	// its last completion at the old one, or it has not switched.
	if !f.LastOld.IsZero() && !news[len(news)-1].After(f.LastOld) {
		return f
	}
	f.Switched = f.FirstNew
	if f.LastOld.After(f.Switched) {
		f.Switched = f.LastOld
	}
	return f
}

// Evidence says what the watcher saw of a follow that did not happen:
// the first completion at the new owner and the last at the old one,
// from t0, and when the step ended.
func (f Follow) Evidence(from, to string, t0, end time.Time) string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return fmt.Sprintf("+%.1fs", t.Sub(t0).Seconds())
	}
	return fmt.Sprintf("first at %s %s, last at %s %s, step ended %s", to, at(f.FirstNew), from, at(f.LastOld), at(end))
}
