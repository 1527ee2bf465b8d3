package sim

import (
	"slices"

	"github.com/aluad/aluad/ownership"
)

// The planned-ping-pong invariant: balance and shipping never undo each
// other. A planned move (balance or shipping) of a LUN that takes it back
// to the node its previous planned move took it from, within
// pingPongWindow of that move, is a ping-pong when the LUN's media I/O
// arrived mostly (ShipShare) at one node, the same one, over the ship
// window before each of the two moves (so one of them took the LUN away
// from where its I/O arrives, and that I/O did not move), and nothing
// between them justifies it: no fact the core learnt (ownershipFact), no
// failover or failback, no host's media I/O to the LUN arriving at a node
// other than the first move's destination where it had not arrived in
// the ship window before the first move, and no host sending to the LUN
// whose following the core had not judged at the first move (the one
// round trip that judging a host costs, which the ROI check charges for)
// or judged differently since.

// pingPongWindow is how long after a planned move its undoing is judged:
// the cooldown that holds a LUN after a planned move, plus the follow
// window and the ship window, which is how long I/O that did not follow
// takes to show it and shipping to bring the LUN back. Later, balance
// re-levels on loads of other LUNs that moved meanwhile, which the
// simulation does not track as facts.
func pingPongWindow() int {
	c := coreConfig()
	return c.Cooldown + c.FollowWindow + c.ShipWindow
}

// plannedMove is a LUN's latest balance or shipping move, as the
// ping-pong check remembers it.
type plannedMove struct {
	tick     int
	cause    string
	from, to string
	// facts is w.facts when it was decided; toward, the node at least
	// ShipShare of the LUN's media I/O arrived at over the ship window
	// before it ("" if none).
	facts  int
	toward string
	// before: the nodes each host's media I/O to the LUN arrived at over
	// the ship window before the move; senders, every host that sent
	// media I/O to it then or since; judged, the core's judgement of each
	// host's following then ("" not yet).
	before  map[string]map[string]bool
	senders map[string]bool
	judged  map[string]string
	// moved: since the move, some host's media I/O arrived at a node
	// other than its destination where it had not arrived before.
	moved bool
}

// mediaSample is one interval's media commands of a host to a LUN
// through a node.
type mediaSample struct {
	tick       int
	host, node string
	lun        uint64
	n          float64
}

// ownershipFact: the event tells the core something that may justify
// moving a LUN back: a node or port going down or up, a host logging in
// or out (a path cut or mended, a reboot, a session timing out), a
// capacity or declaration, an owner it did not decide (an operator's
// move, a rollback, a correction), a report cleared, a rebalance asked
// for. I/O statistics, path traffic, RTPGs and ticks are not facts.
func ownershipFact(e ownership.Event) bool {
	switch e.(type) {
	case ownership.NodeState, ownership.PortState, ownership.Login, ownership.Logout, ownership.NodeDecl,
		ownership.HostDecl, ownership.LUNDecl, ownership.OwnerChanged, ownership.ClearReport, ownership.Rebalance:
		return true
	}
	return false
}

// notePingPong keeps what the check needs of an event on its way to the
// core (before any planted rewrite of it).
func (w *World) notePingPong(e ownership.Event) {
	if ownershipFact(e) {
		w.facts++
		return
	}
	io, ok := e.(ownership.IO)
	if !ok || io.Media <= 0 {
		return
	}
	keep := w.ticks - coreConfig().ShipWindow - 1
	i := 0
	for i < len(w.media) && w.media[i].tick < keep {
		i++
	}
	w.media = append(w.media[i:], mediaSample{tick: w.ticks, host: io.Host, node: io.Node, lun: io.LUN, n: io.Media})
	if m := w.planned[io.LUN]; m != nil {
		m.senders[io.Host] = true
		if io.Node != m.to && !m.before[io.Host][io.Node] {
			m.moved = true
		}
	}
}

// noteJudged records the core's latest judgement of each host's
// following (a judgement a core forgets is still remembered here).
func (w *World) noteJudged() {
	for _, b := range w.core.HostBehaviours() {
		if b.Follows != "unknown" {
			w.judged[b.Host] = b.Follows
		}
	}
}

// arrivals sums the media I/O to a LUN over the ship window, by host and
// node, and says at which node at least ShipShare of it arrived.
func (w *World) arrivals(id uint64) (byHost map[string]map[string]bool, toward string) {
	c := coreConfig()
	byHost = map[string]map[string]bool{}
	perNode, total := map[string]float64{}, 0.0
	for _, s := range w.media {
		if s.lun != id || s.tick < w.ticks-c.ShipWindow {
			continue
		}
		if byHost[s.host] == nil {
			byHost[s.host] = map[string]bool{}
		}
		byHost[s.host][s.node] = true
		perNode[s.node] += s.n
		total += s.n
	}
	for _, n := range w.arr.Nodes {
		if total > 0 && perNode[n.Name] >= c.ShipShare*total {
			toward = n.Name
		}
	}
	return byHost, toward
}

// checkPingPong judges a balance or shipping batch, then remembers it.
func (w *World) checkPingPong(b ownership.Batch) {
	w.noteJudged()
	for i, l := range w.arr.LUNs {
		if !slices.Contains(b.LUNs, l.ID) {
			continue
		}
		before, toward := w.arrivals(l.ID)
		if m := w.planned[l.ID]; m != nil && b.To == m.from && w.ticks-m.tick <= pingPongWindow() &&
			m.facts == w.facts && !m.moved && m.toward != "" && toward == m.toward && !w.judgedSince(m) {
			w.fail("planned-ping-pong", "%s of LUN %d back to node %s undoes its %s to node %s %d ticks before: "+
				"its I/O arrived mostly at node %s before both, and nothing changed between them",
				b.Cause, l.ID, b.To, m.cause, m.to, w.ticks-m.tick, toward)
			return
		}
		m := &plannedMove{tick: w.ticks, cause: string(b.Cause), from: w.prevOwners[i], to: b.To, facts: w.facts,
			toward: toward, before: before, senders: map[string]bool{}, judged: map[string]string{}}
		for h := range before {
			m.senders[h] = true
		}
		for h, j := range w.judged {
			m.judged[h] = j
		}
		w.planned[l.ID] = m
	}
}

// judgedSince: a host that sent media I/O to the LUN had not been judged
// when the move was decided (the round trip judging it costs), has not
// been yet, or has been judged differently since.
func (w *World) judgedSince(m *plannedMove) bool {
	for h := range m.senders {
		if m.judged[h] == "" || w.judged[h] != m.judged[h] {
			return true
		}
	}
	return false
}
