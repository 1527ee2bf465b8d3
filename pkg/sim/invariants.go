package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
)

// The invariants checked after every event (and every event run inside a
// move), by name. The data invariants (acked-write-lost, silent-loss,
// false-loss-report, torn-block, foreign-data, caw-false-miscompare) are
// checked by the model on every read and crash; ua-before-media and
// two-ao-groups (a host's RTPG) by the hosts on every command;
// move-onto-down-node by the change listener.
//
//	one-ao-group          no host's view of a LUN has two active/optimized groups
//	served-in-time        a LUN whose owner is down is served again within the
//	                      implicit transition time when a live node that all its
//	                      users reach exists
//	command-lost          every command sent gets a status (none is left parked)
//	orderly-move          a failover off an owner that is up is justified by a
//	                      host that uses the LUN, is logged in, not in the middle
//	                      of a reboot's logins, and does not use the owner's node
//	                      (its paths there were cut or are down, or it never
//	                      gave evidence of using them): logouts, reboots and
//	                      returning hosts move nothing
//	balance-below-floor   no balance move while every up node is below the
//	                      stress floor
//	move-storm            failovers and failbacks of one LUN within any
//	                      simulated hour stay within what damping allows
//	                      (stormBound)
//	planned-move-strands  a failback, balance or shipping move never goes to a
//	                      node where a logged-in user of the LUN has no session
//	planned-ping-pong     balance and shipping never undo each other: a
//	                      balance or shipping move never takes a LUN back to
//	                      the node its previous one (balance or shipping)
//	                      took it from, within the cooldown plus the follow
//	                      and ship windows, while the LUN's media I/O arrived
//	                      mostly (ShipShare) at one node, the same, over the
//	                      ship window before both, unless between them: a
//	                      node or port went down or up, a host logged in or
//	                      out (cut, mended, rebooted, timed out), a capacity
//	                      changed, an owner changed that the core did not
//	                      decide (an operator's move, a rollback), a LUN
//	                      failed over or back, a host's I/O to the LUN
//	                      arrived at a node other than the first move's
//	                      destination where it had not arrived before it,
//	                      or a host sending to the LUN was not judged yet
//	                      (follows or not) at the first move, or was judged
//	                      differently since (the round trip that judging a
//	                      host costs, which the ROI check charges for)
//	mnd-false             Multipath Not Discovering Paths is never raised for a
//	                      host of a kind with multipath on a node where it has
//	                      a session on a usable path (its checker probes it),
//	                      whatever RTPGs it reads
//	mnd-missed            it is raised for a host of a kind without multipath
//	                      (nohandler, dh-alua-nomp) that has been logged in on
//	                      a node, and not used it, for the discovery window
//	                      and the debounce, whatever RTPGs it reads
//	host-io               every host with a session on a usable path to a live
//	                      node can complete I/O on each LUN it uses: some such
//	                      path reports AO or ANO to it (TRANSITIONING for at
//	                      most the implicit transition time); STANDBY or
//	                      UNAVAILABLE on all of them is a host cut off. A
//	                      host without multipath has only the path it uses
//	                      (its device's): that one must.
func (w *World) check() {
	if w.viol != nil {
		return
	}
	w.checkGroups()
	w.checkServed()
}

// checkGroups: at most one AO group per LUN, for each host type present.
func (w *World) checkGroups() {
	seen := map[string]bool{}
	for _, h := range w.hosts {
		if seen[h.ht.Name] {
			continue
		}
		seen[h.ht.Name] = true
		for _, l := range w.arr.LUNs {
			ao := 0
			for _, g := range l.Groups(h.initiator) {
				if g.State == alua.ActiveOptimized {
					ao++
				}
			}
			if ao > 1 {
				w.fail("one-ao-group", "LUN %d has %d active/optimized groups for host type %s", l.ID, ao, h.ht.Name)
				return
			}
		}
	}
}

