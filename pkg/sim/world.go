package sim

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/arrayview"
	"github.com/aluad/aluad/pkg/drive"
	"github.com/aluad/aluad/pkg/media"
	"github.com/aluad/aluad/pkg/scsi"
)

// pageSize is the caches' page size in the simulation (the default).
const pageSize = 4096

// Violation is a broken invariant: its name, what was seen, and the
// script line at which it was seen.
type Violation struct {
	Name   string
	Detail string
	// Line is the index in the script of the event being run (or, for
	// the final check, len(script)).
	Line int
}

func (v *Violation) Error() string {
	return fmt.Sprintf("invariant %s broken at line %d: %s", v.Name, v.Line+1, v.Detail)
}

// World is one simulated array with its hosts, run from a script.
type World struct {
	top *topology
	arr *array.Array
	srv *scsi.Server
	da  *drive.Array
	d   *drive.Driver
	// core is d's core, read between its steps (stepped through d only).
	core *ownership.Core
	// toCore: what the driver said the core must hear of a move under way.
	toCore []ownership.Event
	clock  time.Time
	hosts  []*host
	byName map[string]*host
	byInit map[string]*host
	m      *model
	log    strings.Builder
	logN   int

	script Script
	next   int // the next script line
	line   int // the line being run
	depth  int // moves in progress (nested inside hooks)
	held   map[uint64]bool
	parked []Event
	bg     []func()
	// batches are the core's decisions not carried out yet.
	batches []ownership.Batch

	// ticks counts the core's ticks.
	ticks  int
	portUp map[uint16]bool
	// silent: the ports that went silent (power loss, a pulled cable) and
	// the tick they did; a host's session there lingers until its
	// connection ping times out (host.detect ticks).
	silent    map[uint16]int
	sw        map[uint64]*media.Switch
	crashes   int
	downSince map[uint64]time.Time
	// recovery holds each LUN's failover and failback ticks (move-storm).
	recovery map[uint64][]int
	// prevOwners: the core's owners (in w.arr.LUNs order) before the
	// event being stepped, which a batch moves LUNs from.
	prevOwners []string
	// coreIn, when set, rewrites every event on its way to the core
	// (tests plant ownership defects there).
	coreIn func(ownership.Event) ownership.Event
	// noHandoff plants the old array: no STANDBY hand-off (tests).
	noHandoff bool
	// forgetFollowing plants the old core: before each tick it forgets
	// what it saw each host do after a move, so a host's following is
	// what its type says (tests).
	forgetFollowing bool
	// The planned-ping-pong check (pingpong.go): facts counts the events
	// that may justify moving a LUN back; media, the media I/O of the
	// last ship window; planned, each LUN's latest balance or shipping
	// move; judged, the core's latest judgement of each host's following.
	facts   int
	media   []mediaSample
	planned map[uint64]*plannedMove
	judged  map[string]string
	ioPrev  map[ioKey]scsi.NexusIO
	viol    *Violation
	stats   Stats
	// seen is each node's destager state between passes.
	seen []uint64
}

// Stats counts what a run did.
type Stats struct {
	Events, Commands, Good, Moves, Takeovers, Abandoned, Crashes, Faults int
	// Verified counts blocks read back and checked against the model.
	Verified int
	// MidMove counts the events run inside a move, by phase point.
	MidMove map[string]int
}

type ioKey struct {
	n   scsi.Nexus
	lun uint64
}

// newWorld builds the array, device server, core and hosts of a script's
// topology lines.
func newWorld(s Script) (*World, error) { return newWorldWrapped(s, nil) }

