package ownership

import (
	"fmt"
	"sort"
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
func (c *Core) io(e IO) error {
	l, nd := c.luns[e.LUN], c.nodes[e.Node]
	if l == nil || nd == nil {
		return fmt.Errorf("ownership: I/O for unknown LUN %d or node %q", e.LUN, e.Node)
	}
	if e.Ticks < 1 || e.Ops < 0 || e.Bytes < 0 || e.RespTime < 0 {
		return fmt.Errorf("ownership: I/O sample for LUN %d has a bad interval or negative counts", e.LUN)
	}
	if l.pending == nil {
		l.pending = map[string]float64{}
	}
	l.pending[e.Node] += (e.Ops + e.Bytes/c.cfg.BytesPerWork) / float64(e.Ticks)
	if e.Ops == 0 {
		return nil
	}
	h := c.hostOf(e.Host)
	c.use(l, h)
	// I/O on a node proves the host's driver uses a path there.
	for _, s := range h.nexuses {
		if s.n.Node == e.Node && c.pathUp(s) && !s.discovered {
			s.discovered = true
			c.gen++
		}
	}
	// The owner serves every command, forwarded or not.
	if own := c.nodes[l.owner]; own != nil {
		own.pendOps += e.Ops
		own.pendRT += e.Ops * e.RespTime
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
	}
	for _, n := range c.nodeNames {
		nd := c.nodes[n]
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
	nodes := make([]string, 0, len(l.arrive))
	for n := range l.arrive {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	s := 0.0
	for _, n := range nodes {
		s += l.arrive[n]
	}
	return s
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
}

// NodeStats reports every node's workload, in node order.
func (c *Core) NodeStats() []NodeStat {
	loads := c.nodeLoads()
	var out []NodeStat
	for _, name := range c.nodeNames {
		nd := c.nodes[name]
		st := NodeStat{Node: name, Load: loads[name], Utilisation: loads[name] / nd.capacity}
		if nd.bestRT > 0 {
			st.Expansion = nd.rt / nd.bestRT
		}
		out = append(out, st)
	}
	return out
}

// stressed: some up node is busy enough, or slow enough relative to its
// best, that balancing could help. At low load a rebalance only costs.
func (c *Core) stressed() bool {
	for _, st := range c.NodeStats() {
		if !c.nodes[st.Node].up {
			continue
		}
		if st.Utilisation >= c.cfg.StressUtil || st.Expansion >= c.cfg.StressExpansion {
			return true
		}
	}
	return false
}
