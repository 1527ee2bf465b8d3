// Package drive owns the array's one control-path driver: the ownership
// core declared from an array, stepped with what the hosts did, and its
// decisions carried out on that array (STANDBY hand-offs, batches of
// moves), what became of each batch told back, and every ownership
// change announced to the hosts with a unit attention.
//
// A Driver is a synchronous value in the style of raft's RawNode: the
// caller steps inputs (Step), takes what the core decided (Ready), carries
// the batches out (Run on the local array, or elsewhere) and tells the
// driver what became of them (Ran, whose events it steps). Nothing in it
// waits or keeps time. The daemon's control path (pkg/control) wraps it in
// two thin goroutines (one steps, one runs batches), a cluster's leader
// runs its batches through the ownership records (pkg/controller), and the
// deterministic simulation (pkg/sim) steps it inline: all three run this
// code, so the simulation judges the daemon's own contract.
package drive

import (
	"errors"
	"sync"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// Driver drives one ownership core over one array. Its methods may be
// called from several goroutines: the core is stepped under a lock, and
// hand-offs are applied under another (so a host's last logout and the
// core's hand-back never overtake each other).
type Driver struct {
	*Array
	arr *array.Array

	mu      sync.Mutex
	core    *ownership.Core
	pending map[uint64]int // LUNs of batches handed out and not reported back
	raised  map[reportKey]ownership.ReportChange
}

// Array is the array as a control path acts on it: its ownership changes
// announced, its STANDBY hand-offs set. It lives as long as the array's
// front end (a controller that does not lead runs no core and still hands
// off a host's last path); each core's Driver acts through it.
type Array struct {
	arr *array.Array
	srv *scsi.Server
	// handoffMu orders the hand-offs of LastPathLost and of Ready.
	handoffMu sync.Mutex
}

// NewArray is arr with srv, the device server that serves it.
func NewArray(arr *array.Array, srv *scsi.Server) *Array { return &Array{arr: arr, srv: srv} }

type reportKey struct {
	cond       ownership.Condition
	host, node string
	lun        uint64
	port       uint16
}

// Ready is what the core decided since the last Ready: batches to carry
// out (Run, or elsewhere, then Ran), report conditions raised or cleared,
// the STANDBY hand-offs that changed the array (already applied: a host
// must not see STANDBY where the core says it must not), and, after a
// rebalance asked for, its result.
type Ready struct {
	Batches   []ownership.Batch
	Reports   []ownership.ReportChange
	Handoffs  []ownership.Handoff
	Rebalance *ownership.RebalanceResult
}

// New declares the array to a fresh core: its nodes (capacity work units
// per tick each), its declared hosts and its LUNs where they are now. The
// array's hand-offs are the new core's only (any left by an earlier core
// are cleared); the declarations' own (a STANDBY host that reaches
// nothing yet) come with the first Ready, to take before any command.
func New(a *Array, oc ownership.Config, capacity float64) (*Driver, error) {
	arr := a.arr
	core, err := ownership.New(oc)
	if err != nil {
		return nil, err
	}
	if capacity <= 0 {
		capacity = 1000
	}
	for _, n := range arr.Nodes {
		if err := core.Step(ownership.NodeDecl{Node: n.Name, Capacity: capacity}); err != nil {
			return nil, err
		}
	}
	for _, h := range arr.Hosts() {
		if err := core.Step(ownership.HostDecl{Host: h.Name, Type: h.Type}); err != nil {
			return nil, err
		}
	}
	for _, l := range arr.LUNs {
		if err := core.Step(ownership.LUNDecl{LUN: l.ID, Preferred: l.Preferred.Name, Owner: l.Owner().Name,
			Media: l.Media, Group: l.Group}); err != nil {
			return nil, err
		}
	}
	arr.ClearHandoffs()
	return &Driver{Array: a, arr: arr, core: core, pending: map[uint64]int{}, raised: map[reportKey]ownership.ReportChange{}}, nil
}

// Step feeds the core events in order. An event the core refuses
// (malformed: an unknown node, LUN or host) leaves it unchanged; the
// first refusal is returned, the others are still stepped.
func (d *Driver) Step(evs ...ownership.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var first error
	for _, e := range evs {
		if err := d.core.Step(e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Ready takes what the core decided since the last Ready and acknowledges
// it (the core advances): the hand-offs are applied to the array here,
// the batches' LUNs count as pending until Ran, the reports update Raised.
func (d *Driver) Ready() Ready {
	d.mu.Lock()
	cr := d.core.Ready()
	d.core.Advance()
	for _, b := range cr.Batches {
		for _, id := range b.LUNs {
			d.pending[id]++
		}
	}
	for _, rc := range cr.Reports {
		k := reportKey{rc.Condition, rc.Host, rc.Node, rc.LUN, rc.Port}
		if rc.Raised {
			d.raised[k] = rc
		} else {
			delete(d.raised, k)
		}
	}
	d.mu.Unlock()
	rd := Ready{Batches: cr.Batches, Reports: cr.Reports, Rebalance: cr.Rebalance}
	for _, ho := range cr.Handoffs {
		if d.handoff(ho) {
			rd.Handoffs = append(rd.Handoffs, ho)
		}
	}
	return rd
}

// Do runs f on the core, between two steps. f must not call the driver.
func (d *Driver) Do(f func(c *ownership.Core)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d.core)
}

// Core is the driver's core, to read between the driver's calls by a
// caller that makes them all from one goroutine (the simulation); others
// read it with Do. It is stepped through the driver only.
func (d *Driver) Core() *ownership.Core { return d.core }

// Owner is where the core has a LUN ("" if it does not know it).
func (d *Driver) Owner(id uint64) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.core.Owner(id)
}

// Pending says whether a batch for the LUN was handed out and what became
// of it is not known yet.
func (d *Driver) Pending(id uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pending[id] > 0
}

// Raised lists the report conditions raised now.
func (d *Driver) Raised() []ownership.ReportChange {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ownership.ReportChange, 0, len(d.raised))
	for _, rc := range d.raised {
		out = append(out, rc)
	}
	return out
}

// Live is the part of batch b still to carry out: its LUNs the core still
// wants on b.To (it may have changed its mind since: an operator's move,
// a later failover) and that are not there yet.
func (d *Driver) Live(b ownership.Batch) []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []uint64
	for _, id := range b.LUNs {
		if l := d.arr.LUN(id); l != nil && d.core.Owner(id) == b.To && l.Owner().Name != b.To {
			out = append(out, id)
		}
	}
	return out
}

