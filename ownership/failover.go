package ownership

import (
	"maps"
	"slices"
	"sort"

	"github.com/aluad/aluad/pkg/alua"
)

// Failover, failback and I/O shipping (reference 002 "Automatic Recovery /
// Fail-Back"; DESIGN "The control path" 6).
//
//   - Failover is immediate and skips the ROI check and cooldowns: when a
//     LUN's owner goes down, or hosts using it lose the owner while some
//     other node would serve them all, it moves to such a node (the
//     preferred owner when it qualifies, else the least loaded).
//   - Failback waits until every host using a failed-over LUN reaches the
//     preferred owner again (hosts still joining included), continuously
//     for FailbackWindow ticks, and FailbackCooldown after the LUN's last
//     move; a partial recovery does not fail back (that would strand a
//     host), nor does a LUN whose users would not follow (their I/O
//     would be forwarded).
//   - Damping: a LUN that failed over DampCount times within DampWindow
//     stays on its reachable owner, with Path Flapping raised, until it
//     has had no failover for DampClear or the operator clears it.
//   - I/O shipping: a LUN whose I/O mostly arrives at one non-owner node
//     (hosts that do not follow ALUA changes) moves there.

type move struct {
	l     *lun
	to    string
	cause alua.Cause
}

// reconcile applies connectivity: it updates what hosts have reached,
// fails over what must move now, and tracks failback stability. With a
// host, only that host's connectivity changed, so only its LUNs are
// looked at; with nil, everything is.
func (c *Core) reconcile(only *host) {
	hosts := c.hostNames
	if only != nil {
		hosts = []string{only.name}
	}
	for _, name := range hosts {
		h := c.hosts[name]
		c.trackReach(h)
	}
	ids := c.lunIDs
	if only != nil {
		ids = make([]uint64, 0, len(only.uses))
		for id := range only.uses {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	}
	var loads map[string]float64
	var moves []move
	for _, id := range ids {
		l := c.luns[id]
		ok, all := c.allowed(l)
		if len(ok) == 0 {
			continue // no node is up: nothing can serve it
		}
		owner := c.nodes[l.owner]
		if !owner.up || !contains(ok, l.owner) {
			// Owner down, or hosts lost it while another node serves
			// them all (or more of them).
			if loads == nil {
				loads = c.nodeLoads()
			}
			to := c.pickOwner(l, ok, loads)
			loads[l.owner] -= l.load()
			loads[to] += l.load()
			moves = append(moves, move{l, to, alua.CauseFailover})
			l.flapping = owner.up // a path lost or a host leaving: either way it counts toward damping
			if owner.up {
				c.noteFlap(l)
			}
		}
		if l.displaced {
			ok, all = c.allowedStrict(l)
		}
		c.trackFailback(l, ok, all)
	}
	c.emit(moves)
	c.updateHandoffs(hostList(only))
}

// noteFlap records the hosts whose lost (or left) paths fail l over, for
// the Path Flapping report.
func (c *Core) noteFlap(l *lun) {
	for _, name := range c.sortedUsers(l) {
		h := c.hosts[name]
		if len(h.nexuses) == 0 || c.reaches(h, l.owner) {
			continue
		}
		if !slices.Contains(l.flapHosts, name) {
			l.flapHosts = append(l.flapHosts, name)
		}
	}
}

// sortedUsers lists l's users in name order.
func (c *Core) sortedUsers(l *lun) []string {
	return slices.Sorted(maps.Keys(l.users))
}

// usedByFlapper: a user of l is a host whose flapping paths damp some LUN.
func (c *Core) usedByFlapper(l *lun) bool {
	for _, id := range c.lunIDs {
		d := c.luns[id]
		if d.damped < 0 {
			continue
		}
		for _, h := range d.flapHosts {
			if l.users[h] {
				return true
			}
		}
	}
	return false
}

// trackDamping damps a LUN that keeps failing over, and releases it once
// its users have reached its preferred owner again without a break for
// DampClear (the paths are stable, not merely up between two flaps).
func (c *Core) trackDamping() {
	for _, id := range c.lunIDs {
		l := c.luns[id]
		recent := l.failovers[:0]
		for _, t := range l.failovers {
			if c.now-t < c.cfg.DampWindow {
				recent = append(recent, t)
			}
		}
		l.failovers = recent
		last := max(l.damped, l.lastFlap)
		stable := !l.displaced || l.prefOKSince >= 0 && c.now-l.prefOKSince >= c.cfg.DampClear
		switch {
		case l.damped >= 0 && c.now-last >= c.cfg.DampClear && stable:
			// Released; the failovers stay counted for the window, so
			// the next one damps it again at once.
			l.damped, l.flapHosts = -1, nil
		case l.damped < 0 && len(l.failovers) == 0:
			l.flapHosts = nil
		}
	}
}

// pickOwner chooses among candidates: the preferred owner if it is one,
// else the least loaded relative to capacity (ties by name).
func (c *Core) pickOwner(l *lun, cands []string, loads map[string]float64) string {
	if contains(cands, l.preferred) {
		return l.preferred
	}
	best, bestU := "", 0.0
	for _, n := range cands {
		u := loads[n] / c.nodes[n].capacity
		if best == "" || u < bestU {
			best, bestU = n, u
		}
	}
	return best
}

// trackFailback notes since when the preferred owner would serve every
// user of a displaced LUN.
func (c *Core) trackFailback(l *lun, ok []string, all bool) {
	if !l.displaced || l.owner == l.preferred {
		l.prefOKSince = -1
		return
	}
	if all && contains(ok, l.preferred) {
		if l.prefOKSince < 0 {
			l.prefOKSince = c.now
		}
	} else {
		l.prefOKSince = -1
	}
}

// failbacks returns the displaced LUNs whose recovery is complete and has
// been stable for the window.
func (c *Core) failbacks() []move {
	var out []move
	for _, id := range c.lunIDs {
		l := c.luns[id]
		if l.displaced && l.prefOKSince >= 0 && c.now-l.prefOKSince >= c.cfg.FailbackWindow &&
			c.failbackAllowed(l) {
			out = append(out, move{l, l.preferred, alua.CauseFailback})
		}
	}
	return out
}

// failbackPending: a displaced LUN's users all reach its preferred owner
// again and its failback window is running. The balancer waits for it
// (at most the window): failback restores the designed placement, and a
// balance move planned meanwhile would only be undone.
func (c *Core) failbackPending() bool {
	for _, id := range c.lunIDs {
		if l := c.luns[id]; l.displaced && l.prefOKSince >= 0 && c.failbackAllowed(l) {
			return true
		}
	}
	return false
}

// failbackAllowed: the LUN is not damped, its last move is
// FailbackCooldown ago, its preferred owner is not crash-looping
// (crashloop.go), every STANDBY-type user can be pushed there
// (handoff.go), and no user that will not follow would have its
// I/O forwarded by the failback.
func (c *Core) failbackAllowed(l *lun) bool {
	if l.damped >= 0 || c.now-l.lastMove < c.cfg.FailbackCooldown || c.unstable(l.preferred) ||
		c.unpushableUser(l, l.preferred) {
		return false
	}
	d, _ := c.forwardDelta(l, l.preferred)
	return d <= 0
}

// trackShipping notes, each tick, which non-owner node (if any) receives
// at least ShipShare of a LUN's I/O, and since when.
func (c *Core) trackShipping() {
	for _, id := range c.lunIDs {
		l := c.luns[id]
		to, total := "", l.load()
		if total >= c.cfg.ShipMinWork {
			for _, n := range c.nodeNames {
				if n != l.owner && l.arrive[n] >= c.cfg.ShipShare*total {
					to = n
				}
			}
		}
		if to != l.shipTo {
			l.shipTo, l.shipSince = to, c.now
		}
	}
}

// shipping returns LUNs whose I/O has mostly arrived at one other node,
// serving all their users, for the whole ship window: never a damped LUN
// (damping holds it where its hosts reach it), never onto an unstable
// node, and never away from where a user that does not follow sends.
func (c *Core) shipping() []move {
	var out []move
	for _, id := range c.lunIDs {
		l := c.luns[id]
		if l.shipTo == "" || c.now-l.shipSince < c.cfg.ShipWindow || !(c.cooled(l) || c.shippedForNonFollowers(l)) ||
			l.damped >= 0 || c.unstable(l.shipTo) || c.strandsNonFollower(l, l.shipTo) {
			continue // a damped LUN stays where its hosts reach it
		}
		if ok, all := c.allowedStrict(l); all && contains(ok, l.shipTo) {
			out = append(out, move{l, l.shipTo, alua.CauseShipping})
		}
	}
	return out
}

// shippedForNonFollowers: most of the media I/O arriving where l would be
// shipped comes from hosts seen not to follow moves. The cooldown does
// not hold such a shipment back: the hosts will not come to the LUN, so
// the LUN goes to them.
func (c *Core) shippedForNonFollowers(l *lun) bool {
	nf, all := 0.0, 0.0
	for _, name := range c.sortedUsers(l) {
		v := l.hostArrive[name][l.shipTo]
		all += v
		if h := c.hosts[name]; h != nil && !c.follows(h) {
			nf += v
		}
	}
	return all > 0 && nf >= c.cfg.ShipShare*all
}

// cooled: the LUN has not moved within the cooldown.
func (c *Core) cooled(l *lun) bool { return c.now-l.lastMove >= c.cfg.Cooldown }