// newWorldWrapped is newWorld with each LUN's media wrapped (tests plant
// defects there to see the invariants catch them).
func newWorldWrapped(s Script, wrap func(lun uint64, st media.Store) media.Store) (*World, error) {
	top, err := parseTopology(s)
	if err != nil {
		return nil, err
	}
	w := &World{top: top, clock: time.Unix(1_000_000_000, 0).UTC(), byName: map[string]*host{},
		byInit: map[string]*host{}, held: map[uint64]bool{}, portUp: map[uint16]bool{}, silent: map[uint16]int{},
		sw: map[uint64]*media.Switch{}, downSince: map[uint64]time.Time{}, recovery: map[uint64][]int{}, ioPrev: map[ioKey]scsi.NexusIO{},
		planned: map[uint64]*plannedMove{}, judged: map[string]string{}, script: s}
	cfg := top.config()
	w.arr, err = array.New(cfg, array.Options{
		Now:   func() time.Time { return w.clock },
		Sleep: w.advance,
		OpenStore: func(id uint64, size int64) (media.Store, error) {
			sw := &media.Switch{}
			w.sw[id] = sw
			var st media.Store = media.NewMem(size)
			if wrap != nil {
				st = wrap(id, st)
			}
			return media.WithFaults(st, sw, w.advance), nil
		},
		Background:    func(f func()) { w.bg = append(w.bg, f) },
		ManualDestage: true,
		MoveHook:      w.hook,
		Logger:        discardLogger(),
	})
	if err != nil {
		return nil, err
	}
	w.seen = make([]uint64, len(w.arr.Nodes))
	w.srv = scsi.NewServer()
	w.srv.SetClock(func() time.Time { return w.clock })
	for _, p := range w.arr.Ports {
		w.srv.AddTargetPort(scsi.TargetPortInfo{RelativeID: p.RelativeID,
			Name: fmt.Sprintf("%s,t,0x%04x", cfg.Target, p.RelativeID)})
		w.portUp[p.RelativeID] = true
	}
	for _, l := range w.arr.LUNs {
		if _, err := w.srv.AddLU(scsi.LUConfig{LUN: l.ID, BlockSize: l.BlockSize, PhysicalBlockSize: l.PhysicalBlockSize,
			Blocks: uint64(l.Size / int64(l.BlockSize)), Backend: l,
			Identity: scsi.Identity{Vendor: "ALUAD", Product: "aluad sim", Revision: "0001",
				Serial: w.arr.Serial(l), NAA: w.arr.NAA(l)}}); err != nil {
			return nil, err
		}
	}
	w.srv.SetALUA(arrayview.View{Arr: w.arr, Srv: w.srv})
	w.da = drive.NewArray(w.arr, w.srv)
	w.srv.SetObserver(observer{w})
	w.arr.OnChange(w.changed)
	w.m = newModel(w)
	if err := w.startCore(); err != nil {
		return nil, err
	}
	for _, hs := range top.hosts {
		h := newHost(w, hs)
		w.hosts = append(w.hosts, h)
		w.byName[h.name] = h
		w.byInit[strings.ToLower(h.initiator)] = h
	}
	return w, nil
}

// startCore declares the array to a fresh ownership core, with windows
// short enough that failback, balance and shipping happen within a run.
// coreConfig is the simulation's core: the defaults with windows short
// enough for a few hundred events.
func coreConfig() ownership.Config {
	oc := ownership.DefaultConfig()
	oc.FailbackWindow, oc.DiscoveryWindow, oc.Cooldown, oc.PlanInterval, oc.ShipWindow = 5, 5, 30, 5, 10
	oc.SilenceWindow, oc.AttachWindow = 10, 25 // two and five discovery windows, as the defaults are
	oc.FailbackCooldown, oc.StressWindow, oc.FollowWindow = 10, 5, 10
	oc.DampCount, oc.DampWindow, oc.DampClear = dampCount, 3600, 300
	return oc
}

func (w *World) startCore() error { return w.startCoreWith(coreConfig()) }

// startCoreWith (re)starts the core with a configuration, before a run.
// The daemon's own driver (pkg/drive) declares the array and runs the
// core's decisions.
func (w *World) startCoreWith(oc ownership.Config) error {
	d, err := drive.New(w.da, oc, 1000)
	if err != nil {
		return err
	}
	w.d, w.core = d, d.Core()
	w.handoffs(d.Ready().Handoffs)
	return nil
}

