package daemon

import (
	"errors"
	"math"
	"sync"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/fabric"
)

// brain runs the ownership core in the running array (CONVENTIONS 1): one
// goroutine owns the core and feeds it, from an inbox that producers never
// block on, the feed's logins, logouts, RTPGs and I/O intervals, the
// injected node and port faults, changes it did not make, and a tick. Its
// decisions go to a second goroutine that carries them out with
// array.Move, one batch at a time, so a long flush never stalls the core;
// a batch that could not be carried out is reported back as a rollback.
type brain struct {
	d    *Daemon
	core *ownership.Core
	tick time.Duration
	// started: when tick 0 was (the core's ticks as times).
	started time.Time

	mu    sync.Mutex
	inbox []ownership.Event
	wake  chan struct{}
	exec  chan ownership.Batch
	// queries run inside the loop, so readers see the core between steps.
	queries chan func()
	wg      sync.WaitGroup

	// repMu guards reports: the conditions raised now.
	repMu   sync.Mutex
	reports map[reportKey]ownership.ReportChange
}

type reportKey struct {
	cond       ownership.Condition
	host, node string
	lun        uint64
	port       uint16
}

// coreConfig maps the config's ownership section onto the core's tunables.
func coreConfig(cfg array.Config) (ownership.Config, time.Duration) {
	oc := ownership.DefaultConfig()
	o := cfg.Ownership
	tick := o.Tick
	if tick <= 0 {
		tick = time.Second
	}
	oc.TickMicros = float64(tick) / float64(time.Microsecond)
	// Rates given per 1 s tick scale with the tick: shipping needs 10
	// work units a second, an expansion sample 50 commands a second.
	perSecond := tick.Seconds()
	oc.ShipMinWork *= perSecond
	oc.MinExpansionOps *= perSecond
	ticks := func(d time.Duration, def int) int {
		if d <= 0 {
			return def
		}
		return max(1, int(math.Ceil(float64(d)/float64(tick))))
	}
	oc.FailbackWindow = ticks(o.FailbackWindow, oc.FailbackWindow)
	oc.DiscoveryWindow = ticks(o.DiscoveryWindow, oc.DiscoveryWindow)
	oc.Cooldown = ticks(o.Cooldown, oc.Cooldown)
	oc.PlanInterval = ticks(o.PlanInterval, oc.PlanInterval)
	oc.ShipWindow = ticks(o.ShipWindow, oc.ShipWindow)
	oc.Debounce = ticks(o.AlertDelay, oc.Debounce)
	// These default to wall time, whatever the tick: a host follows a
	// move within its path checker's interval, not within so many ticks.
	wall := func(d, def time.Duration) int {
		if d <= 0 {
			d = def
		}
		return ticks(d, 1)
	}
	// Stress must hold for three plan intervals, and a failback waits
	// twice its window after the last move, unless configured.
	oc.StressWindow = ticks(o.StressWindow, 3*oc.PlanInterval)
	oc.FailbackCooldown = ticks(o.FailbackCooldown, 2*oc.FailbackWindow)
	oc.DampWindow = wall(o.DampWindow, 30*time.Minute)
	oc.DampClear = wall(o.DampClear, time.Hour)
	oc.FollowWindow = wall(o.FollowWindow, 30*time.Second)
	if o.StressFloor > 0 {
		oc.StressFloor = o.StressFloor
	}
	if o.DampCount > 0 {
		oc.DampCount = o.DampCount
	}
	if o.PathDegradedFactor > 0 {
		oc.PathDegradedFactor = o.PathDegradedFactor
	}
	oc.Passive = cfg.ALUA == "explicit"
	return oc, tick
}

func newBrain(d *Daemon) (*brain, error) {
	cfg := d.Array.Config()
	oc, tick := coreConfig(cfg)
	core, err := ownership.New(oc)
	if err != nil {
		return nil, err
	}
	capacity := cfg.Ownership.NodeCapacity
	if capacity <= 0 {
		capacity = 1000
	}
	for _, n := range d.Array.Nodes {
		if err := core.Step(ownership.NodeDecl{Node: n.Name, Capacity: capacity}); err != nil {
			return nil, err
		}
	}
	for _, h := range d.Array.Hosts() {
		core.Step(ownership.HostDecl{Host: h.Name, Type: coreHostType(h.Type)})
	}
	for _, l := range d.Array.LUNs {
		if err := core.Step(ownership.LUNDecl{LUN: l.ID, Preferred: l.Preferred.Name, Owner: l.Owner().Name,
			Media: l.Media, Group: l.Group}); err != nil {
			return nil, err
		}
	}
	core.Advance()
	return &brain{d: d, core: core, tick: tick, started: d.now(), wake: make(chan struct{}, 1), exec: make(chan ownership.Batch, 1024),
		queries: make(chan func()),
		reports: map[reportKey]ownership.ReportChange{}}, nil
}

