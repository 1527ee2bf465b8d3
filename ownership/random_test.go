package ownership

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// Randomised checks against a simple model (CONVENTIONS 10): thousands of
// seeded fault sequences are driven through the core; after every step a
// naive model, built only from the raw events, checks the invariants.

// model is the naive bookkeeping: who is logged in where, what is up,
// who uses what, and the owners the core's batches set.
type model struct {
	nodes    []string
	nodeUp   map[string]bool
	portDown map[uint16]bool
	// paths[host][port] = discovered (present: logged in)
	paths    map[string]map[uint16]bool
	portNode map[uint16]string
	users    map[uint64]map[string]bool
	owner    map[uint64]string
	lastMove map[uint64]int
	now      int
	// joining hosts (a host that had no path logs in): they constrain
	// nothing until their paths have not changed for their window.
	joinAt, joinWin map[string]int
	everJoined      map[string]bool
	settle, window  int
	// had: the nodes each host has reached since it joined, at joinedAt:
	// a node it has not reached since, within a window of joining, is no
	// loss (it may still be logging in there).
	had      map[string]map[string]bool
	joinedAt map[string]int
	// loginAt: when each undiscovered path logged in (its discovery may
	// still come for a window).
	loginAt map[string]map[uint16]int
}

// pathChange notes a login, logout or discovery of h's, before it is
// applied (hadNone: h had no path before it).
func (m *model) pathChange(h string, hadNone bool) {
	switch {
	case hadNone:
		m.joinAt[h], m.joinWin[h] = m.now, m.settle
		m.joinedAt[h], m.had[h] = m.now, map[string]bool{}
		if m.everJoined[h] {
			m.joinWin[h] = max(m.settle, m.window)
		}
		m.everJoined[h] = true
	case m.settling(h):
		m.joinAt[h] = m.now
	}
}

func (m *model) settling(h string) bool {
	at, ok := m.joinAt[h]
	return ok && m.now-at < m.joinWin[h]
}

func (m *model) reaches(h, n string) bool {
	if !m.nodeUp[n] {
		return false
	}
	for p, disc := range m.paths[h] {
		if disc && m.portNode[p] == n && !m.portDown[p] {
			return true
		}
	}
	return false
}

// serves: n can serve h: h reaches it, or may still (it has not reached
// it since it joined, less than a window ago).
func (m *model) serves(h, n string) bool {
	if m.reaches(h, n) || m.nodeUp[n] && !m.had[h][n] && m.now-m.joinedAt[h] < m.window {
		return true
	}
	for p, disc := range m.paths[h] {
		if at, ok := m.loginAt[h][p]; ok && !disc && m.portNode[p] == n && m.nodeUp[n] && !m.portDown[p] && m.now-at < m.window {
			return true
		}
	}
	return false
}

// noteReach records what every host reaches now.
func (m *model) noteReach() {
	for h := range m.paths {
		for _, n := range m.nodes {
			if m.reaches(h, n) && m.had[h] != nil {
				m.had[h][n] = true
			}
		}
	}
}

// violation returns a description when LUN id's owner strands a user
// although some node would serve them all.
func (m *model) violation(id uint64) string {
	var users []string
	for h := range m.users[id] {
		if m.settling(h) {
			continue
		}
		for _, n := range m.nodes {
			if m.reaches(h, n) {
				users = append(users, h)
				break
			}
		}
	}
	sort.Strings(users)
	feasible := false
	for _, n := range m.nodes {
		all := m.nodeUp[n]
		for _, h := range users {
			all = all && m.serves(h, n)
		}
		feasible = feasible || all
	}
	if !feasible {
		return ""
	}
	for _, h := range users {
		if !m.serves(h, m.owner[id]) {
			return fmt.Sprintf("LUN %d: owner %s, but user %s does not reach it and some node serves every user", id, m.owner[id], h)
		}
	}
	return ""
}

type sim struct {
	t     *testing.T
	c     *Core
	m     *model
	r     *rand.Rand
	hosts []string
	luns  []uint64
	load  map[string]map[uint64]float64
	log   []string
}

