package ownership

import "sort"

// Connectivity tracking (reference 002 "Connectivity Tracking"): per host
// and node, protocol connectivity (a logged-in nexus through an up port),
// multipath discovery (an RTPG or I/O seen on that nexus since it logged
// in; a host with the default "prio sysfs" sends RTPG only at attach and
// after a UA, so silence later is not loss) and I/O seen.

type host struct {
	name    string
	typ     HostType
	nexuses map[nexusKey]*nexusState
	// everReached: nodes this host has reached (for "redundancy lost").
	everReached map[string]bool
	// firstSeen: the tick of its first login (for Settle).
	firstSeen int
	// uses: the LUNs it sent RTPG or I/O for.
	uses map[uint64]bool
}

type nexusKey struct {
	initiator, isid string
	port            uint16
}

type nexusState struct {
	n          Nexus
	since      int
	discovered bool
}

func (c *Core) hostOf(name string) *host {
	h := c.hosts[name]
	if h == nil {
		h = &host{name: name, typ: HostType{Name: "default", TPGS: true}, nexuses: map[nexusKey]*nexusState{},
			everReached: map[string]bool{}, firstSeen: c.now, uses: map[uint64]bool{}}
		c.hosts[name] = h
		c.hostNames = append(c.hostNames, name)
		sort.Strings(c.hostNames)
	}
	return h
}

func keyOf(n Nexus) nexusKey { return nexusKey{n.Initiator, n.ISID, n.Port} }

func (c *Core) login(n Nexus) {
	h := c.hostOf(n.Host)
	if len(h.nexuses) == 0 && len(h.everReached) == 0 {
		h.firstSeen = c.now
	}
	h.nexuses[keyOf(n)] = &nexusState{n: n, since: c.now}
	c.gen++
}

func (c *Core) logout(n Nexus) {
	if h := c.hosts[n.Host]; h != nil {
		delete(h.nexuses, keyOf(n))
		c.gen++
	}
}

// discovered marks a nexus as in use by the host's multipath driver. A
// command on a nexus we missed the login of counts as a login too.
func (c *Core) discovered(n Nexus) {
	h := c.hostOf(n.Host)
	s := h.nexuses[keyOf(n)]
	if s == nil {
		s = &nexusState{n: n, since: c.now}
		h.nexuses[keyOf(n)] = s
	}
	if !s.discovered {
		s.discovered = true
		c.gen++
	}
}

// pathUp: the nexus's node and port are up.
func (c *Core) pathUp(s *nexusState) bool {
	nd := c.nodes[s.n.Node]
	return nd != nil && nd.up && !nd.portDown[s.n.Port]
}

// connected: the host has a logged-in nexus to node through an up port.
func (c *Core) connected(h *host, nodeName string) bool {
	for _, s := range h.nexuses {
		if s.n.Node == nodeName && c.pathUp(s) {
			return true
		}
	}
	return false
}

// reaches: the host can send I/O to node: connected and discovered.
func (c *Core) reaches(h *host, nodeName string) bool {
	for _, s := range h.nexuses {
		if s.n.Node == nodeName && s.discovered && c.pathUp(s) {
			return true
		}
	}
	return false
}

// notDiscovering: connected to node for at least the discovery window
// without any discovered nexus there (protocol-only: host configuration).
func (c *Core) notDiscovering(h *host, nodeName string) bool {
	oldest, any := c.now, false
	for _, s := range h.nexuses {
		if s.n.Node != nodeName || !c.pathUp(s) {
			continue
		}
		if s.discovered {
			return false
		}
		any = true
		oldest = min(oldest, s.since)
	}
	return any && c.now-oldest >= c.cfg.DiscoveryWindow
}

// reachable lists the nodes the host reaches, in name order (cached until
// connectivity next changes).
func (c *Core) reachable(h *host) []string { return c.reachEntry(h).nodes }

// reachableIdx is reachable as indexes into nodeNames.
func (c *Core) reachableIdx(h *host) []int { return c.reachEntry(h).idx }

func (c *Core) reachEntry(h *host) reachEntry {
	if e, ok := c.reach[h.name]; ok && e.gen == c.gen {
		return e
	}
	e := reachEntry{gen: c.gen}
	for i, n := range c.nodeNames {
		if c.reaches(h, n) {
			e.nodes = append(e.nodes, n)
			e.idx = append(e.idx, i)
		}
	}
	c.reach[h.name] = e
	return e
}

// HostState is a host's derived connectivity state.
type HostState struct {
	Host string
	// Reaches: nodes the host can send I/O to; ProtocolOnly: nodes it is
	// logged in to but whose paths its multipath driver does not use;
	// Lost: nodes it reached before and reaches no more.
	Reaches, ProtocolOnly, Lost []string
	// Full: it reaches every node that is up.
	Full bool
}

// HostStates reports every host's connectivity, in host order.
func (c *Core) HostStates() []HostState {
	var out []HostState
	for _, name := range c.hostNames {
		h := c.hosts[name]
		st := HostState{Host: name, Full: true}
		for _, n := range c.nodeNames {
			switch {
			case c.reaches(h, n):
				st.Reaches = append(st.Reaches, n)
			case c.connected(h, n):
				st.ProtocolOnly = append(st.ProtocolOnly, n)
			}
			if !c.reaches(h, n) {
				if h.everReached[n] {
					st.Lost = append(st.Lost, n)
				}
				if c.nodes[n].up {
					st.Full = false
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// allowed returns the up nodes every connected user of l reaches: the
// owners that strand no host. Users that reach no node at all do not
// constrain (nothing can help them), nor do hosts still settling. When no node suits everyone, it
// returns the nodes reached by the most users (ties: all of them) and
// false.
func (c *Core) allowed(l *lun) ([]string, bool) {
	if cap(c.scratch) < len(c.nodeNames) {
		c.scratch = make([]int, len(c.nodeNames))
	}
	count := c.scratch[:len(c.nodeNames)]
	clear(count)
	users := 0
	for name := range l.users { // counting: the order does not matter
		h := c.hosts[name]
		if c.now-h.firstSeen < c.cfg.Settle {
			continue
		}
		r := c.reachableIdx(h)
		if len(r) == 0 {
			continue
		}
		users++
		for _, i := range r {
			count[i]++
		}
	}
	up := c.upNodes()
	if users == 0 {
		return up, true
	}
	best, nBest := 0, 0
	for i, n := range c.nodeNames {
		if !c.nodes[n].up {
			continue
		}
		switch {
		case count[i] > best:
			best, nBest = count[i], 1
		case count[i] == best:
			nBest++
		}
	}
	if nBest == len(up) {
		return up, best == users
	}
	out := make([]string, 0, nBest)
	for i, n := range c.nodeNames {
		if c.nodes[n].up && count[i] == best {
			out = append(out, n)
		}
	}
	return out, best == users
}

// upNodes lists the up nodes in name order (cached until connectivity
// next changes; callers must not modify it).
func (c *Core) upNodes() []string {
	if c.upGen == c.gen && c.up != nil {
		return c.up
	}
	c.up = c.up[:0:0]
	for _, n := range c.nodeNames {
		if c.nodes[n].up {
			c.up = append(c.up, n)
		}
	}
	c.upGen = c.gen
	return c.up
}

// lunTPGS: every user of l follows ALUA, so the array may move it for
// balance (reference 002: host type configuration).
func (c *Core) lunTPGS(l *lun) bool {
	for name := range l.users {
		if h := c.hosts[name]; h != nil && !h.typ.TPGS {
			return false
		}
	}
	return true
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