// advance moves the virtual clock (the array's Sleep).
func (w *World) advance(d time.Duration) {
	if d > 0 {
		w.clock = w.clock.Add(d)
	}
}

func (w *World) logf(format string, args ...any) {
	fmt.Fprintf(&w.log, "%s%s\n", strings.Repeat("  ", w.depth), fmt.Sprintf(format, args...))
	w.logN++
}

// fail records the first broken invariant.
func (w *World) fail(name, format string, args ...any) {
	if w.viol != nil {
		return
	}
	w.viol = &Violation{Name: name, Detail: fmt.Sprintf(format, args...), Line: w.line}
	w.logf("VIOLATION %s: %s", name, w.viol.Detail)
}

// run executes the script's events, then heals the array and reads back
// every block the model knows.
func (w *World) run() {
	for w.next < len(w.script) && w.viol == nil {
		e := w.script[w.next]
		w.line = w.next
		w.next++
		if isTopology(e.Verb) {
			continue
		}
		w.advance(time.Millisecond)
		w.do(e)
		w.drain()
		w.check()
	}
	if w.viol == nil {
		w.line = len(w.script)
		w.final()
	}
}

// do runs one event (at the top level or inside a move's hook).
func (w *World) do(e Event) {
	w.stats.Events++
	if w.isIO(e) && w.held[w.lunArg(e)] {
		w.logf("%s: parked (the LUN is held by a move)", e)
		w.parked = append(w.parked, e)
		return
	}
	out := w.exec(e)
	w.logf("%s: %s", e, out)
}

func (w *World) isIO(e Event) bool {
	switch e.Verb {
	case "read", "write", "ws", "unmap", "caw", "sync", "rtpg":
		return true
	}
	return false
}

func (w *World) lunArg(e Event) uint64 {
	n, _ := e.argInt(1)
	return uint64(n)
}