func newSim(t *testing.T, seed int64, nNodes, nHosts, nLUNs int, cfg Config) *sim {
	c, err := New(cfg)
	require.NoError(t, err)
	s := &sim{t: t, c: c, r: rand.New(rand.NewSource(seed)), load: map[string]map[uint64]float64{},
		m: &model{nodeUp: map[string]bool{}, portDown: map[uint16]bool{}, paths: map[string]map[uint16]bool{},
			portNode: map[uint16]string{}, users: map[uint64]map[string]bool{}, owner: map[uint64]string{},
			lastMove: map[uint64]int{}, joinAt: map[string]int{}, joinWin: map[string]int{}, everJoined: map[string]bool{},
			had: map[string]map[string]bool{}, joinedAt: map[string]int{}, loginAt: map[string]map[uint16]int{},
			settle: cfg.Settle, window: cfg.DiscoveryWindow}}
	for i := 0; i < nNodes; i++ {
		n := string(rune('a' + i))
		s.m.nodes = append(s.m.nodes, n)
		s.m.nodeUp[n] = true
		s.step(NodeDecl{Node: n, Capacity: 10000})
	}
	for i := 0; i < nLUNs; i++ {
		id := uint64(i)
		p := s.m.nodes[i%nNodes]
		s.luns = append(s.luns, id)
		s.m.owner[id], s.m.lastMove[id] = p, never
		s.m.users[id] = map[string]bool{}
		s.step(LUNDecl{LUN: id, Preferred: p, Owner: p, Media: []string{"ram", "ssd", "hdd"}[i%3], Group: "dg0"})
	}
	for i := 0; i < nHosts; i++ {
		h := fmt.Sprintf("h%d", i)
		s.hosts = append(s.hosts, h)
		s.m.paths[h] = map[uint16]bool{}
		s.load[h] = map[uint64]float64{}
		s.step(HostDecl{Host: h, Type: alua.HostType{Name: "linux", TPGS: true}})
		for _, id := range s.luns {
			if s.r.Intn(2) == 0 {
				s.load[h][id] = float64(50 + s.r.Intn(400))
			}
		}
		for j := range s.m.nodes {
			s.pathUp(h, j)
		}
	}
	return s
}

func (s *sim) port(node int) uint16 { return uint16(1 + node) }

func (s *sim) nexus(h string, node int) Nexus {
	return Nexus{Host: h, Initiator: "iqn.2026-11.org.example:" + h, ISID: "1", Port: s.port(node), Node: s.m.nodes[node]}
}

// pathUp logs a host in on a node and, as its multipath driver would,
// sends RTPG for every LUN it uses.
func (s *sim) pathUp(h string, node int) {
	n := s.nexus(h, node)
	s.m.portNode[n.Port] = n.Node
	s.m.pathChange(h, len(s.m.paths[h]) == 0)
	s.m.paths[h][n.Port] = false
	s.step(Login{n})
	for id := range s.load[h] {
		s.m.paths[h][n.Port] = true
		s.m.users[id][h] = true
		s.step(RTPG{Nexus: n, LUN: id})
	}
	// Its multipath checker has probed the path by the next step.
	hs := s.c.hosts[h]
	if st := hs.nexuses[keyOf(n)]; st != nil && !st.discovered {
		s.c.discover(hs, st)
		s.c.reconcile(hs)
		s.apply()
	}
}

func (s *sim) step(e Event) {
	s.log = append(s.log, fmt.Sprintf("%T%+v", e, e))
	require.NoError(s.t, s.c.Step(e))
	s.apply()
	s.m.noteReach()
}

// apply takes the core's decisions into the model, checking the cooldown.
func (s *sim) apply() {
	rd := s.c.Ready()
	for _, b := range rd.Batches {
		for _, id := range b.LUNs {
			if b.Cause == alua.CauseBalance || b.Cause == alua.CauseShipping {
				if s.m.now-s.m.lastMove[id] < s.c.cfg.Cooldown {
					s.t.Fatalf("LUN %d moved for %s at %d, %d ticks after its last move (cooldown %d)\n%s", id, b.Cause,
						s.m.now, s.m.now-s.m.lastMove[id], s.c.cfg.Cooldown, s.tail())
				}
			}
			s.m.owner[id], s.m.lastMove[id] = b.To, s.m.now
		}
	}
	s.c.Advance()
}

func (s *sim) tail() string {
	from := max(0, len(s.log)-15)
	out := ""
	for _, l := range s.log[from:] {
		out += l + "\n"
	}
	return out
}

