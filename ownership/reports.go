package ownership

import (
	"fmt"
	"sort"
	"strings"
)

// Reports (DESIGN "Reports", reference 002 and its Recovery Guru
// screenshot): the conditions of the catalog (catalog.go, CONVENTIONS 11),
// each raised once it has held for its time to visible and cleared once it
// has not held for as long, so a blip neither raises nor clears anything.

// Dependencies (each entry's DependsOn): a node that is offline explains
// everything else about it, so while Node Offline holds for a node, Host
// Redundancy Lost, Path Degraded, Multipath Not Discovering Paths and
// Initiator Connected To One Node Only are not raised for that node, and
// Volume Not On Preferred Path is not raised for the LUNs whose preferred
// owner it is. The Node Offline report names the hosts and LUNs it
// affects instead.

// ReportChange is a condition raised or cleared.
type ReportChange struct {
	Condition Condition
	Host      string // host conditions
	Node      string
	LUN       uint64 // LUN conditions
	Port      uint16 // Path Degraded: the target port (relative id)
	Raised    bool
	Tick      int
	// Cause says what caused it, in words, for the report.
	Cause string
}

func (r ReportChange) String() string {
	what := "cleared"
	if r.Raised {
		what = "raised"
	}
	return fmt.Sprintf("%s %s: %s", what, r.Condition, r.Cause)
}

type condKey struct {
	cond Condition
	host string
	node string
	lun  uint64
	port uint16
}

type condState struct {
	// holding: since when it holds (or, when raised, since when it does
	// not); -1 when it is steady.
	since  int
	raised bool
	cause  string
}

// hold is a condition that holds at a tick: its cause, and the node it
// concerns for its dependencies (for a LUN condition, the LUN's preferred
// owner).
type hold struct {
	cause string
	on    string
}

// holds collects the conditions that hold at a tick.
type holds map[condKey]hold

func (hs holds) add(k condKey, on, cause string) { hs[k] = hold{cause: cause, on: on} }

// explained drops the holds one of their dependencies explains: a
// dependency is a node condition holding for the node the hold is on.
// Dependencies are judged on the holds as collected, so the order of the
// map does not matter.
func (hs holds) explained() {
	var drop []condKey
	for k, h := range hs {
		w, _ := Lookup(k.cond)
		for _, d := range w.DependsOn {
			if _, ok := hs[condKey{cond: d, node: h.on}]; ok {
				drop = append(drop, k)
				break
			}
		}
	}
	for _, k := range drop {
		delete(hs, k)
	}
}