// exec carries out an event and says what came of it.
func (w *World) exec(e Event) string {
	switch e.Verb {
	case "login", "logout", "reboot", "scan", "rtpg", "read", "write", "ws", "unmap", "caw", "sync":
		h := w.byName[e.arg(0)]
		if h == nil {
			return "no such host"
		}
		return h.exec(e)
	case "tick":
		n := max(e.optInt("n", 1), 1)
		for range n {
			w.tick()
		}
		return w.ownersString()
	case "destage", "destager":
		n := w.arr.Node(e.arg(0))
		if n == nil {
			return "no such node"
		}
		if e.Verb == "destager" {
			n.Cache.DestagePass(&w.seen[n.Index])
			return fmt.Sprintf("dirty %d", n.Cache.Stats().Dirty)
		}
		k, err := n.Cache.DestageSome(int(max(e.optInt("pages", 16), 1)))
		return fmt.Sprintf("%d pages (%v)", k, errString(err))
	case "bg":
		if len(w.bg) == 0 {
			return "nothing queued"
		}
		f := w.bg[0]
		w.bg = w.bg[1:]
		f()
		return fmt.Sprintf("ran (%d left)", len(w.bg))
	case "crash", "panic":
		return w.crash(e.arg(0))
	case "power-loss":
		return w.powerLoss(e.arg(0))
	case "restart":
		return w.restart(e.arg(0))
	case "port":
		id, _ := e.argInt(0)
		return w.setPort(uint16(id), e.arg(1) == "up")
	case "cable-pull", "cable-plug":
		id, _ := e.argInt(0)
		return w.cable(uint16(id), e.Verb == "cable-plug")
	case "cut", "mend":
		h := w.byName[e.arg(0)]
		id, _ := e.argInt(1)
		if h == nil {
			return "no such host"
		}
		return h.setCut(uint16(id), e.Verb == "cut")
	case "move":
		return w.operatorMove(e)
	case "capacity":
		c, _ := strconv.ParseFloat(e.arg(1), 64)
		if w.arr.Node(e.arg(0)) == nil || c <= 0 {
			return "refused"
		}
		w.step(ownership.NodeDecl{Node: e.arg(0), Capacity: c})
		return "ok"
	case "media":
		return w.mediaFault(e)
	case "link":
		d, err := time.ParseDuration(e.arg(0))
		if err != nil || d < 0 || d > time.Second {
			return "refused"
		}
		w.arr.SetInterlinkPenalty(d)
		w.stats.Faults++
		return "ok"
	}
	return "unknown verb"
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// step feeds the core one event and queues what it decides.
func (w *World) step(e ownership.Event) {
	prev := w.prevOwners[:0]
	for _, l := range w.arr.LUNs {
		owner := w.core.Owner(l.ID)
		if oc, ok := e.(ownership.OwnerChanged); ok && oc.LUN == l.ID {
			owner = oc.Owner // applied before anything it leads to
		}
		prev = append(prev, owner)
	}
	w.prevOwners = prev
	w.notePingPong(e)
	if w.coreIn != nil {
		e = w.coreIn(e)
	}
	if _, tick := e.(ownership.Tick); tick && w.forgetFollowing {
		w.forget()
	}
	if err := w.d.Step(e); err != nil {
		return
	}
	if _, tick := e.(ownership.Tick); tick {
		w.noteJudged()
	}
	r := w.d.Ready()
	for _, b := range r.Batches {
		w.checkBatch(b)
	}
	w.batches = append(w.batches, r.Batches...)
	for _, rc := range r.Reports {
		w.logf("report %s", rc.String())
	}
	w.handoffs(r.Handoffs)
}

// forget makes the core forget what it saw each host do after a move
// (a type declared afresh is judged afresh): the planted old core.
func (w *World) forget() {
	for _, hs := range w.top.hosts {
		ht := alua.HostTypes[hs.typ]
		other := ht
		other.Name += "-forgotten"
		w.d.Step(ownership.HostDecl{Host: hs.name, Type: other}, ownership.HostDecl{Host: hs.name, Type: ht})
	}
}

// handoffs logs the STANDBY hand-offs the driver made; the planted old
// array (noHandoff) takes them back at once.
func (w *World) handoffs(hs []ownership.Handoff) {
	if w.noHandoff {
		w.arr.ClearHandoffs()
		return
	}
	for _, ho := range hs {
		w.logf("handoff %s node %s on=%v", ho.Host, ho.Node, ho.On)
	}
}

// drain carries out the core's batches (at the top level only: a move
// nested in a hook would run inside another's hold).
func (w *World) drain() {
	for runs := 0; len(w.batches) > 0 && w.depth == 0 && w.viol == nil; runs++ {
		if runs == 256 {
			w.fail("move-livelock", "the core decided 256 batches in a row without a new event: %v", w.batches[0])
			return
		}
		b := w.batches[0]
		w.batches = w.batches[1:]
		told, moved := w.d.Run(b, w.move)
		for _, m := range moved {
			w.logf("core %s %v %s->%s: %s", b.Cause, m.LUNs, m.From, m.To, moveString(m.Change, m.Err))
		}
		for _, e := range w.d.Ran(b, told) {
			w.step(e)
		}
	}
}

func moveString(c array.Change, err error) string {
	if err != nil {
		return "failed: " + err.Error()
	}
	s := fmt.Sprintf("ok stop=%s", c.Stop)
	if c.Replayed > 0 {
		s += fmt.Sprintf(" replayed=%d", c.Replayed)
	}
	return s
}

// move runs array.Move, then delivers the commands parked during its hold.
func (w *World) move(ids []uint64, to string, cause alua.Cause) (array.Change, error) {
	w.depth++
	c, err := w.arr.Move(ids, to, cause)
	w.depth--
	if err == nil {
		w.stats.Moves++
	} else if errors.Is(err, array.ErrMoveAbandoned) {
		w.stats.Abandoned++
	}
	if c.Replayed > 0 || (c.From != "" && !nodeUp(w.arr, c.From)) {
		w.stats.Takeovers++
	}
	if w.depth > 0 {
		// A move inside another's hook: the outer one still holds its
		// LUNs; commands parked meanwhile wait for it to end.
		w.tellCore()
		return c, err
	}
	clear(w.held)
	for len(w.parked) > 0 {
		e := w.parked[0]
		w.parked = w.parked[1:]
		w.logf("%s: delivered after the hold: %s", e, w.exec(e))
	}
	w.tellCore()
	return c, err
}

// tellCore steps what the driver said the core must hear of the moves
// just made (an operator's), once the move is over, as the daemon does.
func (w *World) tellCore() {
	evs := w.toCore
	w.toCore = nil
	for _, e := range evs {
		w.step(e)
	}
}

func nodeUp(a *array.Array, name string) bool {
	n := a.Node(name)
	return n != nil && n.Up()
}

// operatorMove is "aluad move": the core is told, as the daemon does.
func (w *World) operatorMove(e Event) string {
	var ids []uint64
	for _, f := range strings.Split(e.arg(0), ",") {
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil || w.arr.LUN(id) == nil {
			return "refused: bad LUN list"
		}
		ids = append(ids, id)
	}
	c, err := w.move(ids, e.arg(1), alua.CauseManual)
	return moveString(c, err)
}

// hook runs the script's events tagged with this move point, in order.
func (w *World) hook(p array.MovePoint) {
	if p.Phase == array.PhaseHold || p.Phase == array.PhaseTakeover {
		for _, id := range p.LUNs {
			w.held[id] = true
		}
	}
	if w.depth > 1 || w.viol != nil {
		return
	}
	for w.next < len(w.script) && w.viol == nil {
		e := w.script[w.next]
		if e.At != string(p.Phase) || (e.AtLUN >= 0 && uint64(e.AtLUN) != p.LUN) {
			return
		}
		w.line = w.next
		w.next++
		if w.stats.MidMove == nil {
			w.stats.MidMove = map[string]int{}
		}
		w.stats.MidMove[string(p.Phase)]++
		w.logf("at %s of %v %s->%s (LUN %d):", p.Phase, p.LUNs, p.From, p.To, p.LUN)
		w.do(e)
		w.check()
	}
}

// tick is one second of the array: the interval's I/O to the core, the
// core's tick.
func (w *World) tick() {
	w.advance(time.Second)
	for _, h := range w.hosts {
		h.check()
	}
	w.emitIO()
	for _, h := range w.hosts {
		h.tickMedia()
	}
	w.ticks++
	w.step(ownership.Tick{})
	w.detectSilence()
	w.checkMND()
	w.checkHostIO()
	for _, h := range w.hosts {
		h.rejoinOne()
	}
}

type ioAgg struct {
	ops, bytes, media uint64
	busy              time.Duration
}

// emitIO reports each (host, node, LUN)'s I/O since the last tick.
func (w *World) emitIO() {
	agg := map[string]*ioAgg{}
	type pathAgg struct {
		nx   scsi.Nexus
		ops  uint64
		busy time.Duration
	}
	paths := map[string]*pathAgg{}
	for _, s := range w.srv.IOStats() {
		k := ioKey{s.Nexus, s.LUN}
		prev := w.ioPrev[k]
		w.ioPrev[k] = s
		h := w.byInit[strings.ToLower(s.Nexus.InitiatorName)]
		p := w.arr.Port(s.Nexus.TargetPort)
		if h == nil || p == nil {
			continue
		}
		ops := s.Reads + s.Writes + s.Other - prev.Reads - prev.Writes - prev.Other
		if ops == 0 {
			continue
		}
		pk := fmt.Sprintf("%s\x00%d", s.Nexus.InitiatorName, s.Nexus.TargetPort)
		if paths[pk] == nil {
			paths[pk] = &pathAgg{nx: s.Nexus}
		}
		paths[pk].ops += ops
		paths[pk].busy += s.Busy - prev.Busy
		media := s.Reads + s.Writes + s.Syncs - prev.Reads - prev.Writes - prev.Syncs
		key := fmt.Sprintf("%s\x00%s\x00%d", h.name, p.Node.Name, s.LUN)
		a := agg[key]
		if a == nil {
			a = &ioAgg{}
			agg[key] = a
		}
		a.ops += ops
		a.media += media
		a.bytes += s.BytesRead + s.BytesWritten - prev.BytesRead - prev.BytesWritten
		a.busy += s.Busy - prev.Busy
	}
	// Each nexus's commands of the interval, whatever they were (a
	// checker's probes too): the path traffic the core's discovery reads.
	for _, key := range sortedKeys(paths) {
		p := paths[key]
		if nx, ok := w.coreNexus(p.nx); ok {
			w.step(ownership.PathLatency{Nexus: nx, Ops: float64(p.ops),
				Exchange: float64(p.busy) / float64(p.ops) / float64(time.Microsecond)})
		}
	}
	for _, key := range sortedKeys(agg) {
		f := strings.Split(key, "\x00")
		lun, _ := strconv.ParseUint(f[2], 10, 64)
		a := agg[key]
		w.step(ownership.IO{Host: f[0], Node: f[1], LUN: lun, Ops: float64(a.ops), Media: float64(a.media), Bytes: float64(a.bytes),
			RespTime: float64(a.busy) / float64(a.ops) / float64(time.Microsecond), Ticks: 1})
	}
}

func (w *World) ownersString() string {
	var b strings.Builder
	b.WriteString("owners")
	for _, l := range w.arr.LUNs {
		fmt.Fprintf(&b, " %d:%s", l.ID, l.Owner().Name)
		if !l.Owner().Up() {
			b.WriteString("(down)")
		}
	}
	return b.String()
}

// crash powers a node off: its cache is lost, its sessions end (a fault,
// not a logout), the core is told.
func (w *World) crash(name string) string {
	c, err := w.arr.CrashNode(name)
	if err != nil {
		return "refused: " + err.Error()
	}
	w.crashes++
	w.stats.Crashes++
	w.m.lost(c.Lost)
	// The core hears of the node first, as the daemon tells it before
	// the node's ports drop their sessions: those ends are the node's
	// loss, not a path fault of each host.
	w.step(ownership.NodeState{Node: name, Up: false})
	n := w.arr.Node(name)
	for _, h := range w.hosts {
		for _, p := range n.Ports {
			h.drop(p.RelativeID)
		}
	}
	return fmt.Sprintf("lost %s", lossString(c.Lost))
}

// powerLoss fails a node as a power loss does: the array loses it at
// once (the core hears the node go), but its ports go silent, so each
// host's sessions there end only when the host's ping times out.
func (w *World) powerLoss(name string) string {
	n := w.arr.Node(name)
	if n == nil || !n.Up() {
		return "refused: not an up node"
	}
	c, err := w.arr.CrashNode(name)
	if err != nil {
		return "refused: " + err.Error()
	}
	for _, p := range n.Ports {
		if _, pulled := w.silent[p.RelativeID]; !pulled {
			// A port already silent (its cable pulled) keeps the
			// tick it went quiet: the hosts' pings started then.
			w.silent[p.RelativeID] = w.ticks
		}
	}
	w.crashes++
	w.stats.Crashes++
	w.m.lost(c.Lost)
	for _, h := range w.hosts {
		h.forgetIfUnreached(n)
	}
	w.step(ownership.NodeState{Node: name, Up: false})
	return fmt.Sprintf("lost %s", lossString(c.Lost))
}

// cable pulls (silent, the controller sees its link go) or plugs one port.
func (w *World) cable(id uint16, plug bool) string {
	p := w.arr.Port(id)
	if p == nil {
		return "refused: no such port"
	}
	if !p.Node.Up() {
		return "refused: its node is down"
	}
	if plug {
		// As the daemon's cable-plug: the port serves again, whether
		// its cable was pulled or it was disabled.
		if _, pulled := w.silent[id]; !pulled && w.portUp[id] {
			return "no change"
		}
		w.unsilence(id)
		w.portUp[id] = true
		w.step(ownership.PortState{Node: p.Node.Name, Port: id, Up: true})
		for _, h := range w.hosts {
			h.reconnect()
		}
		return "ok"
	}
	if !w.portUp[id] {
		return "no change"
	}
	w.stats.Faults++
	w.portUp[id] = false
	w.silent[id] = w.ticks
	for _, h := range w.hosts {
		h.forgetIfUnreached(p.Node)
	}
	w.step(ownership.PortState{Node: p.Node.Name, Port: id, Up: false})
	return "ok"
}

// unsilence ends a port's silence: the sessions hosts still had there
// are reset (the controller forgot them).
func (w *World) unsilence(id uint16) {
	if _, ok := w.silent[id]; !ok {
		return
	}
	delete(w.silent, id)
	for _, h := range w.hosts {
		h.drop(id)
	}
}

// detectSilence ends, at each tick, the sessions whose host's ping to a
// silent port has timed out.
func (w *World) detectSilence() {
	ids := make([]uint16, 0, len(w.silent))
	for id := range w.silent {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		for _, h := range w.hosts {
			if h.sess[id] && w.ticks-w.silent[id] >= h.detect {
				w.logf("%s: ping on port %d timed out after %d ticks", h.name, id, w.ticks-w.silent[id])
				h.drop(id)
			}
		}
	}
}

func lossString(ls []array.Loss) string {
	if len(ls) == 0 {
		return "none"
	}
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("LUN %d pages %v", l.LUN, l.PageIdx))
	}
	return strings.Join(parts, ", ")
}

