// Package control owns the array's control path in a running aluad: what
// the front end and the device server observe of the hosts (logins,
// logouts and why, RTPGs, unit attentions, per-interval I/O and exchange
// times), and the goroutines around the one control-path driver
// (pkg/drive: the ownership core that decides from it, CONVENTIONS 1, its
// batches carried out on the array, the unit attentions that announce
// every ownership change). The core gets typed inputs straight
// from the observers; what happens is published to the event feed
// (Options.Publish), which this package never reads back.
package control

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/drive"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// Options wire a Path into a running array.
type Options struct {
	Array *array.Array
	SCSI  *scsi.Server
	Log   *slog.Logger
	// Clock paces the core's ticks (nil: the real one).
	Clock clock.Clock
	// Publish receives every event for the feed; it must not block.
	Publish func(api.Event)
	// OnChange receives every ownership change of the array, after its
	// unit attention is queued (the daemon saves state and counts it).
	OnChange func(array.Change)
	// OnUA is told each unit attention reported to a host ("2A/06").
	OnUA func(reason string)
	// OnReport is told each report condition the core raises or clears.
	OnReport func(api.ReportInfo)
	// FrontEnd is the running front end's counters (nil before it
	// starts), and Metrics takes the folded intervals (FoldStats).
	FrontEnd func() Stats
	Metrics  Metrics
	// Observed, when set, takes every observation of the hosts (logins,
	// logouts, RTPGs, I/O and exchange intervals) in place of the local
	// core: a controller of a cluster sends them to the elected leader,
	// whose core is fed them with Post. Folding the intervals is then the
	// caller's (FoldStats), and Tick (the core's) converts I/O intervals
	// to ticks.
	Observed func(ownership.Event)
	Tick     time.Duration
	// NoCore, when set, says why the core does not run here (a
	// controller that does not lead), in place of ErrNoCore.
	NoCore func() error
}

// Mover carries a batch out elsewhere than in the local array (a
// cluster's leader, through the ownership records): it returns where
// each LUN is after it and why (the batch's cause if it moved as asked,
// CauseRollback if it stayed, another cause if something else moved it
// meanwhile), and an error if the move did not happen. at is when the
// core decided the batch (it may have waited behind others: a batch the
// world has overtaken since is the mover's to refuse).
type Mover func(b ownership.Batch, at time.Time) ([]ownership.OwnerChanged, error)

// decided is a batch and when the core decided it.
type decided struct {
	ownership.Batch
	At time.Time
}

// Path is the control path. It observes from the start (New); the core
// runs once Start is called (the config may leave it off).
type Path struct {
	o    Options
	arr  *array.Array
	da   *drive.Array
	core atomic.Pointer[runner]
	// faultMu: Inject holds it; the core's executor waits on it before
	// each batch, so no batch starts while a node fails (a failover
	// decided from the node's loss must find it failed in the array, not
	// flush its cache as a planned move would).
	faultMu sync.RWMutex
	// life orders StartWith against Stop and Close; closed: the daemon
	// stopped the path (no core starts again).
	life   sync.Mutex
	closed bool
	// lost: the paths that ended by a fault (lost.go).
	lost lostPaths
	stats
}

// New builds the control path and attaches it to the device server (as
// its observer) and to the array (for its changes).
func New(o Options) *Path {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	p := &Path{o: o, arr: o.Array, da: drive.NewArray(o.Array, o.SCSI), stats: stats{ioPrev: map[IOKey]scsi.NexusIO{},
		pathPrev: map[scsi.Nexus]fabric.PathStat{}, ioLast: o.Clock.Now(), lastIO: map[IOKey]*api.IOInterval{}}}
	o.SCSI.SetObserver(p)
	o.Array.OnChange(p.changed)
	return p
}

// Nexus is the core's name for a nexus: the host it belongs to and the
// node its port is on.
func (p *Path) Nexus(n scsi.Nexus) ownership.Nexus {
	x := ownership.Nexus{Host: p.arr.HostOf(n.InitiatorName).Name, Initiator: n.InitiatorName, Port: n.TargetPort}
	if i := strings.LastIndex(n.InitiatorPort, ",i,0x"); i >= 0 {
		x.ISID = n.InitiatorPort[i+len(",i,0x"):]
	}
	if pt := p.arr.Port(n.TargetPort); pt != nil {
		x.Node = pt.Node.Name
	}
	return x
}