// tick sends one interval of I/O, routed as ALUA hosts route it, then ticks.
func (s *sim) tick() {
	for _, h := range s.hosts {
		// Its multipath checker probes every path it has discovered, one
		// command a tick (too few for Path Degraded to judge).
		ports := make([]int, 0, len(s.m.paths[h]))
		for p, disc := range s.m.paths[h] {
			if disc {
				ports = append(ports, int(p))
			}
		}
		sort.Ints(ports)
		for _, p := range ports {
			// Not logged: one a path a tick would push the faults out
			// of the last steps a failure prints.
			require.NoError(s.t, s.c.Step(PathLatency{Nexus: s.nexus(h, p-1), Ops: 1, Exchange: 100}))
			s.apply()
		}
		var reach []string
		for _, n := range s.m.nodes {
			if s.m.reaches(h, n) {
				reach = append(reach, n)
			}
		}
		if len(reach) == 0 {
			continue
		}
		ids := make([]uint64, 0, len(s.load[h]))
		for id := range s.load[h] {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			to := s.m.owner[id]
			if !contains(reach, to) {
				to = reach[0]
			}
			s.step(IO{Host: h, Node: to, LUN: id, Ops: s.load[h][id], Media: s.load[h][id], RespTime: 200, Ticks: 1})
		}
	}
	s.m.now++
	s.step(Tick{})
}

// check asserts the invariants after a step.
func (s *sim) check() {
	s.m.noteReach()
	for _, id := range s.luns {
		require.Equal(s.t, s.m.owner[id], s.c.Owner(id), "LUN %d: one owner, the one the batches set\n%s", id, s.tail())
		require.Contains(s.t, s.m.nodes, s.c.Owner(id))
		if v := s.m.violation(id); v != "" {
			for _, h := range s.hosts {
				ch := s.c.hosts[h]
				v += fmt.Sprintf("\ncore %s had=%v joinedAt=%d reach=%v; model had=%v joinedAt=%d now=%d/%d", h, ch.had, ch.joinedAt, s.c.reachable(ch), s.m.had[h], s.m.joinedAt[h], s.m.now, s.c.now)
			}
			s.t.Fatalf("%s\n%s", v, s.tail())
		}
	}
}

// randomFault applies one random fault or repair.
func (s *sim) randomFault() {
	h := s.hosts[s.r.Intn(len(s.hosts))]
	ni := s.r.Intn(len(s.m.nodes))
	n := s.m.nodes[ni]
	switch s.r.Intn(6) {
	case 0: // node down/up
		up := !s.m.nodeUp[n]
		s.m.nodeUp[n] = up
		s.step(NodeState{Node: n, Up: up})
	case 1: // port down/up
		p := s.port(ni)
		s.m.portDown[p] = !s.m.portDown[p]
		s.step(PortState{Node: n, Port: p, Up: !s.m.portDown[p]})
	case 2, 3: // a host loses its path to a node
		if _, ok := s.m.paths[h][s.port(ni)]; ok {
			s.m.pathChange(h, false)
			delete(s.m.paths[h], s.port(ni))
			s.step(Logout{Nexus: s.nexus(h, ni)})
		}
	case 4: // ... and gets it back
		if _, ok := s.m.paths[h][s.port(ni)]; !ok {
			s.pathUp(h, ni)
		}
	case 5: // a login the multipath driver does not discover (no RTPG)
		if _, ok := s.m.paths[h][s.port(ni)]; !ok {
			nx := s.nexus(h, ni)
			s.m.pathChange(h, len(s.m.paths[h]) == 0)
			s.m.paths[h][nx.Port] = false
			if s.m.loginAt[h] == nil {
				s.m.loginAt[h] = map[uint16]int{}
			}
			s.m.loginAt[h][nx.Port] = s.m.now
			s.step(Login{nx})
		}
	}
}

func TestRandomFaultSequences(t *testing.T) {
	seqs := 2000
	if testing.Short() {
		seqs = 200
	}
	cfg := DefaultConfig()
	cfg.Cooldown, cfg.PlanInterval, cfg.FailbackWindow, cfg.ShipWindow = 20, 3, 5, 10
	for seed := int64(0); seed < int64(seqs); seed++ {
		s := newSim(t, seed, 2+int(seed%2), 2+int(seed%3), 6, cfg)
		for i := 0; i < cfg.Settle; i++ {
			s.tick()
		}
		for i := 0; i < 120; i++ {
			if s.r.Intn(4) == 0 {
				s.randomFault()
			} else {
				s.tick()
			}
			s.check()
		}
	}
}