// evaluateReports checks every condition at a tick.
func (c *Core) evaluateReports() {
	hs := holds{}
	up := 0
	for _, n := range c.nodeNames {
		if c.nodes[n].up {
			up++
		} else {
			hs.add(condKey{cond: NodeOffline, node: n}, n, c.offlineCause(n))
		}
		if c.unstable(n) {
			hs.add(condKey{cond: NodeUnstable, node: n}, "", c.unstableCause(n))
		}
	}
	for _, name := range c.hostNames {
		h := c.hosts[name]
		reached := c.reachable(h)
		if why := c.hostTypeIncorrect(h); why != "" {
			hs.add(condKey{cond: HostTypeIncorrect, host: name}, "", why)
		}
		for _, n := range c.nodeNames {
			// A host that logged out of everything is away (shut down,
			// rebooting), and one still joining has not settled: neither
			// has lost redundancy.
			if h.everReached[n] && !contains(reached, n) && !h.away && !c.settling(h) {
				cause := fmt.Sprintf("host %s lost every path to node %s (no usable path)", name, n)
				if t, ok := h.departed[n]; ok {
					cause = fmt.Sprintf("host %s logged out of every path to node %s at tick %d (an orderly logout: "+
						"its paths were removed, not lost); its I/O to LUNs owned there is forwarded", name, n, t)
				}
				hs.add(condKey{cond: HostRedundancyLost, host: name, node: n}, n, cause)
			}
			if c.notDiscovering(h, n) {
				hs.add(condKey{cond: MultipathNotDiscovering, host: name, node: n}, n, c.notDiscoveringCause(h, n))
			}
		}
		for _, k := range sortedNexusKeys(h) {
			s := h.nexuses[k]
			if s.degraded && c.pathUp(s) {
				hs.add(condKey{cond: PathDegraded, host: name, node: s.n.Node, port: s.n.Port}, s.n.Node, fmt.Sprintf(
					"the path from host %s (%s) to node %s port %d answers %.1fx slower than its best (%.0f us), "+
						"more than %.0fx the slowdown of the node and of its other paths",
					name, s.n.Initiator, s.n.Node, s.n.Port, s.expansion, s.bestExch, c.cfg.PathDegradedFactor))
			}
		}
		// Only when the host is not even logged in elsewhere: a login
		// without discovery is the multipath report's business.
		if len(reached) == 1 && up > 1 && len(h.everReached) == 1 && c.connectedCount(h) == 1 {
			hs.add(condKey{cond: ConnectedToOneNodeOnly, host: name, node: reached[0]}, reached[0], fmt.Sprintf(
				"host %s has paths to node %s only; it has never reached the other nodes", name, reached[0]))
		}
	}
	for _, id := range c.lunIDs {
		l := c.luns[id]
		if l.displaced && l.owner != l.preferred {
			hs.add(condKey{cond: VolumeNotOnPreferred, lun: id}, l.preferred, fmt.Sprintf(
				"LUN %d is owned by node %s, not its preferred owner %s, after a failover", id, l.owner, l.preferred))
		}
		if l.damped >= 0 {
			hs.add(condKey{cond: PathFlapping, lun: id}, "", c.flapCause(l))
		}
		recent := l.changes[:0]
		for _, t := range l.changes {
			if c.now-t < c.cfg.ThrashWindow {
				recent = append(recent, t)
			}
		}
		l.changes = recent
		if len(recent) >= c.cfg.ThrashCount {
			hs.add(condKey{cond: OwnershipThrash, lun: id}, "", fmt.Sprintf(
				"LUN %d changed owner %d times in %s", id, len(recent), c.span(c.cfg.ThrashWindow)))
		}
	}
	hs.explained()
	c.debounce(hs)
}

// notDiscoveringCause says why a host does not use its paths to node, and
// what to do: a host that uses one node's paths only and probes none of
// the others runs no multipath stack; one that does use several nodes
// has a multipath configuration that leaves this node's paths out.
func (c *Core) notDiscoveringCause(h *host, node string) string {
	if r := c.reachable(h); len(r) <= 1 && h.obs.state != followYes {
		via := "no node"
		if len(r) == 1 {
			via = "node " + r[0] + " only"
		}
		return fmt.Sprintf("host %s is logged in to node %s but sends its I/O through %s, and nothing probes its paths "+
			"to node %s (no path checker): it runs no multipath stack (or one whose configuration leaves these paths "+
			"out), so it cannot use them and loses its LUNs when the path it uses fails; run multipathd (dm-multipath) "+
			"or the OS's multipath driver on it and check that it claims this array's paths, or log it out of the "+
			"paths it does not use", h.name, node, via, node)
	}
	return fmt.Sprintf("host %s is logged in to node %s but its multipath driver sends no probes or I/O there: check "+
		"its multipath configuration (blacklist, device section) for this array", h.name, node)
}

// span says how long n ticks are, in the unit that reads best.
func (c *Core) span(n int) string {
	us := float64(n) * c.cfg.TickMicros
	switch {
	case us >= 3600e6 && int64(us)%int64(3600e6) == 0:
		return fmt.Sprintf("%d h", int64(us/3600e6))
	case us >= 60e6 && int64(us)%int64(60e6) == 0:
		return fmt.Sprintf("%d min", int64(us/60e6))
	case us >= 1e6:
		return fmt.Sprintf("%g s", us/1e6)
	}
	return fmt.Sprintf("%g ms", us/1e3)
}

// flapCause says why a LUN is damped and whose paths flapped.
func (c *Core) flapCause(l *lun) string {
	cause := fmt.Sprintf("LUN %d failed over %d times within %s (excessive failovers) because hosts' paths to its "+
		"owner went away; it is held on node %s (no failback, no balance move) until its users have reached node %s "+
		"without a break for %s and it has not failed over for as long, or the report is cleared",
		l.id, l.dampedCount, c.span(c.cfg.DampWindow), l.owner, l.preferred, c.span(c.cfg.DampClear))
	var who []string
	for _, name := range l.flapHosts {
		h := c.hosts[name]
		if h == nil {
			continue
		}
		var ports []string
		for _, n := range c.nodeNames {
			for _, p := range h.lostPorts[n] {
				ports = append(ports, fmt.Sprintf("%s port %d", n, p))
			}
		}
		if len(ports) == 0 {
			ports = []string{"logged out"}
		}
		who = append(who, fmt.Sprintf("%s (%s)", name, strings.Join(ports, ", ")))
	}
	if len(who) > 0 {
		cause += "; the paths that flapped: " + strings.Join(who, "; ")
	}
	return cause
}

