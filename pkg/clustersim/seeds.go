package clustersim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/controller"
	"github.com/aluad/aluad/pkg/fence"
	"github.com/aluad/aluad/pkg/initiator"
	hostlab "github.com/aluad/aluad/pkg/lab"
)

// Cluster seeds: the real controllers of one cluster (two, in a synctest
// bubble on kv.Mem and memnet) under a random script of the faults that
// once broke cluster mode, one controller failing at a time (the other
// steady for settle first), interlink cuts at any time, with verified
// hosts writing throughout. A seed
// is a script; the same seed gives the same script (the goroutines'
// interleaving is the runtime's, so a run is not byte-identical as
// pkg/sim's are). Invariants, checked every 20 ms of bubble time and at
// the end:
//
//   - never two controllers serving one LUN as owner;
//   - a LUN is served again within the lease TTL plus unservedBound
//     whenever a healthy controller (running, not paused, reaching the
//     store) has been there all along;
//   - every read during the run returns the block's last acknowledged
//     write (the hosts' streams are QD 1);
//   - every acknowledged write reads back (its data, or a later write's
//     that was sent and never acknowledged), after the faults heal.
//
// A pause is what an in-process controller can show of SIGSTOP: its
// store calls hang (its link to kv.Mem blocks), its interlink is cut, and
// every media write it has on its way waits until it resumes (the destage
// that passed its fence check before the process stopped). Its own
// timers still run, so it stops serving at its lease deadline, as a
// paused process cannot; the held writes are the danger the fence must
// stop. (The hold is on a channel: a timed one, with a lock held over it,
// would stop the bubble's time for any goroutine waiting on that lock.)
// unservedBound: after the lease TTL, how long a LUN may go unserved
// while a healthy controller is there (the leader's round every TTL/4,
// the fence, the record's write and install).
const unservedBound = 3 * time.Second

// Plant is a defect planted in a seed's cluster (to test the checker).
type Plant int

const (
	PlantNone Plant = iota
	// PlantNoFence: the fencer claims to fence and does nothing, so a
	// paused owner's held writes land after the takeover.
	PlantNoFence
	// PlantNoProbes: each controller's etcd client sends its calls round
	// robin to every member, frozen or not (etcd's client as it was): a
	// frozen member blocks a third of them until their deadlines.
	PlantNoProbes
)

// Plants names the planted defects (`aluad sim --cluster --plant`).
var Plants = map[string]Plant{"none": PlantNone, "no-fence": PlantNoFence, "no-probes": PlantNoProbes}

func (p Plant) String() string {
	for n, q := range Plants {
		if q == p {
			return n
		}
	}
	return fmt.Sprintf("plant(%d)", int(p))
}

// noFence claims every fence done and kills nothing.
type noFence struct{}

func (noFence) Method() string { return "none (planted)" }
func (noFence) Fence(context.Context, string, fence.Identity) error {
	return nil
}

// seedWorld is one seed's cluster, hosts and faults.
type seedWorld struct {
	t     *testing.T
	bb    *Bubble
	rng   *rand.Rand
	plant Plant
	nodes []string

	mu       sync.Mutex
	ctl      map[string]*controller.Controller // nil: not running
	paused   map[string]bool
	cutOff   map[string]bool      // its store link fails
	frozen   int                  // the etcd member frozen (-1: none)
	starting map[string]bool      // its controller is being (re)started
	healthy  map[string]time.Time // since when (zero: not healthy)
	sess     map[string]*initiator.Session
	sessOf   map[string]*controller.Controller
	script   []string
	viol     []string
	// supervising: one step or supervise at a time, so that a fault never
	// meets a node whose controller is being restarted (a channel: a goroutine waiting
	// on a lock would stop the bubble's time while the other kills).
	supervising chan struct{}
	dialing     chan struct{} // one hosts' dial at a time
}

