package sim

import (
	"time"

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
				if g.State == array.ActiveOptimized {
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

// reaches: the host has a session on a port of n.
func (h *host) reaches(n *array.Node) bool {
	for _, p := range n.Ports {
		if h.sess[p.RelativeID] {
			return true
		}
	}
	return false
}
