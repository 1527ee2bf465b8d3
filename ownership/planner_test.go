package ownership

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// instance builds a core with the given LUN loads and owners, every LUN
// movable (one host reaching every node, settled), for planner checks.
func instance(t testing.TB, nodes int, loads []float64, owners []int) *Core {
	cfg := DefaultConfig()
	cfg.ROIFactor = 0 // the planner alone: any gain is worth it
	c, err := New(cfg)
	require.NoError(t, err)
	for i := 0; i < nodes; i++ {
		require.NoError(t, c.Step(NodeDecl{Node: string(rune('a' + i)), Capacity: 10000}))
	}
	for i, w := range loads {
		o := string(rune('a' + owners[i]))
		require.NoError(t, c.Step(LUNDecl{LUN: uint64(i), Preferred: o, Owner: o, Media: "ram"}))
		c.luns[uint64(i)].arrive[o] = w
	}
	for i := 0; i < nodes; i++ {
		n := Nexus{Host: "h", Initiator: "iqn.x.y:h", ISID: "1", Port: uint16(i + 1), Node: string(rune('a' + i))}
		establish(t, c, n, 0)
	}
	c.now = c.cfg.Settle
	return c
}

// bruteMinMoves is the fewest moves that make the assignment balanced
// within tolerance, by trying every assignment (-1: impossible).
func bruteMinMoves(c *Core, nodes int, loads []float64, owners []int) int {
	best := -1
	assign := make([]int, len(loads))
	var rec func(i, moves int)
	up := c.Nodes()
	rec = func(i, moves int) {
		if best >= 0 && moves >= best {
			return
		}
		if i == len(loads) {
			per := make(map[string]float64, nodes)
			for j, a := range assign {
				per[up[a]] += loads[j]
			}
			if c.balanced(up, func(n string) float64 { return per[n] / 10000 }) {
				best = moves
			}
			return
		}
		for n := 0; n < nodes; n++ {
			assign[i] = n
			d := 0
			if n != owners[i] {
				d = 1
			}
			rec(i+1, moves+d)
		}
	}
	rec(0, 0)
	return best
}

// On small instances the greedy planner's move count is compared with
// the brute-force minimum.
func TestPlannerAgainstBruteForce(t *testing.T) {
	var equal, plusOne, worse, missed, feasible int
	for seed := int64(0); seed < 400; seed++ {
		r := rand.New(rand.NewSource(seed))
		nodes := 2 + r.Intn(2)
		n := 4 + r.Intn(4)
		loads := make([]float64, n)
		owners := make([]int, n)
		for i := range loads {
			loads[i] = float64(100 + r.Intn(2000))
			owners[i] = r.Intn(nodes)
			if r.Intn(3) > 0 {
				owners[i] = 0 // skewed onto node a
			}
		}
		c := instance(t, nodes, loads, owners)
		bf := bruteMinMoves(c, nodes, loads, owners)
		if bf <= 0 {
			continue // already balanced, or impossible
		}
		feasible++
		moves := c.balance(nil)
		per := c.nodeLoads()
		for _, m := range moves {
			per[m.l.owner] -= m.l.load()
			per[m.to] += m.l.load()
		}
		ok := c.balanced(c.Nodes(), func(n string) float64 { return per[n] / 10000 })
		switch {
		case !ok:
			missed++
			if missed <= 4 {
				t.Logf("seed %d: not balanced after %d moves (nodes %d, loads %v owners %v, brute force %d) -> %v", seed, len(moves), nodes, loads, owners, bf, per)
			}
		case len(moves) == bf:
			equal++
		case len(moves) == bf+1:
			plusOne++
		default:
			worse++
			t.Logf("seed %d: %d moves, brute force %d (loads %v owners %v)", seed, len(moves), bf, loads, owners)
		}
	}
	t.Logf("feasible %d: greedy = minimum %d, minimum+1 %d, worse %d, not balanced %d", feasible, equal, plusOne, worse, missed)
	// Measured on these 400 seeds (seeded, so the same every run): 180
	// feasible; the minimum in 154, one more in 5, two more in 2, and 19
	// left outside the 10% band where a perfect packing of 7 coarse LUNs
	// exists (large instances, with many small LUNs, do balance: see
	// TestBalanceSettles). These bounds hold that quality.
	require.Greater(t, feasible, 150)
	require.LessOrEqual(t, worse, feasible/50, "two or more moves above the minimum in at most 2%% of instances")
	require.GreaterOrEqual(t, float64(equal)/float64(feasible), 0.85, "the minimum in at least 85%% of instances")
	require.LessOrEqual(t, float64(missed)/float64(feasible), 0.12, "balanced whenever brute force can, but for at most 12%%")
}