// coreHostType is what the core needs of a host type.
func coreHostType(t array.HostType) ownership.HostType {
	return ownership.HostType{Name: t.Name, TPGS: t.TPGS, Standby: t.NonOwner == array.Standby}
}

// post queues events for the core.
func (b *brain) post(evs ...ownership.Event) {
	b.mu.Lock()
	b.inbox = append(b.inbox, evs...)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *brain) start() {
	b.wg.Add(2)
	go b.loop()
	go b.executor()
}

func (b *brain) loop() {
	defer b.wg.Done()
	defer close(b.exec)
	t := time.NewTicker(b.tick)
	defer t.Stop()
	for {
		var q func()
		select {
		case <-b.d.done:
			return
		case <-b.wake:
		case q = <-b.queries:
		case <-t.C:
			b.d.EmitIOStats() // this tick's I/O, then the tick
			b.post(ownership.Tick{})
		}
		b.drain()
		if q != nil {
			// After the drain: a query sees every event posted before
			// it was asked (a login whose response the host already has).
			q()
		}
	}
}

// drain steps the core through the queued events and applies its output.
func (b *brain) drain() {
	b.mu.Lock()
	evs := b.inbox
	b.inbox = nil
	b.mu.Unlock()
	for _, e := range evs {
		if err := b.core.Step(e); err != nil {
			b.d.log.Debug("ownership core refused an event", "event", e, "err", err)
		}
	}
	b.apply(b.core.Ready())
	b.core.Advance()
}

// errStopped: the daemon is stopping.
var errStopped = errors.New("aluad is stopping")

// do runs f on the core inside the loop, between two steps, and waits.
func (b *brain) do(f func(c *ownership.Core)) error {
	done := make(chan struct{})
	q := func() {
		defer close(done)
		f(b.core)
	}
	select {
	case b.queries <- q:
	case <-b.d.done:
		return errStopped
	}
	select {
	case <-done:
		return nil
	case <-b.d.done:
		return errStopped
	}
}

// rebalance is "rebalance now": the core plans at once and its batches
// go to the executor like any other.
func (b *brain) rebalance() (*ownership.RebalanceResult, []ownership.Batch, error) {
	var res *ownership.RebalanceResult
	var batches []ownership.Batch
	err := b.do(func(c *ownership.Core) {
		if err := c.Step(ownership.Rebalance{}); err != nil {
			res = &ownership.RebalanceResult{Reason: err.Error()}
			return
		}
		r := c.Ready()
		res, batches = r.Rebalance, r.Batches
		b.apply(r)
		c.Advance()
	})
	return res, batches, err
}

// apply hands batches to the executor and publishes report changes.
func (b *brain) apply(r ownership.Ready) {
	for _, batch := range r.Batches {
		b.exec <- batch
	}
	for _, rc := range r.Reports {
		k := reportKey{rc.Condition, rc.Host, rc.Node, rc.LUN, rc.Port}
		b.repMu.Lock()
		if rc.Raised {
			b.reports[k] = rc
		} else {
			delete(b.reports, k)
		}
		b.repMu.Unlock()
		ri := api.ReportInfo{Condition: string(rc.Condition), Raised: rc.Raised,
			Host: rc.Host, Node: rc.Node, LUN: rc.LUN, Port: rc.Port, Cause: rc.Cause}
		b.d.Events.Add(api.Event{Kind: api.EventReport, Report: &ri})
		b.d.recordReport(ri)
		if rc.Raised {
			b.d.metrics.reportRaised(string(rc.Condition))
		}
		b.d.log.Info("report", "change", rc.String())
	}
}