// restart brings a node back; hosts reconnect their paths to it.
func (w *World) restart(name string) string {
	n := w.arr.Node(name)
	if n == nil || n.Up() {
		return "refused: not a down node"
	}
	if err := w.arr.RestartNode(name); err != nil {
		return "refused: " + err.Error()
	}
	for _, p := range n.Ports {
		w.unsilence(p.RelativeID) // what a silent port held is reset
	}
	w.step(ownership.NodeState{Node: name, Up: true})
	// Every port serves again, one disabled or with its cable pulled
	// before the failure included, and the core hears each (as the
	// daemon's restart).
	for _, p := range n.Ports {
		w.portUp[p.RelativeID] = true
		w.step(ownership.PortState{Node: name, Port: p.RelativeID, Up: true})
	}
	for _, h := range w.hosts {
		h.reconnect()
	}
	return "up"
}

// setPort takes a target port down (every session on it ends) or up.
func (w *World) setPort(id uint16, up bool) string {
	p := w.arr.Port(id)
	if p == nil {
		return "refused: no such port"
	}
	if !p.Node.Up() {
		return "refused: its node is down" // as the daemon: restart it first
	}
	if w.portUp[id] == up {
		if _, pulled := w.silent[id]; pulled && !up {
			// A pulled cable's port disabled: the daemon resets what
			// it held, so its hosts learn at once.
			w.stats.Faults++
			w.unsilence(id)
			return "ok"
		}
		return "no change"
	}
	w.portUp[id] = up
	w.stats.Faults++
	w.unsilence(id) // a pulled cable's sessions: reset, or closed by the port going down
	if !up {
		for _, h := range w.hosts {
			h.drop(id)
		}
	}
	w.step(ownership.PortState{Node: p.Node.Name, Port: id, Up: up})
	if up {
		for _, h := range w.hosts {
			h.reconnect()
		}
	}
	return "ok"
}