func benchCore(b *testing.B, luns, nodes, hosts int) *Core {
	cfg := DefaultConfig()
	c, err := New(cfg)
	require.NoError(b, err)
	r := rand.New(rand.NewSource(1))
	for i := 0; i < nodes; i++ {
		require.NoError(b, c.Step(NodeDecl{Node: fmt.Sprintf("n%d", i), Capacity: 1e6}))
	}
	for i := 0; i < luns; i++ {
		o := "n0"
		if r.Intn(2) == 0 {
			o = fmt.Sprintf("n%d", r.Intn(nodes))
		}
		require.NoError(b, c.Step(LUNDecl{LUN: uint64(i), Preferred: o, Owner: o, Media: []string{"ram", "ssd", "hdd"}[i%3],
			Group: fmt.Sprintf("dg%d", i%4)}))
	}
	for h := 0; h < hosts; h++ {
		name := fmt.Sprintf("h%d", h)
		require.NoError(b, c.Step(HostDecl{Host: name, Type: alua.HostType{TPGS: true}}))
		for n := 0; n < nodes; n++ {
			nx := Nexus{Host: name, Initiator: "iqn.x.y:" + name, ISID: "1", Port: uint16(n + 1), Node: fmt.Sprintf("n%d", n)}
			// Each host uses 16 LUNs of its own.
			ids := make([]uint64, 16)
			for k := range ids {
				ids[k] = uint64((h*16 + k) % luns)
			}
			establish(b, c, nx, ids...)
		}
	}
	for i := 0; i < luns; i++ {
		l := c.luns[uint64(i)]
		l.arrive[l.owner] = float64(100 + r.Intn(2000))
	}
	c.now = 1000
	c.Advance()
	return c
}

// BenchmarkPlan: one rebalance plan for 4096 LUNs x 8 nodes x 256 hosts
// (the goal is <= 10 ms).
func BenchmarkPlan(b *testing.B) {
	c := benchCore(b, 4096, 8, 256)
	b.ResetTimer()
	var moves int
	for i := 0; i < b.N; i++ {
		moves = len(c.balance(nil))
	}
	b.ReportMetric(float64(moves), "moves")
}

// BenchmarkStepIO and BenchmarkStepTick: the cost of one I/O sample and of
// one tick (failover check, failback, reports) at that scale.
func BenchmarkStepIO(b *testing.B) {
	c := benchCore(b, 4096, 8, 256)
	e := IO{Host: "h1", Node: "n1", LUN: 17, Ops: 100, Media: 100, RespTime: 150, Ticks: 1}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Step(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStepTick(b *testing.B) {
	c := benchCore(b, 4096, 8, 256)
	c.cfg.PlanInterval = 1 << 30 // the plan is measured on its own
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Step(Tick{}); err != nil {
			b.Fatal(err)
		}
		c.Advance()
	}
}

func BenchmarkStepLogin(b *testing.B) {
	c := benchCore(b, 4096, 8, 256)
	nx := Nexus{Host: "h3", Initiator: "iqn.x.y:h3", ISID: "2", Port: 1, Node: "n0"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Step(Login{nx})
		c.Step(Logout{Nexus: nx})
		c.Advance()
	}
}