// MoveFunc moves LUNs of one owner in the array (array.Move, or a
// caller's wrapper around it).
type MoveFunc func(ids []uint64, to string, cause alua.Cause) (array.Change, error)

// Moved is one array move a batch made, for the caller's log.
type Moved struct {
	LUNs     []uint64
	From, To string
	Change   array.Change
	Err      error
}

// Run carries batch b out on the local array with move: its live LUNs
// (Live), one array move per current owner. It returns what became of
// them for Ran (a rollback where a move failed) and the moves made.
func (d *Driver) Run(b ownership.Batch, move MoveFunc) ([]ownership.OwnerChanged, []Moved) {
	var told []ownership.OwnerChanged
	var moved []Moved
	for _, ids := range d.arr.ByOwner(d.Live(b)) {
		from := d.arr.LUN(ids[0]).Owner().Name
		c, err := move(ids, b.To, b.Cause)
		moved = append(moved, Moved{LUNs: ids, From: from, To: b.To, Change: c, Err: err})
		cause := b.Cause
		if err != nil && !errors.Is(err, array.ErrNoChange) {
			cause = alua.CauseRollback
		}
		for _, id := range ids {
			told = append(told, ownership.OwnerChanged{LUN: id, Owner: d.arr.LUN(id).Owner().Name, Cause: cause})
		}
	}
	return told, moved
}

