package ownership

import (
	"fmt"
	"maps"
	"slices"
)

// Workload analysis (reference 002 "Automatic Load Balancing", reference
// 004 on expansion factors): rolling averages of the work arriving for
// each LUN at each node, node utilisation (the work a node serves as
// owner over its capacity), and the expansion factor, the response time
// over the best observed, which rises at the knee of the queueing curve
// sooner and more reliably than utilisation does.

// ewma folds a new sample into a rolling average: a*old + (1-a)*new.
func ewma(a, old, new float64) float64 { return a*old + (1-a)*new }

// io records one interval's I/O; Tick folds what arrived into the rolling
// averages, so a node that received nothing in a tick decays toward zero.
// Only media commands that completed GOOD are evidence that the host's
// driver uses the path and the LUN, and only once they have arrived in
// MediaTicks distinct ticks: a disk scan reads a block or two once on
// every path, with or without multipath.
func (c *Core) io(e IO) error {
	l, nd := c.luns[e.LUN], c.nodes[e.Node]
	if l == nil || nd == nil {
		return fmt.Errorf("ownership: I/O for unknown LUN %d or node %q", e.LUN, e.Node)
	}
	if e.Ticks < 1 || e.Ops < 0 || e.Bytes < 0 || e.RespTime < 0 || e.Media < 0 || e.Media > e.Ops {
		return fmt.Errorf("ownership: I/O sample for LUN %d has a bad interval or counts", e.LUN)
	}
	if l.pending == nil {
		l.pending = map[string]float64{}
	}
	w := (e.Ops + e.Bytes/c.cfg.BytesPerWork) / float64(e.Ticks)
	l.pending[e.Node] += w
	if e.Ops == 0 {
		return nil
	}
	h := c.hostOf(e.Host)
	// The owner serves every command, forwarded or not.
	if own := c.nodes[l.owner]; own != nil {
		own.pendOps += e.Ops
		own.pendRT += e.Ops * e.RespTime
	}
	if e.Media == 0 {
		return nil
	}
	hp := l.hostPending[e.Host]
	if hp == nil {
		if l.hostPending == nil {
			l.hostPending = map[string]map[string]float64{}
		}
		hp = map[string]float64{}
		l.hostPending[e.Host] = hp
	}
	hp[e.Node] += w
	if h.obs.mediaSince < 0 {
		h.obs.mediaSince = c.now
	}
	// Sustained media I/O to the LUN makes the host one of its users.
	if l.mediaSeen == nil {
		l.mediaSeen = map[string]evidence{}
	}
	l.mediaSeen[e.Host] = c.addEvidence(l.mediaSeen[e.Host], c.now)
	if c.proves(l.mediaSeen[e.Host]) {
		c.use(l, h)
	}
	// Sustained media I/O on a node proves the host's driver uses a path
	// there (the last interval of a path that has ended, or whose port
	// or node went down, proves nothing).
	if !c.connected(h, e.Node) {
		return nil
	}
	k := mediaKey{e.Node, e.LUN}
	h.media[k] = c.addEvidence(h.media[k], c.now)
	if c.usesNodeFor(h, e.Node, h.media[k]) {
		for _, k := range sortedNexusKeys(h) {
			s := h.nexuses[k]
			if s.n.Node == e.Node && c.pathUp(s) {
				s.mediaProven = true
			}
			switch {
			case s.n.Node != e.Node || !c.pathUp(s):
			case !s.discovered:
				c.discover(h, s)
				s.byMedia = !h.obs.multipath
			case s.byTraffic:
				// Proven by use: it stays while the session does (for a
				// host with no multipath stack shown, while it uses the
				// node or nothing else: expireProbes).
				s.byTraffic, s.byMedia = false, !h.obs.multipath
			}
		}
	}
	return nil
}

// foldWorkload ends a tick: every LUN's arrivals and every node's response
// time go into their rolling averages.
func (c *Core) foldWorkload() {
	a := c.cfg.Alpha
	for _, id := range c.lunIDs {
		l := c.luns[id]
		for _, n := range c.nodeNames {
			w := l.pending[n]
			if w == 0 && l.arrive[n] == 0 {
				continue
			}
			if v := ewma(a, l.arrive[n], w); v > 1e-9 {
				l.arrive[n] = v
			} else {
				delete(l.arrive, n)
			}
		}
		clear(l.pending)
		l.foldHosts(a)
	}
	for _, n := range c.nodeNames {
		nd := c.nodes[n]
		nd.ops = ewma(a, nd.ops, nd.pendOps)
		if nd.pendOps > 0 {
			rt := nd.pendRT / nd.pendOps
			if nd.rt == 0 {
				nd.rt = rt
			} else {
				nd.rt = ewma(a, nd.rt, rt)
			}
			if nd.pendOps >= c.cfg.MinExpansionOps && (nd.bestRT == 0 || nd.rt < nd.bestRT) {
				nd.bestRT = nd.rt
			}
		}
		nd.pendOps, nd.pendRT = 0, 0
	}
}