// mediaFault sets a LUN's media fault: fail=read|write|sync|none, delay=D.
func (w *World) mediaFault(e Event) string {
	id, ok := e.argInt(0)
	sw := w.sw[uint64(id)]
	if !ok || sw == nil {
		return "refused: no such LUN"
	}
	w.stats.Faults++
	if f, ok := e.Opts["fail"]; ok {
		for _, op := range []media.Op{media.OpRead, media.OpWrite, media.OpSync} {
			sw.Fail(op, op.String() == f)
		}
	}
	if _, ok := e.Opts["delay"]; ok {
		d := e.optDur("delay")
		if d < 0 || d > time.Second {
			return "refused: delay out of range"
		}
		sw.Delay(d)
	}
	return "ok"
}

// changed is the array's change listener: the driver announces it,
// and check that no move is reported done onto a node that is down.
func (w *World) changed(c array.Change) {
	w.toCore = append(w.toCore, w.da.Changed(c)...)
	switch c.Cause {
	case alua.CauseNodeDown, alua.CauseNodeUp:
		return
	}
	if !c.Failed && c.To != "" && !nodeUp(w.arr, c.To) {
		w.fail("move-onto-down-node", "LUNs %v reported moved to %s, which is down", c.LUNs, c.To)
	}
}

// observer passes RTPGs to the core: multipath discovery of a path.
type observer struct{ w *World }