// After faults end and the load settles, the nodes are balanced within
// the tolerance (loads are fine-grained and high enough to stress).
func TestBalanceSettles(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Cooldown, cfg.PlanInterval = 20, 5
	for seed := int64(0); seed < 200; seed++ {
		c, err := New(cfg)
		require.NoError(t, err)
		r := rand.New(rand.NewSource(seed))
		nodes := 2 + int(seed%3)
		for i := 0; i < nodes; i++ {
			require.NoError(t, c.Step(NodeDecl{Node: string(rune('a' + i)), Capacity: 10000}))
		}
		require.NoError(t, c.Step(HostDecl{Host: "h", Type: alua.HostType{TPGS: true}}))
		// 40 LUNs, all preferred on node a: the worst start.
		loads := map[uint64]float64{}
		total := 0.0
		for i := 0; i < 40; i++ {
			id := uint64(i)
			require.NoError(t, c.Step(LUNDecl{LUN: id, Preferred: "a", Owner: "a", Media: "ram"}))
			loads[id] = float64(100 + r.Intn(400))
			total += loads[id]
		}
		for i := 0; i < nodes; i++ {
			n := Nexus{Host: "h", Initiator: "iqn.x.y:h", ISID: "1", Port: uint16(i + 1), Node: string(rune('a' + i))}
			establish(t, c, n, 0)
		}
		// Scale so that the balanced utilisation is 60-90%: stressed.
		scale := float64(nodes) * 10000 * (0.6 + 0.3*r.Float64()) / total
		for i := 0; i < 200; i++ {
			for id := uint64(0); id < 40; id++ {
				require.NoError(t, c.Step(IO{Host: "h", Node: c.Owner(id), LUN: id, Ops: loads[id] * scale, Media: loads[id] * scale, RespTime: 100, Ticks: 1}))
			}
			require.NoError(t, c.Step(Tick{}))
			c.Advance()
		}
		var up []string
		for _, n := range c.nodeNames {
			up = append(up, n)
		}
		loadsNow := c.nodeLoads()
		require.True(t, c.balanced(up, func(n string) float64 { return loadsNow[n] / 10000 }),
			"seed %d: not balanced: %+v", seed, c.NodeStats())
	}
}

// The explicit-host baseline thrashes under a partial fault; the implicit
// core, given the same topology, moves the LUN at most once.
func TestExplicitThrashesImplicitDoesNot(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		nodes := 2 + r.Intn(3)
		x := r.Intn(nodes)                     // the only node h1 reaches
		y := (x + 1 + r.Intn(nodes-1)) % nodes // the node h2's policy prefers
		run := func(passive bool) (changes int) {
			cfg := DefaultConfig()
			cfg.Passive = passive
			c, err := New(cfg)
			require.NoError(t, err)
			name := func(i int) string { return string(rune('a' + i)) }
			for i := 0; i < nodes; i++ {
				require.NoError(t, c.Step(NodeDecl{Node: name(i), Capacity: 10000}))
			}
			require.NoError(t, c.Step(LUNDecl{LUN: 0, Preferred: name(y), Owner: name(y), Media: "ram"}))
			path := func(h string, i int) {
				n := Nexus{Host: h, Initiator: "iqn.x.y:" + h, ISID: "1", Port: uint16(i + 1), Node: name(i)}
				establish(t, c, n, 0)
			}
			path("h1", x)
			for i := 0; i < nodes; i++ {
				path("h2", i)
			}
			for round := 0; round < 30; round++ {
				if passive {
					for _, oc := range c.ExplicitSTPGs(map[string]string{"h2": name(y)}) {
						require.NoError(t, c.Step(oc))
						changes++
					}
				}
				require.NoError(t, c.Step(Tick{}))
				changes += len(c.Ready().Batches)
				c.Advance()
			}
			return changes
		}
		explicit, implicit := run(true), run(false)
		require.GreaterOrEqual(t, explicit, 29, "seed %d: explicit hosts should fight over the LUN", seed)
		require.LessOrEqual(t, implicit, 1, "seed %d: the implicit core moved the LUN %d times", seed, implicit)
	}
}