func (w *seedWorld) logf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.script = append(w.script, fmt.Sprintf("%6.2fs ", time.Since(w.bb.T0).Seconds())+fmt.Sprintf(format, args...))
}

func (w *seedWorld) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.viol) < 8 {
		w.viol = append(w.viol, fmt.Sprintf("%6.2fs ", time.Since(w.bb.T0).Seconds())+fmt.Sprintf(format, args...))
	}
}

// Result is one seed's run.
type Result struct {
	Seed uint64
	// Violations: the invariants broken, with their bubble times (none:
	// every one held).
	Violations []string
	// Script: the faults as they came, with their bubble times.
	Script []string
	// Took: the seed's bubble time.
	Took time.Duration
}

// Failed says whether an invariant broke.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// String is the violations and the script.
func (r Result) String() string {
	return fmt.Sprintf("seed %d: %s\nscript:\n  %s", r.Seed, strings.Join(r.Violations, "\n"), strings.Join(r.Script, "\n  "))
}

// RunSeed runs one seed; call it inside synctest.Test.
func RunSeed(t *testing.T, seed uint64, steps int, p Plant) Result {
	bb := NewBubble(t)
	bb.NoProbes = p == PlantNoProbes
	if p == PlantNoFence {
		bb.Fencer = noFence{}
	}
	w := &seedWorld{t: t, bb: bb, rng: rand.New(rand.NewPCG(seed, 0x5eed)), plant: p, nodes: []string{"a", "b"},
		ctl: map[string]*controller.Controller{}, paused: map[string]bool{}, cutOff: map[string]bool{}, healthy: map[string]time.Time{},
		sess: map[string]*initiator.Session{}, sessOf: map[string]*controller.Controller{}, frozen: -1, starting: map[string]bool{}, supervising: make(chan struct{}, 1), dialing: make(chan struct{}, 1)}
	for _, n := range w.nodes {
		w.start(n)
	}
	w.allServed(10*time.Second, "every LUN served at the start")

	ctx, stopHosts := context.WithCancel(context.Background())
	var hosts sync.WaitGroup
	var streams []*hostlab.VerifiedStream
	other := map[string]string{"a": "b", "b": "a"}
	for i, l := range bb.Cfg.LUNs {
		st := hostlab.NewVerifiedStream(l.ID, l.Preferred, 0)
		streams = append(streams, st)
		hosts.Add(1)
		go func() {
			defer hosts.Done()
			st.Run(ctx, w.session, other, 50, seed<<8+uint64(i))
		}()
	}
	checkDone := make(chan struct{})
	checked := make(chan struct{})
	go w.check(checkDone, checked)

	for i := 0; i < steps && len(w.violations()) == 0; i++ {
		w.step()
		time.Sleep(time.Duration(200+w.rng.IntN(2800)) * time.Millisecond)
	}
	w.healAll()
	time.Sleep(bb.Cfg.Cluster.LeaseTTL + unservedBound)
	stopHosts()
	hosts.Wait()
	close(checkDone)
	<-checked
	for _, st := range streams {
		if n, first := st.Stale(); n > 0 {
			w.violate("%d reads during the run returned older data; the first: %s", n, first[0])
		}
	}
	w.settle(streams)
	// Once more from the media: both stopped cleanly (their caches
	// flushed) and started again, so a read finds what a late write left
	// there, not a newer page still cached.
	w.closeSessions()
	for _, n := range w.nodes {
		if c := w.get(n); c != nil {
			c.Stop(time.Second)
		}
	}
	for _, n := range w.nodes {
		w.start(n)
	}
	w.allServed(20*time.Second, "every LUN served after the restart")
	w.settle(streams)
	for _, n := range w.nodes {
		if c := w.get(n); c != nil {
			c.Stop(time.Second)
		}
	}
	w.closeSessions()
	w.mu.Lock()
	defer w.mu.Unlock()
	return Result{Seed: seed, Violations: w.viol, Script: w.script, Took: time.Since(bb.T0)}
}

