package ownership

import (
	"fmt"
	"sort"
	"strings"
)

// Reports (DESIGN "Reports", reference 002 and its Recovery Guru
// screenshot): a catalog of typed conditions (CONVENTIONS 11), each raised
// once it has held for Debounce ticks and cleared once it has not held for
// Debounce ticks, so a blip neither raises nor clears anything.

// Condition names a report.
type Condition string

// The catalog.
const (
	HostRedundancyLost      Condition = "host-redundancy-lost"
	VolumeNotOnPreferred    Condition = "volume-not-on-preferred-path"
	MultipathNotDiscovering Condition = "multipath-not-discovering-paths"
	ConnectedToOneNodeOnly  Condition = "initiator-connected-to-one-node-only"
	OwnershipThrash         Condition = "ownership-thrash-detected"
	NodeOffline             Condition = "node-offline"
	PathDegraded            Condition = "path-degraded"
	// PathFlapping: a LUN failed over DampCount times within DampWindow
	// and is held on its reachable owner (excessive failovers).
	PathFlapping Condition = "path-flapping"
	// HostTypeIncorrect: a host does not behave as its declared type
	// says (it does not follow moves, or never reads RTPG).
	HostTypeIncorrect Condition = "host-type-incorrect"
)

// Conditions lists every condition the core raises.
var Conditions = []Condition{HostRedundancyLost, NodeOffline, VolumeNotOnPreferred, MultipathNotDiscovering,
	ConnectedToOneNodeOnly, PathDegraded, OwnershipThrash, PathFlapping, HostTypeIncorrect}

// Dependencies: a node that is offline explains everything else about it,
// so while Node Offline holds for a node, Host Redundancy Lost, Path
// Degraded, Multipath Not Discovering Paths and Initiator Connected To
// One Node Only are not raised for that node, and Volume Not On Preferred
// Path is not raised for the LUNs whose preferred owner it is. The Node
// Offline report names the hosts and LUNs it affects instead.

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

// evaluateReports checks every condition at a tick.
func (c *Core) evaluateReports() {
	holds := map[condKey]string{}
	up := 0
	for _, n := range c.nodeNames {
		if c.nodes[n].up {
			up++
		} else {
			holds[condKey{cond: NodeOffline, node: n}] = c.offlineCause(n)
		}
	}
	for _, name := range c.hostNames {
		h := c.hosts[name]
		reached := c.reachable(h)
		if why := c.hostTypeIncorrect(h); why != "" {
			holds[condKey{cond: HostTypeIncorrect, host: name}] = why
		}
		for _, n := range c.nodeNames {
			if !c.nodes[n].up {
				continue // Node Offline explains it
			}
			// A host that logged out of everything is away (shut down,
			// rebooting), and one still joining has not settled: neither
			// has lost redundancy.
			if h.everReached[n] && !contains(reached, n) && !h.away && !c.settling(h) {
				cause := fmt.Sprintf("host %s lost every path to node %s (no usable path)", name, n)
				if t, ok := h.departed[n]; ok {
					cause = fmt.Sprintf("host %s logged out of every path to node %s at tick %d (an orderly logout: "+
						"its paths were removed, not lost); its I/O to LUNs owned there is forwarded", name, n, t)
				}
				holds[condKey{cond: HostRedundancyLost, host: name, node: n}] = cause
			}
			if c.notDiscovering(h, n) {
				holds[condKey{cond: MultipathNotDiscovering, host: name, node: n}] = fmt.Sprintf(
					"host %s is logged in to node %s but its multipath driver sends no RTPG or I/O there: check its multipath configuration", name, n)
			}
		}
		for _, k := range sortedNexusKeys(h) {
			s := h.nexuses[k]
			if s.degraded && c.pathUp(s) {
				holds[condKey{cond: PathDegraded, host: name, node: s.n.Node, port: s.n.Port}] = fmt.Sprintf(
					"the path from host %s (%s) to node %s port %d answers %.1fx slower than its best (%.0f us), "+
						"more than %.0fx the slowdown of the node and of its other paths",
					name, s.n.Initiator, s.n.Node, s.n.Port, s.expansion, s.bestExch, c.cfg.PathDegradedFactor)
			}
		}
		// Only when the host is not even logged in elsewhere: a login
		// without discovery is the multipath report's business.
		if len(reached) == 1 && up > 1 && len(h.everReached) == 1 && c.connectedCount(h) == 1 {
			holds[condKey{cond: ConnectedToOneNodeOnly, host: name, node: reached[0]}] = fmt.Sprintf(
				"host %s has paths to node %s only; it has never reached the other nodes", name, reached[0])
		}
	}
	for _, id := range c.lunIDs {
		l := c.luns[id]
		if l.displaced && l.owner != l.preferred && c.nodes[l.preferred].up {
			holds[condKey{cond: VolumeNotOnPreferred, lun: id}] = fmt.Sprintf(
				"LUN %d is owned by node %s, not its preferred owner %s, after a failover", id, l.owner, l.preferred)
		}
		if l.damped >= 0 {
			holds[condKey{cond: PathFlapping, lun: id}] = c.flapCause(l)
		}
		recent := l.changes[:0]
		for _, t := range l.changes {
			if c.now-t < c.cfg.ThrashWindow {
				recent = append(recent, t)
			}
		}
		l.changes = recent
		if len(recent) >= c.cfg.ThrashCount {
			holds[condKey{cond: OwnershipThrash, lun: id}] = fmt.Sprintf(
				"LUN %d changed owner %d times in %s", id, len(recent), c.span(c.cfg.ThrashWindow))
		}
	}
	c.debounce(holds)
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

func (c *Core) debounce(holds map[condKey]string) {
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
		cause, holding := holds[k]
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
		if c.now-st.since >= c.cfg.Debounce {
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