func (o observer) RTPG(n scsi.Nexus, lun uint64, _ bool) {
	if nx, ok := o.w.coreNexus(n); ok {
		o.w.step(ownership.RTPG{Nexus: nx, LUN: lun})
	}
}

func (o observer) UnitAttention(scsi.Nexus, uint64, scsi.Reason) {}

// NexusLost: the STANDBY hand-off's own half, at once, by the daemon's
// own driver.
func (o observer) NexusLost(n scsi.Nexus) {
	if ho, ok := o.w.da.LastPathLost(n); ok {
		o.w.handoffs([]ownership.Handoff{ho})
	}
}

// coreMultipath: the core has seen host show a multipath stack (so an
// RTPG of its discovers a path).
func (w *World) coreMultipath(host string) bool { return w.core.ShownMultipath(host) }

func (w *World) coreNexus(n scsi.Nexus) (ownership.Nexus, bool) {
	h := w.byInit[strings.ToLower(n.InitiatorName)]
	p := w.arr.Port(n.TargetPort)
	if h == nil || p == nil {
		return ownership.Nexus{}, false
	}
	return ownership.Nexus{Host: h.name, Initiator: h.initiator, ISID: h.isid(n.TargetPort), Port: n.TargetPort,
		Node: p.Node.Name}, true
}