// load is a LUN's rolling work per tick, wherever it arrives, summed in
// node order: a float sum in map order differs in its last bits from run
// to run, and the planner's comparisons then do too (found by the
// whole-array simulation, whose seeds must replay exactly).
func (l *lun) load() float64 {
	s := 0.0
	for _, n := range slices.Sorted(maps.Keys(l.arrive)) {
		s += l.arrive[n]
	}
	return s
}

// foldHosts folds this tick's media work per host and node into the
// rolling per-host arrivals (where each user's I/O really arrives).
func (l *lun) foldHosts(a float64) {
	for host, arr := range l.hostArrive { // each entry on its own: order does not matter
		p := l.hostPending[host]
		for n, v := range arr {
			if nv := ewma(a, v, p[n]); nv > 1e-9 {
				arr[n] = nv
			} else {
				delete(arr, n)
			}
		}
		for n, w := range p {
			if _, ok := arr[n]; !ok {
				arr[n] = ewma(a, 0, w)
			}
		}
		if len(arr) == 0 {
			delete(l.hostArrive, host)
		}
	}
	for host, p := range l.hostPending {
		if l.hostArrive[host] == nil && len(p) > 0 {
			if l.hostArrive == nil {
				l.hostArrive = map[string]map[string]float64{}
			}
			arr := map[string]float64{}
			for n, w := range p {
				arr[n] = ewma(a, 0, w)
			}
			l.hostArrive[host] = arr
		}
	}
	clear(l.hostPending)
}

// hostLoad is host's rolling media work to l, wherever it arrives (summed
// in node order, for determinism).
func (l *lun) hostLoad(host string) float64 {
	arr := l.hostArrive[host]
	s := 0.0
	for _, n := range slices.Sorted(maps.Keys(arr)) {
		s += arr[n]
	}
	return s
}

// LUNLoad is a LUN's rolling work per tick, wherever it arrives (0 for
// an unknown LUN).
func (c *Core) LUNLoad(id uint64) float64 {
	if l := c.luns[id]; l != nil {
		return l.load()
	}
	return 0
}

// nodeLoads sums the load each node serves as owner.
func (c *Core) nodeLoads() map[string]float64 {
	out := map[string]float64{}
	for _, id := range c.lunIDs {
		l := c.luns[id]
		out[l.owner] += l.load()
	}
	return out
}

// NodeStat is one node's workload figures.
type NodeStat struct {
	Node        string
	Load        float64 // work per tick served as owner
	Utilisation float64 // Load / capacity
	Expansion   float64 // rolling response time / best observed (0: no data)
	Capacity    float64 // work units per tick
}

// NodeStats reports every node's workload, in node order.
func (c *Core) NodeStats() []NodeStat {
	loads := c.nodeLoads()
	var out []NodeStat
	for _, name := range c.nodeNames {
		nd := c.nodes[name]
		st := NodeStat{Node: name, Load: loads[name], Utilisation: loads[name] / nd.capacity, Capacity: nd.capacity}
		if nd.bestRT > 0 {
			st.Expansion = nd.rt / nd.bestRT
		}
		out = append(out, st)
	}
	return out
}

// stressedNow: some up node is busy enough, or slow enough relative to its
// best with enough load behind it, that balancing could help. At low load
// a rebalance only costs, and the expansion of a near-idle node (a cache
// miss among few commands) is noise, not stress.
func (c *Core) stressedNow() bool {
	for _, st := range c.NodeStats() {
		nd := c.nodes[st.Node]
		if !nd.up {
			continue
		}
		if st.Utilisation >= c.cfg.StressUtil {
			return true
		}
		if st.Utilisation >= c.cfg.StressFloor && st.Expansion >= c.cfg.StressExpansion && nd.ops >= c.cfg.MinExpansionOps {
			return true
		}
	}
	return false
}

// busy: some up node is at StressUtil (genuine stress, which an
// operator's recent move does not hold back).
func (c *Core) busy() bool {
	for _, st := range c.NodeStats() {
		if c.nodes[st.Node].up && st.Utilisation >= c.cfg.StressUtil {
			return true
		}
	}
	return false
}

// trackStress notes since when the array has been stressed.
func (c *Core) trackStress() {
	switch {
	case !c.stressedNow():
		c.stressSince = -1
	case c.stressSince < 0:
		c.stressSince = c.now
	}
}

// stressed: the array has been stressed for StressWindow, and no
// operator has moved a LUN within the cooldown unless a node is busy.
func (c *Core) stressed() bool {
	if c.stressSince < 0 || c.now-c.stressSince < c.cfg.StressWindow {
		return false
	}
	return c.now-c.lastOperator >= c.cfg.Cooldown || c.busy()
}