func (w *seedWorld) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.viol...)
}

func (w *seedWorld) get(n string) *controller.Controller {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ctl[n]
}

// start runs node n's controller (a restart after a kill: a new process).
// (No fault reaches a node while it starts: step passes it by.)
func (w *seedWorld) start(n string) {
	w.mu.Lock()
	w.starting[n] = true
	w.mu.Unlock()
	c, err := w.bb.StartErr(n)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.starting[n] = false
	if err != nil {
		w.ctl[n] = nil
		w.viol = append(w.viol, fmt.Sprintf("%6.2fs %s did not start: %v", time.Since(w.bb.T0).Seconds(), n, err))
		return
	}
	w.ctl[n] = c
	if w.healthy[n].IsZero() {
		// (A node healthy all along whose controller exited and was
		// restarted stays healthy since then: its LUNs' time unserved
		// counts across the restart.)
		w.healthy[n] = time.Now()
	}
}

// isStarting says whether n's controller is being (re)started.
func (w *seedWorld) isStarting(n string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starting[n]
}

// allServed waits until one controller serves each LUN.
func (w *seedWorld) allServed(limit time.Duration, what string) {
	deadline := time.Now().Add(limit)
	for {
		all := true
		for _, l := range w.bb.Cfg.LUNs {
			owners, _ := w.servers(l.ID)
			all = all && owners == 1
		}
		switch {
		case all:
			return
		case time.Now().After(deadline):
			w.violate("not within %v: %s", limit, what)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// servers counts the running controllers that serve lun as owner, and
// those of them not paused (a paused one's fence may still say it
// serves until its lease deadline; its hosts get nothing from it).
func (w *seedWorld) servers(lun uint64) (owners, serving int) {
	for _, n := range w.nodes {
		if c := w.get(n); c != nil && !c.Gone() && c.Serves(lun) {
			owners++
			if paused, _ := w.state(n); !paused {
				serving++
			}
		}
	}
	return owners, serving
}

// session is the hosts' session to node n (redialed after a failure or a
// restart; nil while n does not run).
// (One dial at a time, on a channel: a goroutine waiting on a mutex
// held over a dial's timed wait would stop the bubble's time.)
func (w *seedWorld) session(n string) *initiator.Session {
	w.dialing <- struct{}{}
	defer func() { <-w.dialing }()
	c := w.get(n)
	if c == nil {
		return nil
	}
	w.mu.Lock()
	s, of := w.sess[n], w.sessOf[n]
	w.mu.Unlock()
	if s != nil && of == c {
		select {
		case <-s.Done():
		default:
			return s
		}
	}
	if s != nil {
		s.Close()
		w.mu.Lock()
		delete(w.sess, n)
		w.mu.Unlock()
	}
	s, err := w.bb.Dial(c, n, "seeds")
	if err != nil {
		return nil
	}
	w.mu.Lock()
	w.sess[n], w.sessOf[n] = s, c
	w.mu.Unlock()
	return s
}

func (w *seedWorld) closeSessions() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for n, s := range w.sess {
		s.Close()
		delete(w.sess, n)
	}
}

// step injects one fault or heals one, as the seed draws.
func (w *seedWorld) step() {
	w.supervising <- struct{}{}
	defer func() { <-w.supervising }()
	// An etcd member (one of three: the quorum stays) freezes at any
	// time, whatever the controllers do, and thaws at a later step; a
	// controller counts as healthy through it (the promise: a frozen
	// member never blocks the survivor).
	if w.rng.IntN(6) == 0 {
		if w.frozen < 0 {
			w.frozen = w.rng.IntN(w.bb.Members)
			w.logf("freeze etcd member %d", w.frozen)
			w.bb.Freeze(w.frozen, true)
		} else {
			w.logf("thaw etcd member %d", w.frozen)
			w.bb.Freeze(w.frozen, false)
			w.frozen = -1
		}
		return
	}
	n := w.nodes[w.rng.IntN(len(w.nodes))]
	peer := "a"
	if n == "a" {
		peer = "b"
	}
	if w.isStarting(n) {
		return
	}
	c := w.get(n)
	paused, cutOff := w.state(n)
	// One controller fails at a time (the promise is about one): a fault
	// that can cost a controller its memory (a pause or a partition past
	// the lease, a kill) starts only while the other has been steady for
	// settle (running, reaching the store, not paused: what it held of
	// the first failure destaged or mirrored again).
	fault := w.steady(peer) && !paused && !cutOff
	switch k := w.rng.IntN(10); {
	case c == nil:
		w.logf("restart %s", n)
		w.start(n)
	case k < 3 && fault:
		w.logf("pause %s", n)
		w.mu.Lock()
		w.paused[n], w.healthy[n] = true, time.Time{}
		w.mu.Unlock()
		w.bb.Link(n).Cut(true)
		c.PauseMedia(true)
		c.CutInterlink(peer, true)
	case k < 5 && paused:
		w.logf("resume %s", n)
		w.resumeHeld(n)
	case k < 6 && fault:
		w.logf("kill %s", n)
		w.mu.Lock()
		w.paused[n], w.cutOff[n] = false, false
		w.mu.Unlock()
		w.bb.Link(n).Heal()
		kill(c)
		w.mu.Lock()
		w.ctl[n], w.healthy[n] = nil, time.Time{}
		w.mu.Unlock()
	case k < 7 && fault:
		w.logf("cut %s from the store", n)
		w.mu.Lock()
		w.cutOff[n], w.healthy[n] = true, time.Time{}
		w.mu.Unlock()
		w.bb.Link(n).Cut(false)
	case k < 8 && cutOff:
		w.logf("%s reaches the store again", n)
		w.bb.Link(n).Heal()
		w.mu.Lock()
		w.cutOff[n] = false
		w.mu.Unlock()
		w.superviseHeld(n)
	case k < 9 && !paused:
		w.logf("cut the interlink %s-%s", n, peer)
		c.CutInterlink(peer, true)
	default:
		if !paused {
			w.logf("restore the interlink %s-%s", n, peer)
			c.CutInterlink(peer, false)
		}
	}
	for _, x := range w.nodes {
		w.superviseHeld(x)
	}
}

// settle: how long a controller must have been healthy before the other
// may fail.
const settle = 3 * time.Second

// steady says whether n has been healthy for settle.
func (w *seedWorld) steady(n string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.healthy[n]
	return w.ctl[n] != nil && !s.IsZero() && time.Since(s) >= settle
}

// state is whether n is paused, and cut off from the store.
func (w *seedWorld) state(n string) (paused, cutOff bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.paused[n], w.cutOff[n]
}

// kill kills c as SIGKILL does and waits until nothing of it runs (on a
// channel: a wait on the Once of a kill the fence started in the
// background would stop the bubble's time).
func kill(c *controller.Controller) {
	c.MarkGone()
	go c.Kill()
	<-c.Exited()
}

// resumeHeld ends n's pause: the store answers it again, its media writes
// and its interlink go on.
func (w *seedWorld) resumeHeld(n string) {
	w.mu.Lock()
	w.paused[n] = false
	w.mu.Unlock()
	w.bb.Link(n).Heal()
	if c := w.get(n); c != nil {
		c.PauseMedia(false)
		for _, p := range w.nodes {
			if p != n {
				c.CutInterlink(p, false)
			}
		}
	}
	w.superviseHeld(n)
}

// supervise restarts a controller that has exited (its lease lost, or
// fenced by the other), as systemd would; one still running and reaching
// the store counts as healthy from now.
func (w *seedWorld) supervise(n string) {
	w.supervising <- struct{}{}
	defer func() { <-w.supervising }()
	w.superviseHeld(n)
}

// superviseHeld is supervise for a caller that holds supervising.
func (w *seedWorld) superviseHeld(n string) {
	c := w.get(n)
	if c == nil {
		return
	}
	exited := c.Gone()
	select {
	case <-c.Err():
		exited = true
	default:
	}
	w.mu.Lock()
	paused, cut := w.paused[n], w.cutOff[n]
	w.mu.Unlock()
	if exited && !paused {
		w.logf("%s exited: restarted", n)
		kill(c)
		w.bb.Link(n).Heal()
		w.mu.Lock()
		w.cutOff[n] = false
		w.mu.Unlock()
		w.start(n)
		return
	}
	w.mu.Lock()
	if !paused && !cut && w.healthy[n].IsZero() {
		w.healthy[n] = time.Now()
	}
	w.mu.Unlock()
}

// healAll ends every fault and restarts what does not run.
func (w *seedWorld) healAll() {
	w.supervising <- struct{}{}
	defer func() { <-w.supervising }()
	w.logf("heal everything")
	if w.frozen >= 0 {
		w.bb.Freeze(w.frozen, false)
		w.frozen = -1
	}
	for _, n := range w.nodes {
		paused, cutOff := w.state(n)
		if paused {
			w.resumeHeld(n)
		}
		if cutOff {
			w.bb.Link(n).Heal()
			w.mu.Lock()
			w.cutOff[n] = false
			w.mu.Unlock()
		}
		if c := w.get(n); c != nil {
			for _, p := range w.nodes {
				if p != n {
					c.CutInterlink(p, false)
				}
			}
		}
	}
	for _, n := range w.nodes {
		if w.get(n) == nil {
			w.start(n)
		}
		w.superviseHeld(n)
	}
}

// check watches the invariants of serving until done.
func (w *seedWorld) check(done, checked chan struct{}) {
	defer close(checked)
	// The supervisor runs beside the checks, so a restart under way (or
	// a step) never holds them up.
	supervised := make(chan struct{})
	go func() {
		defer close(supervised)
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, n := range w.nodes {
				w.supervise(n)
			}
		}
	}()
	defer func() { <-supervised }()
	ttl := w.bb.Cfg.Cluster.LeaseTTL
	lastServed := map[uint64]time.Time{}
	for _, l := range w.bb.Cfg.LUNs {
		lastServed[l.ID] = time.Now()
	}
	for {
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
		}
		now := time.Now()
		var healthySince time.Time
		w.mu.Lock()
		for _, n := range w.nodes {
			if s := w.healthy[n]; !s.IsZero() && (healthySince.IsZero() || s.Before(healthySince)) {
				healthySince = s
			}
		}
		w.mu.Unlock()
		for _, l := range w.bb.Cfg.LUNs {
			switch k, serving := w.servers(l.ID); {
			case k > 1:
				w.violate("LUN %d served by %d controllers as owner", l.ID, k)
			case serving == 1:
				lastServed[l.ID] = now
			case !healthySince.IsZero():
				from := lastServed[l.ID]
				if healthySince.After(from) {
					from = healthySince
				}
				if now.Sub(from) > ttl+unservedBound {
					w.violate("LUN %d unserved for %v while a healthy controller was there", l.ID, now.Sub(from).Round(time.Millisecond))
					lastServed[l.ID] = now
				}
			}
		}
	}
}

// settle reads every stream's acknowledged writes back through a running
// controller.
func (w *seedWorld) settle(streams []*hostlab.VerifiedStream) {
	for _, st := range streams {
		var s *initiator.Session
		for _, n := range w.nodes {
			if s = w.session(n); s != nil {
				break
			}
		}
		if s == nil {
			w.violate("no controller to read back through")
			return
		}
		checked, lost, err := st.Verify(context.Background(), s)
		switch {
		case err != nil && !errors.Is(err, context.Canceled):
			w.violate("read-back: %v", err)
		case len(lost) > 0:
			w.violate("%d of %d acknowledged blocks read back older data (LBAs %v)", len(lost), checked, lost)
		}
	}
}