// final heals every fault, lets the array settle and reads back every
// block the model knows, through a host that uses its LUN.
func (w *World) final() {
	w.logf("final: heal and read back")
	if len(w.parked) > 0 {
		w.fail("command-lost", "%d commands parked by a move never got a status: %v", len(w.parked), w.parked)
		return
	}
	for _, sw := range w.sw {
		sw.Fail(media.OpRead, false)
		sw.Fail(media.OpWrite, false)
		sw.Fail(media.OpSync, false)
		sw.Delay(0)
	}
	for _, n := range w.arr.Nodes {
		if !n.Up() {
			w.logf("restart %s: %s", n.Name, w.restart(n.Name))
		}
	}
	ids := make([]uint16, 0, len(w.portUp))
	for id := range w.portUp {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if !w.portUp[id] {
			w.setPort(id, true)
		}
	}
	for _, h := range w.hosts {
		h.mendAll()
		h.exec(Event{Verb: "login", Args: []string{h.name}})
	}
	for len(w.bg) > 0 {
		f := w.bg[0]
		w.bg = w.bg[1:]
		f()
	}
	for range 3 {
		w.tick()
		w.drain()
		w.check()
	}
	for round := 0; round < 4 && w.viol == nil; round++ {
		pending := w.m.verifyAll()
		w.check()
		if pending == 0 {
			break
		}
		w.logf("final: %d blocks not readable yet; a tick", pending)
		w.tick()
		w.drain()
	}
	if w.viol == nil {
		if n := w.m.verifyAll(); n > 0 {
			w.fail("unreadable", "%d blocks could not be read after the array healed", n)
		}
	}
	w.logf("final: %s", w.ownersString())
}
