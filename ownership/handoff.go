package ownership

// The STANDBY hand-off. A host type whose non-owner paths report STANDBY
// (linux-dmmp) makes its multipath stack leave those paths at once after
// a move: right while the host has a path to the owner, and fatal when
// it has none (an administrator logged it out of the owner's portals, or
// its paths there failed while the LUN stays for its other users): every
// path it has left is STANDBY, dm-multipath fails them all and the
// application gets EIO. So the array never reports STANDBY to a host on
// a non-owner path of a LUN whose owner that host does not reach: those
// paths are handed off to ANO for it and its I/O is forwarded, never
// refused. The LUN itself may then move to where the host is (a failover
// when the host lost the owner by a fault, or is the LUN's one user still
// doing I/O after it left); while other users keep it where it is, the
// hand-off serves this host.
//
// A node is handed off for a host as soon as the host stops reaching it,
// and handed back only once the host has reached it again without a break
// for the hold (handbackHold): its multipath stack has the path in its map
// by then, before its other paths turn STANDBY and push its I/O there. A
// failback or a balance move to a node waits for its STANDBY users to be
// handed back (else they would follow it late). The array applies the
// hand-offs (Ready.Handoffs); on its own and at once it also treats a
// host with no session left to the owner's node as handed off, since the
// Logout of the last path is answered before the host turns to the
// others.

// Handoff says whether Host's paths to nodes other than Node report ANO
// instead of STANDBY for LUNs Node owns (On) or STANDBY again (off).
type Handoff struct {
	Host, Node string
	On         bool
}

// trackReach notes what the host reaches now: everReached, had (since it
// joined), whether it has shown a multipath stack, and since when it has
// reached each node without a break (the hand-back waits on that).
func (c *Core) trackReach(h *host) {
	if !h.obs.multipath {
		n := 0
		for _, node := range c.reachable(h) {
			if c.surelyReaches(h, node) {
				n++
			}
		}
		h.obs.multipath = n > 1
	}
	for _, n := range c.nodeNames {
		if c.reaches(h, n) {
			h.everReached[n], h.had[n] = true, true
			if _, ok := h.reachSince[n]; !ok {
				h.reachSince[n] = c.now
			}
		} else {
			delete(h.reachSince, n)
		}
	}
}

// surelyReaches: the host reaches node by evidence a host without
// multipath cannot give by chance: media I/O that proves use, an RTPG
// trusted, or commands that have kept arriving for a whole discovery
// window (not a few scans in a row).
func (c *Core) surelyReaches(h *host, node string) bool {
	for _, s := range h.nexuses {
		if s.n.Node != node || !s.discovered || !c.pathUp(s) {
			continue
		}
		if !s.byTraffic || s.traffic.last-s.traffic.first >= c.cfg.DiscoveryWindow {
			return true
		}
	}
	return false
}

// handbackHold is how long a host must have reached a node before it is
// handed back: HandbackHold, and never less than a third of the
// discovery window (a path discovered by the RTPG its kernel reads as it
// attaches it is not in multipathd's map yet; the checker's probes prove
// it by then).
func (c *Core) handbackHold() int { return max(c.cfg.HandbackHold, c.cfg.DiscoveryWindow/3) }

// handedOffUser: a user of l of a STANDBY type is handed off for node (a
// move there would not push it off its other paths: it would follow late).
func (c *Core) handedOffUser(l *lun, node string) bool {
	for name := range l.users { // any will do: the order does not matter
		if h := c.hosts[name]; h != nil && len(h.nexuses) > 0 && h.handoff[node] {
			return true
		}
	}
	return false
}

// handedOff: the host's type reports STANDBY on non-owner paths, and it
// has not reached node for the hold without a break, or it has not shown
// a multipath stack at all (a host declared linux-dmmp that runs none).
func (c *Core) handedOff(h *host, node string) bool {
	if !h.typ.Standby() || c.cfg.Passive {
		return false
	}
	if !h.obs.multipath {
		return true // no multipath stack shown: STANDBY could leave it no path at all
	}
	since, ok := h.reachSince[node]
	return !ok || c.now-since < c.handbackHold()
}

// updateHandoffs emits the hand-offs that changed for hosts (all when
// nil), in host and node order.
func (c *Core) updateHandoffs(hosts []string) {
	if hosts == nil {
		hosts = c.hostNames
	}
	for _, name := range hosts {
		h := c.hosts[name]
		for _, n := range c.nodeNames {
			on := c.handedOff(h, n)
			if on == h.handoff[n] {
				continue
			}
			if on {
				h.handoff[n] = true
			} else {
				delete(h.handoff, n)
			}
			c.ready.Handoffs = append(c.ready.Handoffs, Handoff{Host: name, Node: n, On: on})
		}
	}
}

// Handoffs lists every hand-off in force, by host then node.
func (c *Core) Handoffs() []Handoff {
	var out []Handoff
	for _, name := range c.hostNames {
		h := c.hosts[name]
		for _, n := range c.nodeNames {
			if h.handoff[n] {
				out = append(out, Handoff{Host: name, Node: n, On: true})
			}
		}
	}
	return out
}

// hostList is the one-host list reconcile passes on (nil: every host).
func hostList(h *host) []string {
	if h == nil {
		return nil
	}
	return []string{h.name}
}