// Event is a feed event of kind about nexus n.
func (p *Path) Event(kind string, n scsi.Nexus) api.Event {
	x := p.Nexus(n)
	return api.Event{Kind: kind, Initiator: x.Initiator, ISID: x.ISID, Host: x.Host, TargetPort: x.Port, Node: x.Node}
}

func (p *Path) publish(e api.Event) {
	if p.o.Publish != nil {
		p.o.Publish(e)
	}
}

// Fabric takes the front end's login and logout of a nexus.
func (p *Path) Fabric(e fabric.Event) {
	ev := p.Event(e.Kind, e.Nexus)
	ev.Reason = e.Reason
	p.publish(ev)
	if e.Kind == api.EventLogin || e.Kind == api.EventLogout {
		p.lost.note(e, p.o.Clock.Now(), e.Kind)
	}
	switch e.Kind {
	case api.EventLogin:
		p.observe(ownership.Login{Nexus: p.Nexus(e.Nexus)})
	case api.EventLogout:
		p.observe(ownership.Logout{Nexus: p.Nexus(e.Nexus), Orderly: e.Reason == fabric.ReasonLogout})
	}
}

// RTPG implements scsi.Observer. An RTPG the front end could not pin to
// an initiator (TCMU, several hosts on one port) is not an observation of
// a host: the front end credits it itself.
func (p *Path) RTPG(n scsi.Nexus, lun uint64, extended bool) {
	if n.InitiatorName == "" {
		return
	}
	e := p.Event(api.EventRTPG, n)
	e.LUN, e.Extended = &lun, extended
	p.publish(e)
	p.observe(ownership.RTPG{Nexus: p.Nexus(n), LUN: lun, Extended: extended})
}

// NexusLost implements scsi.NexusObserver: the STANDBY hand-off's own
// half, at once and before a Logout is answered (drive.LastPathLost),
// whether or not the core runs here.
func (p *Path) NexusLost(n scsi.Nexus) {
	if ho, ok := p.da.LastPathLost(n); ok {
		p.handedOff(ho)
	}
}

// handedOff publishes a STANDBY hand-off that changed the array.
func (p *Path) handedOff(ho ownership.Handoff) {
	what := "STANDBY again"
	if ho.On {
		what = "handed off to ANO"
	}
	p.publish(api.Event{Kind: api.EventHandoff, Host: ho.Host, Node: ho.Node,
		Reason: fmt.Sprintf("non-owner paths for the LUNs of node %s %s", ho.Node, what)})
	p.o.Log.Info("standby hand-off", "host", ho.Host, "node", ho.Node, "on", ho.On)
}

// UnitAttention implements scsi.Observer: the moment a host learns of a
// change, against which its switch to the new owner is measured.
func (p *Path) UnitAttention(n scsi.Nexus, lun uint64, r scsi.Reason) {
	e := p.Event(api.EventUA, n)
	_, asc, ascq := r.Codes()
	e.LUN, e.Reason = &lun, fmt.Sprintf("%02X/%02X", asc, ascq)
	if p.o.OnUA != nil {
		p.o.OnUA(e.Reason)
	}
	p.publish(e)
}

// IO takes one interval of a nexus's I/O to a LUN (a host's; the caller
// keeps the counts of I/O it cannot pin to a host).
func (p *Path) IO(n scsi.Nexus, lun uint64, iv *api.IOInterval) {
	e := p.Event(api.EventIO, n)
	e.LUN, e.IO = &lun, iv
	p.publish(e)
	tick := p.o.Tick
	if p.o.Observed == nil {
		r := p.core.Load()
		if r == nil {
			return
		}
		tick = r.tick
	}
	ops := iv.Reads + iv.Writes + iv.Other
	var rt float64
	if ops > 0 {
		rt = float64(iv.Busy) / float64(ops) / float64(time.Microsecond)
	}
	p.observe(ownership.IO{Host: e.Host, Node: e.Node, LUN: lun, Ops: float64(ops),
		Media: float64(min(ops, iv.Reads+iv.Writes+iv.Syncs)),
		Bytes: float64(iv.BytesRead + iv.BytesWritten), RespTime: rt,
		Ticks: max(1, int(math.Round(float64(iv.Interval)/float64(max(tick, time.Millisecond)))))})
}

