package ownership

// The STANDBY hand-off. A host type whose non-owner paths report STANDBY
// (linux-dmmp) makes its multipath stack leave those paths at once: what
// it is for after a move, and fatal when the host has no path to the
// owner. An administrator logging a host out of the owner's portals is the
// ordinary case, and it cannot be caught at the Logout: open-iscsi removes
// the SCSI devices first (SYNCHRONIZE CACHE, then the device is gone),
// dm-multipath activates the next path group within milliseconds, reads
// STANDBY there, fails every path and the application gets EIO; the Logout
// reaches the array afterwards (seen with a Debian guest in the QEMU lab).
//
// So STANDBY is a push, not a steady state. A host of a STANDBY type sees
// its non-owner paths ANO (handed off: its I/O is forwarded, never
// refused), except for the LUNs of a node that one of its LUNs has just
// moved to, while the move is being followed: from the move until the
// host's I/O to that LUN arrives mostly at the new owner, or the follow
// window ends. Only a host that can follow is pushed: one that has shown
// a multipath stack and whose checker has probed the new owner without a
// break for the hand-back hold (its stack has the path in its map by
// then; one rescan's burst is no probing). A failback
// or a balance move waits until every such user can be pushed; otherwise
// it would follow late. At its last logout from a node a STANDBY-type host
// is handed off at once as well (pkg/control), in case a push was under
// way.

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
	if !h.obs.confirmed {
		shown := c.usesTwoNodesAtOnce(h)
		if shown && !h.obs.showing {
			h.obs.shownAt = c.now
		}
		h.obs.showing = shown
		if shown {
			// Confirmed past the attach window after its latest login,
			// by evidence shown without a lapse for an attach window: a
			// checker goes on probing; rescans (at any time, however
			// long after the logins, one slow one or a few a minute
			// apart) lapse or end before that.
			h.obs.multipath = true
			h.obs.confirmed = c.now >= c.lastLogin(h)+c.attachWindow() && c.now-h.obs.shownAt >= c.attachWindow()
		}
	}
	if h.obs.state == followYes {
		h.obs.confirmed = h.obs.multipath
	}
	for _, s := range h.nexuses { // each on its own: the order does not matter
		if !c.pathUp(s) {
			s.probing = evidence{} // a break: its probes prove the path again when it is back
		}
	}
	for _, n := range c.nodeNames {
		if c.reaches(h, n) {
			h.everReached[n], h.had[n] = true, true
		}
		if from, ok := c.inUse(h, n); ok && c.reaches(h, n) {
			if _, ok := h.inUseSince[n]; !ok {
				h.inUseSince[n] = from
			}
		} else {
			delete(h.inUseSince, n)
		}
	}
}

// attachWindow: how long after a login a host's use of two nodes at once
// may still be the scan of the disks it attached (Config.AttachWindow,
// and never under five discovery windows).
func (c *Core) attachWindow() int { return max(5*c.cfg.DiscoveryWindow, c.cfg.AttachWindow) }

// lastLogin: when the host's newest nexus logged in.
func (c *Core) lastLogin(h *host) int {
	last := 0
	for _, s := range h.nexuses {
		last = max(last, s.since)
	}
	return last
}

// usesTwoNodesAtOnce: the host shows a multipath stack: evidence a host
// without one cannot give by chance, on two nodes at the same time: media
// I/O or commands that keep arriving, on each node, in runs that overlap
// for a third of the discovery window. A host without multipath sends
// through one path at a time; when that path moves to another node (its
// node failed) the two runs follow each other, they do not overlap.
func (c *Core) usesTwoNodesAtOnce(h *host) bool {
	type span struct{ first, last int }
	var spans []span
	for _, n := range c.nodeNames {
		best, ok := span{}, false
		consider := func(e evidence) {
			if c.proves(e) && (!ok || e.last-e.first > best.last-best.first) {
				best, ok = span{e.first, e.last}, true
			}
		}
		for k, e := range h.media { // the longest run will do: the order does not matter
			if k.node == n {
				consider(e)
			}
		}
		for _, s := range h.nexuses {
			if s.n.Node == n && c.pathUp(s) {
				consider(s.traffic)
			}
		}
		if ok {
			spans = append(spans, best)
		}
	}
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			if min(spans[i].last, spans[j].last)-max(spans[i].first, spans[j].first) >= c.cfg.DiscoveryWindow/3 {
				return true
			}
		}
	}
	return false
}

