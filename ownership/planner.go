package ownership

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/aluad/aluad/pkg/alua"
)

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

// rebalanceNow answers a Rebalance event: shipping and balance at once,
// without waiting for the plan interval or for the array to be stressed;
// the ROI check still decides.
func (c *Core) rebalanceNow() {
	res := &RebalanceResult{}
	c.ready.Rebalance = res
	if c.cfg.Passive {
		res.Reason = "explicit ALUA: the hosts decide ownership (SET TARGET PORT GROUPS), the array never moves LUNs"
		return
	}
	if c.failbackPending() {
		res.Reason = "a failback is pending; it goes first"
		return
	}
	c.lastPlan = c.now
	moves := c.shipping()
	moving := map[*lun]bool{}
	for _, m := range moves {
		moving[m.l] = true
	}
	bal, why := c.balancePlan(moving)
	moves = append(moves, bal...)
	c.emit(moves)
	res.Moves = len(moves)
	if res.Moves == 0 {
		res.Reason = why
	}
}

// candidate is a LUN the balancer may move, with the nodes it may go to.
type candidate struct {
	l     *lun
	load  float64
	to    []string
	moved bool // already moved in this plan
}

// balance plans balance moves: greedily, each step makes the one move that
// most reduces the spread of utilisation (or two LUNs between the same
// nodes when together they close a gap no single one does; or, when no
// single move helps, a swap off the hottest node), until the spread is
// within tolerance. Each step is the largest useful one, which keeps the count
// low (checked against brute force in tests). The plan is then kept only
// if it passes the ROI check.
func (c *Core) balance(exclude map[*lun]bool) []move {
	moves, _ := c.balancePlan(exclude)
	return moves
}

// balancePlan is balance, with the reason when it moves nothing.
func (c *Core) balancePlan(exclude map[*lun]bool) ([]move, string) {
	loads := c.nodeLoads()
	var up []string
	for _, n := range c.nodeNames {
		if c.nodes[n].up {
			up = append(up, n)
		}
	}
	if len(up) < 2 {
		return nil, "fewer than two nodes are up"
	}
	byNode := map[string][]*candidate{}
	for _, id := range c.lunIDs {
		l := c.luns[id]
		if exclude[l] || !c.cooled(l) || !c.lunTPGS(l) || l.load() <= 0 || l.damped >= 0 || c.usedByFlapper(l) {
			continue // damped LUNs stay, and so do the LUNs of a host whose paths flap
		}
		ok, all := c.allowedStrict(l)
		if !all || len(ok) < 2 {
			continue
		}
		// Never onto a crash-looping node, nor away from where a user
		// that does not follow sends.
		to := c.stableNodes(ok)
		to = slices.DeleteFunc(to, func(n string) bool {
			return n != l.owner && (c.strandsNonFollower(l, n) || c.unpushableUser(l, n))
		})
		if len(to) == 0 || len(to) == 1 && to[0] == l.owner {
			continue
		}
		cd := &candidate{l: l, load: l.load(), to: to}
		byNode[l.owner] = append(byNode[l.owner], cd)
	}
	for _, cs := range byNode {
		sort.Slice(cs, func(i, j int) bool {
			if cs[i].load != cs[j].load {
				return cs[i].load < cs[j].load
			}
			return cs[i].l.id < cs[j].l.id
		})
	}
	util := func(n string) float64 { return loads[n] / c.nodes[n].capacity }
	before := c.spread(up, util)
	if c.balanced(up, util) {
		return nil, fmt.Sprintf("the nodes are balanced within the %.0f%% tolerance (utilisation %s)",
			c.cfg.Tolerance*100, c.utilString(up, util))
	}
	var moves []move
	for len(moves)+1 < c.cfg.MaxMovesPerPlan {
		if c.balanced(up, util) {
			break
		}
		sort.SliceStable(up, func(i, j int) bool { return util(up[i]) > util(up[j]) })
		hot := up[0]
		step := c.bestMove(up, byNode, loads)
		if step != nil && !c.pairBalanced(step, loads, up) {
			// No single LUN closes the gap: two that together do save
			// the moves a run of smaller steps would take.
			if pair := c.bestPair(step[0].from, step[0].to, byNode, loads); pair != nil && c.pairBalanced(pair, loads, up) {
				step = pair
			}
		}
		if step == nil {
			step = c.bestSwap(hot, byNode, loads)
		}
		if step == nil {
			break // nothing on the hottest node can go anywhere useful
		}
		for _, m := range step {
			cd := m.cd
			cd.moved = true
			loads[m.from] -= cd.load
			loads[m.to] += cd.load
			byNode[m.from] = remove(byNode[m.from], cd)
			moves = append(moves, move{cd.l, m.to, alua.CauseBalance})
		}
	}
	if len(moves) == 0 {
		return nil, fmt.Sprintf("no LUN may move off the busiest node (utilisation %s): connectivity, cooldown, "+
			"host types that do not follow ALUA, or no load", c.utilString(up, util))
	}
	if ok, gain, cost := c.roi(moves, before, c.spread(up, util)); !ok {
		return nil, fmt.Sprintf("the ROI check says no: moving %d LUNs gains %.0f work units over the horizon, "+
			"less than %.0f x their cost of %.0f", len(moves), gain, c.cfg.ROIFactor, cost)
	}
	return moves, ""
}