// observe takes an observation: to Observed when set, else to the core.
func (p *Path) observe(e ownership.Event) {
	if p.o.Observed != nil {
		p.o.Observed(e)
		return
	}
	p.Post(e)
}

// Exchanges takes one interval of a nexus's exchanges as the front end
// saw them (Path Degraded's input).
func (p *Path) Exchanges(n scsi.Nexus, pi *api.PathInterval) {
	e := p.Event(api.EventPath, n)
	e.Path = pi
	p.publish(e)
	if pi.Exchanges == 0 {
		return
	}
	ops := float64(pi.Exchanges)
	p.observe(ownership.PathLatency{Nexus: p.Nexus(n), Ops: ops,
		Exchange: float64(pi.Exchange) / ops / float64(time.Microsecond)})
}

// changed announces an ownership change: the unit attention first (under
// the array's lock, before the held commands go, so none completes on the
// new owner before its nexus has it), then the daemon's bookkeeping and
// the feed; a move the core did not make (an operator's, a host's STPG)
// is told to the core.
func (p *Path) changed(c array.Change) {
	evs := p.da.Changed(c)
	if p.o.OnChange != nil {
		p.o.OnChange(c)
	}
	p.publish(api.Event{Kind: api.EventALUA, Change: api.NewChangeInfo(c)})
	p.Post(evs...)
}

// ErrNoCore: the config turned the ownership core off.
var ErrNoCore = errors.New("the ownership core is not running (ownership.off): no reports are raised and nothing rebalances")

func (p *Path) noCore() error {
	if p.o.NoCore != nil {
		return p.o.NoCore()
	}
	return ErrNoCore
}

// errStopped: the control path is stopping.
var errStopped = errors.New("aluad is stopping")

// Running reports whether the ownership core runs.
func (p *Path) Running() bool { return p.core.Load() != nil }

// Declare passes the operator's changes of the declared hosts (HostDecl,
// Rehome) to the core, wherever it runs.
func (p *Path) Declare(evs ...ownership.Event) {
	for _, e := range evs {
		p.observe(e)
	}
}

// Post queues events for the core (dropped when it does not run).
func (p *Path) Post(evs ...ownership.Event) {
	if r := p.core.Load(); r != nil {
		r.post(evs...)
	}
}

// Do runs f on the core between two of its steps and waits.
func (p *Path) Do(f func(c *ownership.Core)) error {
	r := p.core.Load()
	if r == nil {
		return p.noCore()
	}
	return r.do(f)
}

// Clock is when the core's tick 0 was and how long a tick is.
func (p *Path) Clock() (started time.Time, tick time.Duration) {
	if r := p.core.Load(); r != nil {
		return r.started, r.tick
	}
	return time.Time{}, 0
}

// Reports returns the conditions the core has raised now.
func (p *Path) Reports() ([]ownership.ReportChange, error) {
	r := p.core.Load()
	if r == nil {
		return nil, p.noCore()
	}
	return r.d.Raised(), nil
}

// ClearReport is the operator clearing a latched report.
func (p *Path) ClearReport(c ownership.ClearReport) error {
	r := p.core.Load()
	if r == nil {
		return p.noCore()
	}
	var err error
	if derr := r.run(func() {
		err = r.d.Step(c)
		r.apply(r.d.Ready())
	}); derr != nil {
		return derr
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "ownership: "))
	}
	return nil
}

// Rebalance is "rebalance now": the core plans at once, and its batches
// go to the executor like any other.
func (p *Path) Rebalance() (*ownership.RebalanceResult, []ownership.Batch, error) {
	r := p.core.Load()
	if r == nil {
		return nil, nil, p.noCore()
	}
	return r.rebalance()
}