// handbackHold is how long a host must have reached a node before it is
// pushed there: HandbackHold, and never less than a third of the
// discovery window (a path discovered by the RTPG its kernel reads as it
// attaches it is not in multipathd's map yet; the checker's probes prove
// it by then).
func (c *Core) handbackHold() int { return max(c.cfg.HandbackHold, c.cfg.DiscoveryWindow/3) }

// pushable: a STANDBY push onto node would reach h: it has shown a
// multipath stack, and its stack has probed (or its I/O used) a path
// there without a break for the hold. An RTPG is not enough: the one a
// kernel reads as it attaches a new path comes before multipathd has put
// the path in its map (a push then fails every path it has: seen with a
// Debian guest logging back in to the owner's portals).
func (c *Core) pushable(h *host, node string) bool {
	if !h.obs.multipath {
		return false
	}
	since, ok := h.inUseSince[node]
	return ok && c.now-since >= c.handbackHold()
}

// inUse: the host's stack works a path to node now, and since when: its
// checker probes it (commands arrived on it in two ticks or more past the
// hold after it logged in, with no gap longer than a checker's longest
// interval, the last within that interval: since the first of them), or
// its media I/O through node proves use (since now). One burst of
// commands is not probing: a kernel without multipath rescanning its
// disks sends one on every path, and its last rescan may come just before
// a move; a push then would turn the one path it uses STANDBY. A checker
// comes back within its interval (multipathd: 5-20 s).
func (c *Core) inUse(h *host, node string) (int, bool) {
	from, ok := c.now, false
	for _, s := range h.nexuses {
		p := s.probing
		if s.n.Node == node && c.pathUp(s) && s.discovered && p.ticks >= 2 && c.now-p.last <= c.checkerFresh() {
			from, ok = min(from, p.first), true
		}
	}
	if ok {
		return from, true
	}
	return c.now, c.connected(h, node) && c.usesNode(h, node)
}

// checkerFresh: a checker's longest interval between probes of a path:
// the silence window, as silentNode assumes (multipathd's
// max_polling_interval is four polling intervals: 20 s at the defaults,
// 40 s with polling_interval 10), and never under 25 s or the evidence
// gap. Shorter, a checker at 40 s would break every run of probes and
// its host could never be pushed: a failback would wait for good.
func (c *Core) checkerFresh() int {
	return max(c.evidenceGap(), int(25e6/c.cfg.TickMicros), c.silenceWindow())
}

// unpushableUser: a user of l of a STANDBY type that runs multipath could
// not be pushed onto node now (a move there would leave it on ANO paths:
// it would follow late).
func (c *Core) unpushableUser(l *lun, node string) bool {
	for name := range l.users { // any will do: the order does not matter
		h := c.hosts[name]
		if h != nil && h.typ.Standby() && h.obs.multipath && len(h.nexuses) > 0 && !c.pushable(h, node) {
			return true
		}
	}
	return false
}

// pushing: a move of one of h's LUNs onto node is being watched (its
// follow window: a push that ended as soon as the host followed would
// leave the paths the push made it fail STANDBY-failed in its map until
// its checker reinstates them, and a move back soon after would wait for
// that). Nothing else pushes: a host whose I/O turns up forwarded while
// it still has a session to the owner is most likely leaving it (open-
// iscsi removes the devices before it sends the Logout), and STANDBY then
// would fail its last paths (seen in the QEMU lab).
func (c *Core) pushing(h *host, node string) bool {
	for id := range h.uses { // any will do: the order does not matter
		l := c.luns[id]
		if l.owner != node {
			continue
		}
		if f := l.follow; f != nil && f.to == node && f.judge[h.name] {
			return true // for the whole follow window: the host's stack re-reads paths it failed only at its checker
		}
	}
	return false
}

// handedOff: the host's type reports STANDBY on non-owner paths, and no
// push onto node is under way for it (see above).
func (c *Core) handedOff(h *host, node string) bool {
	if !h.typ.Standby() || c.cfg.Passive {
		return false
	}
	return !(c.pushable(h, node) && c.pushing(h, node))
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

// resyncHandoffs says, for every node, what the host's non-owner paths
// must report now (Ready.Handoffs), changed or not: after an operator's
// change of the host (HostDecl, Rehome) the array may hold a hand-off
// the core never set.
func (c *Core) resyncHandoffs(name string) {
	h := c.hosts[name]
	if h == nil {
		return
	}
	for _, n := range c.nodeNames {
		on := c.handedOff(h, n)
		if on {
			h.handoff[n] = true
		} else {
			delete(h.handoff, n)
		}
		c.ready.Handoffs = append(c.ready.Handoffs, Handoff{Host: name, Node: n, On: on})
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