// utilString lists the up nodes' utilisation for a reason.
func (c *Core) utilString(up []string, util func(string) float64) string {
	names := append([]string(nil), up...)
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.0f%%", n, util(n)*100)
	}
	return strings.Join(parts, ", ")
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
	ok, _, _ := c.roi(moves, before, after)
	return ok
}

// roi is worthIt with its gain and cost. The cost counts the I/O the
// moves would leave forwarded: users that do not follow moves (by type,
// or as seen) keep sending where they send now, over the horizon; users
// not seen to follow yet may too, until the follow check has judged them
// and shipping has brought the LUN to them (FollowWindow + ShipWindow).
func (c *Core) roi(moves []move, before, after float64) (ok bool, gain, cost float64) {
	gain = (before - after) / 2 * c.cfg.ROIHorizon
	for _, m := range moves {
		stopTicks := c.cfg.stopMicros(m.l.media) / c.cfg.TickMicros
		known, unknown := c.forwardDelta(m.l, m.to)
		cost += m.l.load()*stopTicks + c.cfg.MoveCost + known*c.cfg.ROIHorizon +
			max(0, unknown)*float64(c.cfg.FollowWindow+c.cfg.ShipWindow)
	}
	return gain > c.cfg.ROIFactor*cost, gain, cost
}

// planStep is one LUN's move within a plan.
type planStep struct {
	cd       *candidate
	from, to string
}

func remove(cs []*candidate, x *candidate) []*candidate {
	for i, c := range cs {
		if c == x {
			return append(cs[:i:i], cs[i+1:]...)
		}
	}
	return cs
}

// bestMove finds the single move that most reduces the spread of
// utilisation around the mean (sum of squared deviations), from any node
// above the mean to any less utilised node the LUN may go to. Moving off
// the hottest node is not enough: when it has nothing left to move, the
// coldest node can still be filled from the others. For a pair of nodes
// the gain is a concave function of the load moved, best at the load
// that levels them, so only the candidates nearest that load (the lists
// are sorted by load) need a look.
func (c *Core) bestMove(up []string, byNode map[string][]*candidate, loads map[string]float64) []planStep {
	sum, capSum := 0.0, 0.0
	for _, n := range up {
		sum += loads[n]
		capSum += c.nodes[n].capacity
	}
	mean := sum / capSum
	var best *planStep
	bestGain := 1e-12
	for _, from := range up {
		capF := c.nodes[from].capacity
		uf := loads[from] / capF
		if uf <= mean {
			continue
		}
		cs := byNode[from]
		for _, to := range up {
			nt := c.nodes[to]
			ut := loads[to] / nt.capacity
			if to == from || ut >= uf {
				continue
			}
			ideal := (uf - ut) / (1/capF + 1/nt.capacity)
			i := sort.Search(len(cs), func(k int) bool { return cs[k].load >= ideal })
			// The nearest eligible candidate on each side of the ideal.
			for _, dir := range []int{-1, 1} {
				k := i
				if dir < 0 {
					k = i - 1
				}
				for steps := 0; k >= 0 && k < len(cs) && steps < 64; k, steps = k+dir, steps+1 {
					cd := cs[k]
					if cd.moved || !contains(cd.to, to) {
						continue
					}
					uf2, ut2 := uf-cd.load/capF, ut+cd.load/nt.capacity
					gain := sq(uf-mean) + sq(ut-mean) - sq(uf2-mean) - sq(ut2-mean)
					if gain > bestGain {
						best, bestGain = &planStep{cd, from, to}, gain
					}
					break
				}
			}
		}
	}
	if best == nil {
		return nil
	}
	return []planStep{*best}
}