// Start runs the ownership core with the ownership section's tunables until Stop.
// decls are stepped before its first tick (the capacities the state kept).
func (p *Path) Start(cfg Config, decls ...ownership.Event) error {
	return p.StartWith(cfg, nil, decls...)
}

// StartWith runs the core as Start does, its batches carried out by mover
// (nil: by the local array). A core stopped with Stop may be started
// again (a controller elected leader once more).
func (p *Path) StartWith(cfg Config, mover Mover, decls ...ownership.Event) error {
	p.life.Lock()
	defer p.life.Unlock()
	if p.closed {
		return errStopped // (before the new core clears the array's hand-offs)
	}
	r, err := newRunner(p, cfg)
	if err != nil {
		return err
	}
	r.mover = mover
	r.post(decls...)
	r.start() // (its WaitGroup counts before Stop can see it)
	p.core.Store(r)
	return nil
}

// Close stops the core for good: a StartWith after it is refused (the
// daemon is stopping; a controller elected meanwhile runs no core).
func (p *Path) Close() {
	p.life.Lock()
	p.closed = true
	p.life.Unlock()
	p.Stop()
}

// Halt tells the core to stop taking work, without waiting for it:
// queries and rebalances are refused from then on (a tick or wake already
// pending may still be stepped once). Stop waits.
func (p *Path) Halt() {
	p.life.Lock()
	defer p.life.Unlock()
	p.closed = true // (the daemon's: no core starts after it)
	if r := p.core.Load(); r != nil {
		r.stopOnce.Do(func() { close(r.stop) })
	}
}

// Stop stops the core and waits for its goroutines (the batch under way
// finishes); the core is gone after it (Running is false).
func (p *Path) Stop() {
	p.life.Lock()
	r := p.core.Load()
	if r != nil {
		r.stopOnce.Do(func() { close(r.stop) })
	}
	p.life.Unlock()
	if r != nil {
		r.wg.Wait()
		p.core.CompareAndSwap(r, nil)
		p.arr.ClearHandoffs() // its hand-offs go with it (a leader that lost the lead)
	}
}