// Ran ends batch b (its LUNs no longer pending) and returns what the core
// must be told of it, for the caller to Step: a LUN is reported where it
// differs from the core's view (a rollback always). told says where each
// LUN is after the batch; a LUN of b that told leaves out and that the
// core still wants on b.To is where the array has it (a cluster's
// controller installs the records' owners there), a rollback if it did
// not get there; one the core no longer wants there, or that a later
// batch still carries (the core changed its mind and back meanwhile), is
// left to that batch.
func (d *Driver) Ran(b ownership.Batch, told []ownership.OwnerChanged) []ownership.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range b.LUNs {
		if d.pending[id]--; d.pending[id] <= 0 {
			delete(d.pending, id)
		}
	}
	var evs []ownership.Event
	known := map[uint64]bool{}
	for _, oc := range told {
		known[oc.LUN] = true
		if oc.Owner != d.core.Owner(oc.LUN) || oc.Cause == alua.CauseRollback {
			evs = append(evs, oc)
		}
	}
	for _, id := range b.LUNs {
		l := d.arr.LUN(id)
		if known[id] || l == nil || d.core.Owner(id) != b.To || d.pending[id] > 0 {
			continue
		}
		if owner := l.Owner().Name; owner != b.To {
			evs = append(evs, ownership.OwnerChanged{LUN: id, Owner: owner, Cause: alua.CauseRollback})
		}
	}
	return evs
}

// Changed announces an ownership change of the array to the hosts: unit
// attentions queued on every nexus of its LUNs (2A/06, or 2A/07 for a
// failed transition; the STPG's own nexus is spared, SPC-4 5.15.2.2-3).
// It runs inside the array's change callback, before the commands held
// by the move go, so none completes on the new owner before its nexus has
// the unit attention. It returns what the core must be told (a move it
// did not decide: an operator's, a host's STPG), for the caller to Step
// once the move is over.
func (a *Array) Changed(c array.Change) []ownership.Event {
	a.srv.AnnounceALUAChange(c.LUNs, c.Failed, c.Cause == alua.CauseSTPG)
	if c.Failed || (c.Cause != alua.CauseManual && c.Cause != alua.CauseSTPG) {
		return nil
	}
	evs := make([]ownership.Event, 0, len(c.LUNs))
	for _, id := range c.LUNs {
		evs = append(evs, ownership.OwnerChanged{LUN: id, Owner: c.To, Cause: c.Cause})
	}
	return evs
}

// LastPathLost is the STANDBY hand-off's own half, run when nexus n has
// ended and before its logout is answered: when n was its host's last
// nexus to its node and the host's type reports STANDBY on non-owner
// paths, the host's other paths turn ANO for the LUNs that node owns (its
// I/O there is forwarded) until the core hands them back. It returns the
// hand-off when it changed the array.
func (a *Array) LastPathLost(n scsi.Nexus) (ownership.Handoff, bool) {
	a.handoffMu.Lock()
	defer a.handoffMu.Unlock()
	if n.InitiatorName == "" || a.arr.Explicit() {
		return ownership.Handoff{}, false
	}
	h := a.arr.HostOf(n.InitiatorName)
	pt := a.arr.Port(n.TargetPort)
	if !h.Type.Standby() || pt == nil || a.hasPath(h.Name, pt.Node.Name) {
		return ownership.Handoff{}, false
	}
	ho := ownership.Handoff{Host: h.Name, Node: pt.Node.Name, On: true}
	return ho, a.apply(ho)
}

// handoff applies one of the core's hand-offs. A hand-back for a node
// the host has no nexus to any more is stale (the core decided it before
// it stepped the host's last logout) and is dropped.
func (a *Array) handoff(ho ownership.Handoff) bool {
	a.handoffMu.Lock()
	defer a.handoffMu.Unlock()
	if !ho.On && !a.hasPath(ho.Host, ho.Node) {
		return false
	}
	return a.apply(ho)
}

// apply sets a hand-off in the array and, when that changed anything,
// tells the host's nexuses with 2A/06 for the LUNs the node owns.
func (a *Array) apply(ho ownership.Handoff) bool {
	if !a.arr.SetHandoff(ho.Host, ho.Node, ho.On) {
		return false
	}
	if luns := a.arr.OwnedBy(ho.Node); len(luns) > 0 {
		a.srv.QueueUAWhere(luns, func(x scsi.Nexus) bool {
			return x.InitiatorName != "" && a.arr.HostOf(x.InitiatorName).Name == ho.Host
		}, scsi.ReasonUAAsymmetricChanged)
	}
	return true
}

// hasPath reports whether host has a nexus logged in to a port of node.
func (a *Array) hasPath(host, node string) bool {
	for _, x := range a.srv.Nexuses() {
		if o := a.arr.Port(x.TargetPort); o != nil && o.Node.Name == node && x.InitiatorName != "" &&
			a.arr.HostOf(x.InitiatorName).Name == host {
			return true
		}
	}
	return false
}
