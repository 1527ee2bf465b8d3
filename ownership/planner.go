package ownership

import "sort"

// The planner (reference 002 "Automatic Load Balancing" and "I/O Latency
// Spikes"): owners that balance the aggregate load across nodes with the
// fewest transitions, respecting connectivity (a LUN used by a host that
// reaches only node A stays on A; balance is restored by moving LUNs of
// hosts that reach every node), and only when an ROI check says the
// stall of the moves buys enough balance. Nothing is rebalanced when the
// array is not stressed.

// plan runs at the plan interval: shipping, then balance.
func (c *Core) plan() {
	moves := c.shipping()
	moving := map[*lun]bool{}
	for _, m := range moves {
		moving[m.l] = true
	}
	if c.stressed() {
		moves = append(moves, c.balance(moving)...)
	}
	c.emit(moves)
}

// candidate is a LUN the balancer may move, with the nodes it may go to.
type candidate struct {
	l    *lun
	load float64
	to   []string
}

// balance plans balance moves: greedily, each step takes the most
// utilised node and moves off it the one LUN whose load best closes the
// gap to a less utilised node it may go to, until the spread is within
// tolerance. Each move is the largest useful step, which keeps the count
// low (checked against brute force in tests). The plan is then kept only
// if it passes the ROI check.
func (c *Core) balance(exclude map[*lun]bool) []move {
	loads := c.nodeLoads()
	var up []string
	for _, n := range c.nodeNames {
		if c.nodes[n].up {
			up = append(up, n)
		}
	}
	if len(up) < 2 {
		return nil
	}
	var cands []*candidate
	byNode := map[string][]*candidate{}
	for _, id := range c.lunIDs {
		l := c.luns[id]
		if exclude[l] || !c.cooled(l) || !c.lunTPGS(l) || l.load() <= 0 {
			continue
		}
		ok, all := c.allowed(l)
		if !all || len(ok) < 2 {
			continue
		}
		cd := &candidate{l: l, load: l.load(), to: ok}
		cands = append(cands, cd)
		byNode[l.owner] = append(byNode[l.owner], cd)
	}
	util := func(n string) float64 { return loads[n] / c.nodes[n].capacity }
	before := c.spread(up, util)
	var moves []move
	moved := map[*lun]bool{}
	for len(moves) < c.cfg.MaxMovesPerPlan {
		if c.balanced(up, util) {
			break
		}
		sort.SliceStable(up, func(i, j int) bool { return util(up[i]) > util(up[j]) })
		hot := up[0]
		best, bestTo, bestAfter := (*candidate)(nil), "", util(hot)
		for _, cd := range byNode[hot] {
			if moved[cd.l] {
				continue
			}
			for _, to := range cd.to {
				if to == hot {
					continue
				}
				// The worse of the two nodes after the move: it must drop.
				after := max((loads[hot]-cd.load)/c.nodes[hot].capacity, (loads[to]+cd.load)/c.nodes[to].capacity)
				if after < bestAfter-1e-12 {
					best, bestTo, bestAfter = cd, to, after
				}
			}
		}
		if best == nil {
			break // nothing on the hottest node can go anywhere useful
		}
		moved[best.l] = true
		loads[hot] -= best.load
		loads[bestTo] += best.load
		byNode[bestTo] = append(byNode[bestTo], best)
		moves = append(moves, move{best.l, bestTo, CauseBalance})
	}
	if len(moves) == 0 || !c.worthIt(moves, before, c.spread(up, util)) {
		return nil
	}
	return moves
}

// spread is the difference between the most and least utilised node,
// scaled back to work per tick by the mean capacity.
func (c *Core) spread(up []string, util func(string) float64) float64 {
	hi, lo, capSum := -1.0, -1.0, 0.0
	for _, n := range up {
		u := util(n)
		if hi < 0 || u > hi {
			hi = u
		}
		if lo < 0 || u < lo {
			lo = u
		}
		capSum += c.nodes[n].capacity
	}
	return (hi - lo) * capSum / float64(len(up))
}

// balanced: the spread of utilisation is within tolerance of the mean.
func (c *Core) balanced(up []string, util func(string) float64) bool {
	sum, hi, lo := 0.0, -1.0, -1.0
	for _, n := range up {
		u := util(n)
		sum += u
		if hi < 0 || u > hi {
			hi = u
		}
		if lo < 0 || u < lo {
			lo = u
		}
	}
	mean := sum / float64(len(up))
	return mean == 0 || hi-lo <= c.cfg.Tolerance*mean
}

// worthIt is the ROI check: the gain (the imbalance removed, half the
// spread change, sustained over the horizon) must exceed ROIFactor times
// the cost (each moved LUN's load stalled for its class's stop time, plus
// a fixed cost per move for hosts redirecting).
func (c *Core) worthIt(moves []move, before, after float64) bool {
	gain := (before - after) / 2 * c.cfg.ROIHorizon
	cost := 0.0
	for _, m := range moves {
		stopTicks := c.cfg.stopMicros(m.l.media) / c.cfg.TickMicros
		cost += m.l.load()*stopTicks + c.cfg.MoveCost
	}
	return gain > c.cfg.ROIFactor*cost
}