// checkServed: a LUN left on a down owner is taken over within the
// implicit transition time (RTPG byte 5) when it can be.
func (w *World) checkServed() {
	limit := time.Duration(w.arr.TransitionTime()) * time.Second
	for _, l := range w.arr.LUNs {
		if l.Owner().Up() || !w.servable(l) {
			delete(w.downSince, l.ID)
			continue
		}
		since, ok := w.downSince[l.ID]
		if !ok {
			w.downSince[l.ID] = w.clock
			continue
		}
		if w.clock.Sub(since) > limit {
			w.fail("served-in-time", "LUN %d has been on down node %s for %s (transition time %s) though node(s) its users reach are up",
				l.ID, l.Owner().Name, w.clock.Sub(since), limit)
			return
		}
	}
}

// servable: some up node is reached by every host that uses the LUN
// (any up node if none does).
func (w *World) servable(l *array.LUN) bool {
	for _, n := range w.arr.Nodes {
		if !n.Up() {
			continue
		}
		ok := true
		for _, h := range w.hosts {
			if h.uses(l.ID) && !h.reaches(n) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// reaches: the host has a session on a port of n that is not silent.
func (h *host) reaches(n *array.Node) bool {
	for _, p := range n.Ports {
		if _, silent := h.w.silent[p.RelativeID]; h.sess[p.RelativeID] && !silent {
			return true
		}
	}
	return false
}

// dampCount is the sim core's DampCount.
const dampCount = 3

// stormBound is how many failovers and failbacks of one LUN damping
// allows within an hour: DampCount failovers, then one more per
// DampClear of stability that releases it, each with its failback,
// per damping window in the hour.
func stormBound() int {
	c := coreConfig()
	windows := (3600 + c.DampWindow - 1) / c.DampWindow
	return 2 * windows * (c.DampCount + (c.DampWindow+c.DampClear-1)/c.DampClear)
}

// checkBatch judges a batch the core decided, before it is carried out.
func (w *World) checkBatch(b ownership.Batch) {
	switch b.Cause {
	case alua.CauseBalance, alua.CauseShipping:
		w.checkPingPong(b)
	default:
		w.facts++ // a failover or failback may justify moving a LUN back
	}
	switch b.Cause {
	case alua.CauseFailover:
		for _, id := range b.LUNs {
			var own *array.Node
			for i, l := range w.arr.LUNs {
				if l.ID == id {
					own = w.arr.Node(w.prevOwners[i])
				}
			}
			if own == nil {
				continue
			}
			w.recovery[id] = append(w.recovery[id], w.ticks)
			w.checkStorm(id)
			if own.Up() && !w.failoverJustified(id, own) {
				w.fail("orderly-move", "LUN %d failed over off node %s, which is up, though every host using it that "+
					"is logged in uses that node (or is still logging in after a reboot); the core's view: %s",
					id, own.Name, w.coreView(id))
			}
		}
	case alua.CauseFailback:
		for _, id := range b.LUNs {
			w.recovery[id] = append(w.recovery[id], w.ticks)
			w.checkStorm(id)
		}
		w.checkPlanned(b)
	case alua.CauseShipping:
		w.checkPlanned(b)
	case alua.CauseBalance:
		// The utilisation before the decision: the load of every LUN
		// that moved since the previous owners back on its node.
		floor := coreConfig().StressFloor
		load := map[string]float64{}
		for _, st := range w.core.NodeStats() {
			load[st.Node] = st.Load
		}
		for i, l := range w.arr.LUNs {
			if now := w.core.Owner(l.ID); now != w.prevOwners[i] {
				load[now] -= w.core.LUNLoad(l.ID)
				load[w.prevOwners[i]] += w.core.LUNLoad(l.ID)
			}
		}
		stressed := false
		for _, st := range w.core.NodeStats() {
			stressed = stressed || nodeUp(w.arr, st.Node) && load[st.Node] >= floor*st.Capacity
		}
		if !stressed {
			w.fail("balance-below-floor", "balance move of %v while every up node is below the stress floor %.2f", b.LUNs, floor)
			return
		}
		w.checkPlanned(b)
	}
}

// checkPlanned: a planned move (failback, balance, shipping) goes only
// where every host the core knows uses the LUN, and that has shown it a
// node it uses, has a session: never onto a node a user has no path to
// (one it logged out of, lost, or is still logging back in to).
func (w *World) checkPlanned(b ownership.Batch) {
	dest := w.arr.Node(b.To)
	for _, id := range b.LUNs {
		for _, h := range w.hosts {
			if !h.userOf[id] || h.sessions() == 0 || h.reaches(dest) {
				continue
			}
			shown := false
			for _, n := range w.arr.Nodes {
				shown = shown || h.reaches(n) && h.usesNode(n.Name)
			}
			if shown {
				w.fail("planned-move-strands", "%s of LUN %d to node %s, where host %s, which uses it, has no session",
					b.Cause, id, b.To, h.name)
				return
			}
		}
	}
}

// failoverJustified: some host using the LUN is logged in, not rejoining,
// and does not use the owner's node.
func (w *World) failoverJustified(id uint64, owner *array.Node) bool {
	for _, h := range w.hosts {
		if !h.uses(id) || h.sessions() == 0 || len(h.rejoin) > 0 {
			continue
		}
		if t, gone := h.left[owner.Name]; gone {
			// It left that node on purpose: a reason to move only when it
			// is the LUN's one user and its I/O went on afterwards.
			if w.soleUser(id, h) {
				if r := h.lunTicks[id]; r.ticks > 0 && r.last > t {
					return true
				}
			}
			continue
		}
		if !h.reaches(owner) || !h.usesNode(owner.Name) {
			return true
		}
		if h.kind.io == ioFirst {
			if p, ok := h.devicePath(nil); ok && w.arr.Port(p).Node != owner {
				return true
			}
		}
	}
	return false
}

// checkStorm bounds a LUN's failovers and failbacks within an hour.
func (w *World) checkStorm(id uint64) {
	ts := w.recovery[id]
	n := 0
	for _, t := range ts {
		if w.ticks-t < 3600 {
			n++
		}
	}
	if n > stormBound() {
		w.fail("move-storm", "LUN %d failed over or back %d times within an hour (damping allows %d)", id, n, stormBound())
	}
}

// checkHostIO runs after each tick: judged from each host's side, every
// LUN it uses has, among its paths with a session through a usable port
// of a live node, one that reports AO or ANO to it, or has had only
// TRANSITIONING ones for no longer than the implicit transition time. A
// host without multipath counts only the path whose device it uses:
// nothing moves its I/O to another path.
// (A host of a STANDBY type that logged out of, or lost, every path to a
// LUN's owner while the LUN stays there for others must see its other
// paths handed off to ANO.)
func (w *World) checkHostIO() {
	if w.viol != nil || w.arr.Explicit() {
		return
	}
	limit := int(w.arr.TransitionTime())
	for _, h := range w.hosts {
		for _, id := range h.luns {
			l := w.arr.LUN(id)
			k := seenKey{lun: id}
			live, usable, moving := false, false, false
			var states []string
			dev, _ := h.devicePath(nil)
			for _, p := range h.paths {
				if !h.sess[p] || !h.usable(p) {
					continue
				}
				if h.kind.io == ioFirst && p != dev {
					continue // no multipath: only the path it uses counts
				}
				live = true
				st := l.State(h.initiator, w.arr.Port(p).Node)
				states = append(states, fmt.Sprintf("%d:%s", p, st))
				switch st {
				case alua.ActiveOptimized, alua.ActiveNonOptimized:
					usable = true
				case alua.Transitioning:
					moving = true
				}
			}
			if !live || usable {
				delete(h.cutOff, k)
				continue
			}
			since, ok := h.cutOff[k]
			if !ok {
				h.cutOff[k] = w.ticks
				since = w.ticks
			}
			if !moving || w.ticks-since > limit {
				w.fail("host-io", "host %s (%s, %s) has live paths to LUN %d but none it can do I/O on: %s (owner %s)",
					h.name, h.ht.Name, h.kind.name, id, strings.Join(states, " "), l.Owner().Name)
				return
			}
		}
	}
}

// checkMND runs after each tick: MND is raised for a host of a kind
// without multipath on a node it is logged in to but does not use, once
// the discovery window and the debounce have passed since its last
// command there (a run of scans looks like a checker's probing while it
// lasts), and never for a host of a kind with multipath on a node where
// it has a session on a usable path (its checker probes every such path
// every tick).
func (w *World) checkMND() {
	if w.viol != nil {
		return
	}
	active := map[string]bool{}
	for _, r := range w.core.Active() {
		if r.Condition == ownership.MultipathNotDiscovering {
			active[r.Host+"\x00"+r.Node] = true
		}
	}
	cfg := coreConfig()
	// A host a scan made the core take for multipath is judged silent
	// after the silence window.
	window := max(cfg.DiscoveryWindow, cfg.SilenceWindow) + cfg.Debounce + 2
	for _, h := range w.hosts {
		for _, n := range w.arr.Nodes {
			on := active[h.name+"\x00"+n.Name]
			if on && h.kind.multipath && h.probes(n) {
				w.fail("mnd-false", "MND raised for host %s (%s) on node %s, where its multipath stack probes a path",
					h.name, h.kind.name, n.Name)
				return
			}
			if h.usesNode(n.Name) {
				h.lastUsed[n.Name] = w.ticks
			}
			if h.kind.multipath || !n.Up() || on || h.usesNode(n.Name) {
				continue
			}
			since, logged := w.ticks, false
			for _, p := range n.Ports {
				if h.sess[p.RelativeID] && h.usable(p.RelativeID) {
					since, logged = min(since, h.since[p.RelativeID]), true
				}
			}
			if t, ok := h.lastUsed[n.Name]; ok {
				since = max(since, t) // logged in and unused since then
			}
			if t, ok := h.cmdOn[n.Name]; ok {
				since = max(since, t) // scans look like probing while they go on
			}
			if logged && w.ticks-since > window {
				view := ""
				for _, st := range w.core.HostStates() {
					if st.Host == h.name {
						view = fmt.Sprintf("; the core's view: reaches %v, protocol-only %v, multipath shown %v", st.Reaches,
							st.ProtocolOnly, w.core.ShownMultipath(h.name))
					}
				}
				w.fail("mnd-missed", "host %s (no multipath) has been logged in on node %s for %d ticks without using it, "+
					"and MND is not raised%s", h.name, n.Name, w.ticks-since, view)
				return
			}
		}
	}
}

// probes: the host's stack shows the array a path to n: a session on a
// usable port that its checker probes every tick (probeIdle), or, for a
// stack that probes no idle path, on which it read RTPG as it claimed it
// (longer ago than the debounce: an MND raised before clears after it).
func (h *host) probes(n *array.Node) bool {
	for _, p := range n.Ports {
		if !h.sess[p.RelativeID] || !h.usable(p.RelativeID) {
			continue
		}
		if t, ok := h.claimed[p.RelativeID]; h.kind.probeIdle || ok && h.w.ticks-t > coreConfig().Debounce {
			return true
		}
	}
	return false
}

// coreView says, for a violation's detail, which nodes the core thinks
// each host using the LUN reaches.
func (w *World) coreView(id uint64) string {
	var parts []string
	for _, st := range w.core.HostStates() {
		if h := w.byName[st.Host]; h != nil && h.uses(id) {
			parts = append(parts, fmt.Sprintf("%s reaches %v, protocol-only %v", st.Host, st.Reaches, st.ProtocolOnly))
		}
	}
	return strings.Join(parts, "; ")
}

// soleUser: no other host the core knows uses the LUN is logged in or
// away (shut down or rebooting).
func (w *World) soleUser(id uint64, h *host) bool {
	for _, o := range w.hosts {
		if o != h && o.userOf[id] && (o.sessions() > 0 || o.away) {
			return false
		}
	}
	return true
}