func sq(x float64) float64 { return x * x }

// bestSwap finds, when no single move helps, the exchange of a LUN on the
// hottest node for a lighter one elsewhere that lowers the higher of the
// two nodes the most (two moves).
func (c *Core) bestSwap(hot string, byNode map[string][]*candidate, loads map[string]float64) []planStep {
	capHot := c.nodes[hot].capacity
	var best []planStep
	bestAfter := loads[hot] / capHot
	for _, x := range byNode[hot] {
		if x.moved {
			continue
		}
		for _, to := range x.to {
			if to == hot {
				continue
			}
			for _, y := range byNode[to] {
				if y.moved || y.load >= x.load || !contains(y.to, hot) {
					continue
				}
				d := x.load - y.load
				after := max((loads[hot]-d)/capHot, (loads[to]+d)/c.nodes[to].capacity)
				if after < bestAfter-1e-12 {
					best, bestAfter = []planStep{{x, hot, to}, {y, to, hot}}, after
				}
			}
		}
	}
	return best
}

// pairBalanced: after the steps, the two nodes involved are within
// tolerance of each other (relative to the mean utilisation of up nodes).
func (c *Core) pairBalanced(steps []planStep, loads map[string]float64, up []string) bool {
	from, to := steps[0].from, steps[0].to
	lf, lt := loads[from], loads[to]
	for _, s := range steps {
		lf -= s.cd.load
		lt += s.cd.load
	}
	sum, capSum := 0.0, 0.0
	for _, n := range up {
		sum += loads[n]
		capSum += c.nodes[n].capacity
	}
	mean := sum / capSum
	uf, ut := lf/c.nodes[from].capacity, lt/c.nodes[to].capacity
	return max(uf, ut)-min(uf, ut) <= c.cfg.Tolerance*mean
}

// bestPair finds two LUNs on hot that may go to dest and whose loads
// together come closest to half the gap (two pointers over the loads in
// order: O(n)).
func (c *Core) bestPair(hot, dest string, byNode map[string][]*candidate, loads map[string]float64) []planStep {
	var cs []*candidate // byNode lists are sorted by load
	for _, cd := range byNode[hot] {
		if !cd.moved && contains(cd.to, dest) {
			cs = append(cs, cd)
		}
	}
	if len(cs) < 2 {
		return nil
	}
	capH, capD := c.nodes[hot].capacity, c.nodes[dest].capacity
	target := (loads[hot]/capH - loads[dest]/capD) / (1/capH + 1/capD)
	i, j := 0, len(cs)-1
	bi, bj, bestErr := -1, -1, 0.0
	for i < j {
		sum := cs[i].load + cs[j].load
		err := sum - target
		if err < 0 {
			err = -err
		}
		if bi < 0 || err < bestErr {
			bi, bj, bestErr = i, j, err
		}
		if sum < target {
			i++
		} else {
			j--
		}
	}
	return []planStep{{cs[bi], hot, dest}, {cs[bj], hot, dest}}
}