// executor carries out batches. A batch may hold LUNs of several owners
// (with more than two nodes); each owner's share moves as one array batch.
func (b *brain) executor() {
	defer b.wg.Done()
	for batch := range b.exec {
		// Not while a fault is being injected (Inject).
		b.d.faultMu.RLock()
		b.d.faultMu.RUnlock()
		for _, ids := range b.d.Array.ByOwner(batch.LUNs) {
			_, err := b.d.Array.Move(ids, batch.To, array.Cause(batch.Cause))
			// Tell the core where they are now: a rollback if the move
			// failed; otherwise a confirmation, which corrects the core's
			// view if it moved on while this ran (an operator's move).
			cause := batch.Cause
			if err != nil && !errors.Is(err, array.ErrNoChange) {
				b.d.log.Warn("ownership move failed", "luns", ids, "to", batch.To, "cause", batch.Cause, "err", err)
				cause = ownership.CauseRollback
			}
			evs := make([]ownership.Event, 0, len(ids))
			for _, id := range ids {
				evs = append(evs, ownership.OwnerChanged{LUN: id, Owner: b.d.Array.LUN(id).Owner().Name, Cause: cause})
			}
			b.post(evs...)
		}
	}
}

// feed turns a feed event into core events.
func (b *brain) feed(e api.Event) {
	nx := func() ownership.Nexus {
		return ownership.Nexus{Host: e.Host, Initiator: e.Initiator, ISID: e.ISID, Port: e.TargetPort, Node: e.Node}
	}
	switch e.Kind {
	case api.EventLogin:
		b.post(ownership.Login{Nexus: nx()})
	case api.EventLogout:
		b.post(ownership.Logout{Nexus: nx(), Orderly: e.Reason == fabric.ReasonLogout})
	case api.EventRTPG:
		if e.LUN != nil {
			b.post(ownership.RTPG{Nexus: nx(), LUN: *e.LUN, Extended: e.Extended})
		}
	case api.EventIO:
		if e.IO == nil || e.LUN == nil {
			return
		}
		ops := e.IO.Reads + e.IO.Writes + e.IO.Other
		var rt float64
		if ops > 0 {
			rt = float64(e.IO.Busy) / float64(ops) / float64(time.Microsecond)
		}
		b.post(ownership.IO{Host: e.Host, Node: e.Node, LUN: *e.LUN, Ops: float64(ops),
			Media: float64(min(ops, e.IO.Reads+e.IO.Writes+e.IO.Syncs)),
			Bytes: float64(e.IO.BytesRead + e.IO.BytesWritten), RespTime: rt,
			Ticks: max(1, int(math.Round(float64(e.IO.Interval)/float64(b.tick))))})
	case api.EventPath:
		if e.Path == nil || e.Path.Exchanges == 0 {
			return
		}
		ops := float64(e.Path.Exchanges)
		b.post(ownership.PathLatency{Nexus: nx(), Ops: ops,
			Exchange: float64(e.Path.Exchange) / ops / float64(time.Microsecond)})
	case api.EventALUA:
		c := e.Change
		if c == nil || c.Failed {
			return
		}
		switch array.Cause(c.Cause) {
		case array.CauseManual, array.CauseSTPG: // moves the core did not make
			var evs []ownership.Event
			for _, id := range c.LUNs {
				evs = append(evs, ownership.OwnerChanged{LUN: id, Owner: c.To, Cause: ownership.Cause(c.Cause)})
			}
			b.post(evs...)
		}
	}
}

// Reports returns the conditions raised now.
func (b *brain) Reports() []ownership.ReportChange {
	b.repMu.Lock()
	defer b.repMu.Unlock()
	out := make([]ownership.ReportChange, 0, len(b.reports))
	for _, r := range b.reports {
		out = append(out, r)
	}
	return out
}

// SetNodeCapacity re-declares a node's capacity (work units per tick) to
// the running ownership core, e.g. after the lab has measured its load.
func (d *Daemon) SetNodeCapacity(node string, capacity float64) error {
	b := d.brain.Load()
	if b == nil {
		return errors.New("the ownership core is not running")
	}
	if d.Array.Node(node) == nil || capacity <= 0 {
		return errors.New("need a known node and a positive capacity")
	}
	b.post(ownership.NodeDecl{Node: node, Capacity: capacity})
	if st := d.state; st != nil {
		st.mu.Lock()
		if st.capacity == nil {
			st.capacity = map[string]float64{}
		}
		st.capacity[node] = capacity
		st.mu.Unlock()
		d.stateDirty()
	}
	return nil
}