// offlineCause says what a node being offline does: where its LUNs went
// and which hosts lost their paths to it.
func (c *Core) offlineCause(n string) string {
	var moved, stuck []string
	for _, id := range c.lunIDs {
		l := c.luns[id]
		switch {
		case l.owner == n:
			stuck = append(stuck, fmt.Sprint(id))
		case c.nodes[n].movedOff[id]:
			moved = append(moved, fmt.Sprintf("%d->%s", id, l.owner))
		}
	}
	var hosts []string
	for _, name := range c.hostNames {
		if c.hosts[name].everReached[n] {
			hosts = append(hosts, name)
		}
	}
	cause := fmt.Sprintf("node %s is offline", n)
	if len(moved) > 0 {
		cause += "; its LUNs failed over (" + strings.Join(moved, ", ") + ")"
	}
	if len(stuck) > 0 {
		cause += "; LUNs still owned by it and unreachable: " + strings.Join(stuck, ", ")
	}
	if len(hosts) > 0 {
		cause += "; hosts that lost their paths to it: " + strings.Join(hosts, ", ")
	}
	return cause
}

// visibleAfter is how long a condition must hold (or have ended) before
// it is raised (or cleared): the configuration's per-condition value, else
// the entry's, else the alert delay.
func (c *Core) visibleAfter(cond Condition) int {
	if d, ok := c.cfg.Debounces[cond]; ok {
		return d
	}
	if w, ok := Lookup(cond); ok && w.TimeToVisible > 0 {
		return w.TimeToVisible
	}
	return c.cfg.Debounce
}

func (c *Core) debounce(holds holds) {
	keys := make([]condKey, 0, len(holds)+len(c.conds))
	seen := map[condKey]bool{}
	for k := range holds {
		keys, seen[k] = append(keys, k), true
	}
	for k := range c.conds {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return condLess(keys[i], keys[j]) })
	for _, k := range keys {
		h, holding := holds[k]
		cause := h.cause
		st := c.conds[k]
		if st == nil {
			st = &condState{since: -1}
			c.conds[k] = st
		}
		if holding {
			st.cause = cause
		}
		if holding == st.raised { // steady
			st.since = -1
			if !holding {
				delete(c.conds, k)
			}
			continue
		}
		if st.since < 0 {
			st.since = c.now
		}
		if c.now-st.since >= c.visibleAfter(k.cond) {
			st.raised, st.since = holding, -1
			c.ready.Reports = append(c.ready.Reports, ReportChange{Condition: k.cond, Host: k.host, Node: k.node,
				LUN: k.lun, Port: k.port, Raised: holding, Tick: c.now, Cause: st.cause})
			if !holding {
				delete(c.conds, k)
			}
		}
	}
}

func condLess(a, b condKey) bool {
	if a.cond != b.cond {
		return a.cond < b.cond
	}
	if a.host != b.host {
		return a.host < b.host
	}
	if a.node != b.node {
		return a.node < b.node
	}
	if a.lun != b.lun {
		return a.lun < b.lun
	}
	return a.port < b.port
}

// Active lists the raised conditions, in catalog order.
func (c *Core) Active() []ReportChange {
	var keys []condKey
	for k, st := range c.conds {
		if st.raised {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return condLess(keys[i], keys[j]) })
	out := make([]ReportChange, 0, len(keys))
	for _, k := range keys {
		out = append(out, ReportChange{Condition: k.cond, Host: k.host, Node: k.node, LUN: k.lun, Port: k.port,
			Raised: true, Cause: c.conds[k].cause})
	}
	return out
}

// connectedCount is how many nodes the host is logged in to.
func (c *Core) connectedCount(h *host) int {
	n := 0
	for _, name := range c.nodeNames {
		if c.connected(h, name) {
			n++
		}
	}
	return n
}