// runner wraps the control-path driver (pkg/drive) in two goroutines:
// one steps it, from an inbox producers never block on (observations,
// faults, changes it did not make, a tick), and applies its Ready; the
// other carries its batches out (on the local array, or with the mover),
// one at a time, so a long flush never stalls the core, and steps what
// became of each.
type runner struct {
	p     *Path
	d     *drive.Driver
	mover Mover
	tick  time.Duration
	// started: when tick 0 was (the core's ticks as times).
	started time.Time

	mu    sync.Mutex
	inbox []ownership.Event
	wake  chan struct{}
	exec  chan decided
	// queries run inside the loop, so readers see the core between steps.
	queries  chan func()
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newRunner(p *Path, cfg Config) (*runner, error) {
	oc, tick := cfg.Core(p.arr.Config().ALUA == "explicit")
	d, err := drive.New(p.da, oc, cfg.NodeCapacity)
	if err != nil {
		return nil, err
	}
	r := &runner{p: p, d: d, tick: tick, started: p.o.Clock.Now(), wake: make(chan struct{}, 1),
		exec: make(chan decided, 1024), queries: make(chan func()), stop: make(chan struct{})}
	// The declarations' hand-offs (a STANDBY host that reaches nothing
	// yet is handed off everywhere) take effect before any command.
	r.apply(d.Ready())
	return r, nil
}

// post queues events for the core.
func (r *runner) post(evs ...ownership.Event) {
	if len(evs) == 0 {
		return
	}
	r.mu.Lock()
	r.inbox = append(r.inbox, evs...)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *runner) start() {
	r.wg.Add(2)
	go r.loop()
	go r.executor()
}

func (r *runner) loop() {
	defer r.wg.Done()
	defer close(r.exec)
	t := r.p.o.Clock.NewTicker(r.tick)
	defer t.Stop()
	for {
		var q func()
		select {
		case <-r.stop:
			return
		case <-r.wake:
		case q = <-r.queries:
		case <-t.C():
			if r.p.o.Observed == nil {
				r.p.FoldStats() // this tick's I/O, then the tick
			}
			r.post(ownership.Tick{})
		}
		r.drain()
		if q != nil {
			// After the drain: a query sees every event posted before
			// it was asked (a login whose response the host already has).
			q()
		}
	}
}

// drain steps the core through the queued events and applies its output.
func (r *runner) drain() {
	r.mu.Lock()
	evs := r.inbox
	r.inbox = nil
	r.mu.Unlock()
	if err := r.d.Step(evs...); err != nil {
		r.p.o.Log.Debug("ownership core refused an event", "err", err)
	}
	r.apply(r.d.Ready())
}

// do runs f on the core inside the loop, between two steps, and waits.
func (r *runner) do(f func(c *ownership.Core)) error {
	return r.run(func() { r.d.Do(f) })
}

// run runs f inside the loop, between two drains, and waits.
func (r *runner) run(f func()) error {
	done := make(chan struct{})
	q := func() {
		defer close(done)
		f()
	}
	select {
	case r.queries <- q:
	case <-r.stop:
		return errStopped
	}
	select {
	case <-done:
		return nil
	case <-r.stop:
		return errStopped
	}
}

func (r *runner) rebalance() (*ownership.RebalanceResult, []ownership.Batch, error) {
	var res *ownership.RebalanceResult
	var batches []ownership.Batch
	err := r.run(func() {
		if err := r.d.Step(ownership.Rebalance{}); err != nil {
			res = &ownership.RebalanceResult{Reason: err.Error()}
			return
		}
		rd := r.d.Ready()
		res, batches = rd.Rebalance, rd.Batches
		r.apply(rd)
	})
	return res, batches, err
}

// apply hands batches to the executor and publishes the hand-offs made
// and the report changes.
func (r *runner) apply(rd drive.Ready) {
	for _, ho := range rd.Handoffs {
		r.p.handedOff(ho)
	}
	for _, batch := range rd.Batches {
		r.exec <- decided{batch, r.p.o.Clock.Now()}
	}
	for _, rc := range rd.Reports {
		ri := api.ReportInfo{Condition: string(rc.Condition), Raised: rc.Raised,
			Host: rc.Host, Node: rc.Node, LUN: rc.LUN, Port: rc.Port, Cause: rc.Cause}
		r.p.publish(api.Event{Kind: api.EventReport, Report: &ri})
		if r.p.o.OnReport != nil {
			r.p.o.OnReport(ri)
		}
		r.p.o.Log.Info("report", "change", rc.String())
	}
}

// executor carries out batches: with the mover, or on the local array
// (drive.Run: a batch may hold LUNs of several owners, with more than two
// nodes; each owner's share moves as one array batch), then tells the core
// what became of them.
func (r *runner) executor() {
	defer r.wg.Done()
	for d := range r.exec {
		// Not while a fault is being injected (Inject).
		r.p.faultMu.RLock()
		r.p.faultMu.RUnlock()
		var told []ownership.OwnerChanged
		if r.mover != nil {
			// Only what the core still wants there (drive.Live), as on the
			// local array.
			live := d.Batch
			live.LUNs = r.d.Live(live)
			if len(live.LUNs) > 0 {
				var err error
				if told, err = r.mover(live, d.At); err != nil {
					r.p.o.Log.Warn("ownership move failed", "luns", live.LUNs, "to", d.To, "cause", d.Cause, "err", err)
				}
			}
		} else {
			var moved []drive.Moved
			told, moved = r.d.Run(d.Batch, r.p.arr.Move)
			for _, m := range moved {
				if m.Err != nil && !errors.Is(m.Err, array.ErrNoChange) {
					r.p.o.Log.Warn("ownership move failed", "luns", m.LUNs, "to", m.To, "cause", d.Cause, "err", m.Err)
				}
			}
		}
		r.post(r.d.Ran(d.Batch, told)...)
	}
}

// Pending says whether a batch the core decided for the LUN is queued or
// under way (its outcome not reported back yet).
func (p *Path) Pending(id uint64) bool {
	r := p.core.Load()
	return r != nil && r.d.Pending(id)
}
