package ownership

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/aluad/aluad/pkg/alua"
)

// Scenario scripts (CONVENTIONS 6) in testdata/*.txt; regenerate with
// go test ./ownership -run TestScenarios -rewrite. Commands:
//
//	init [nodes=(a,b)] [capacity=N] [passive] [cooldown=N] [plan=N] [debounce=N] [failback=N] [discovery=N]
//	     [horizon=T] [movecost=W] [stresswindow=N] [floor=U] [failbackcooldown=N] [damp=N] [dampwindow=N]
//	     [dampclear=N] [follow=N] [ship=N] [settle=N] [visible=(COND:N,...)]
//	lun id=N preferred=X [owner=X] [media=M] [group=G]
//	luns n=N [media=M] [group=G]            LUNs 0..N-1, preferred alternating over the nodes
//	host name=H [type=legacy] [mp=none] [initiator=IQN]
//	                                        mp=none: no multipath stack; every other
//	                                        host's checker probes each of its logged-in
//	                                        paths every tick (TUR); initiator: its name
//	                                        (iqn.2026-11.org.example:H)
//	path host=H node=X [port=P] [extended] [luns=(..)]  login + RTPG (for every LUN,
//	                                        or those): an established path (its multipath
//	                                        stack has probed it for the window)
//	login ... silent                        a path the host's checker does not probe
//	probe host=H node=X [port=P]            its checker starts probing that path
//	login / logout / rtpg host=H node=X [port=P] [lun=N]
//	node-down X / node-up X / port-down node=X port=P / port-up ...
//	workload host=H luns=(..) ops=N [rt=US] [via=X]  standing I/O, sent every tick by an
//	                                        emulated ALUA host: to the owner if it
//	                                        reaches it, else to the first node it reaches
//	exchange host=H node=X [port=P] ops=N us=U  standing exchanges on one path, sent
//	                                        every tick (ops=0 stops them)
//	workload ... sticky                     the host keeps sending where it sent last
//	                                        while it reaches it (does not follow moves)
//	workload ... split                      Round Robin over two nodes' paths (half each)
//	                                        A linux-dmmp host's I/O on a non-owner path
//	                                        that reports STANDBY to it is refused
//	refused                                 per host, the I/O intervals refused so
//	init ... [handback=N] [crashcount=N] [crashwindow=N] [crashstable=N]
//	clear cond=C [lun=N] [host=H] [node=X]  (node: node-unstable)
//	io host=H node=X lun=N ops=N [media=M]  one interval of I/O (media=0: a disk scan)
//	logout ... [orderly]                    a Logout Request (else a lost connection)
//	operator-move lun=N to=X                an operator's move
//	clear cond=C [lun=N] [host=H]           the operator clears a latched report
//	behaviour                               what each host was seen to do
//	rebalance                               "rebalance now": prints what it decided
//	tick [n=N]                              prints decisions and reports as they happen
//	owners / hosts / stats / active / paths
//	explicit prefer=(H:X,...) rounds=N      the explicit-host baseline, N rounds
type harness struct {
	t        *testing.T
	c        *Core
	work     map[string]map[uint64]wl // host -> lun -> standing load
	exch     map[Nexus][2]float64     // nexus -> standing (ops, exchange us)
	ports    map[string]uint16        // node -> default port
	applied  int
	passive  bool
	isidNext int
	// nomp: hosts that run no multipath stack; every other host's
	// checker probes each of its logged-in paths every tick.
	nomp map[string]bool
	// silent: paths the host's checker does not probe (blacklisted).
	silent map[Nexus]bool
	// initiator: per host, its initiator name when the script gives one.
	initiator map[string]string
	// refused: per host, the intervals of I/O that met a STANDBY path
	// with no other to go to (the application's EIO).
	refused map[string]int
}

type wl struct {
	ops, rt float64
	via     string // the node the host sends to ("" = the owner, as ALUA says)
	// sticky: the host keeps sending where it sent last while it reaches
	// that node (dm-multipath with failback manual on ANO paths).
	sticky bool
	// split: Round Robin over every node's paths (Windows MSDSM plain
	// Round Robin): half through each of the first two nodes it reaches.
	split bool
	last  string
}

func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t}
		datadriven.RunTest(t, path, h.run)
	})
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	step := func(e Event) {
		if err := h.c.Step(e); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	switch d.Cmd {
	case "init":
		h.init(t, d)
		return "ok\n"
	case "lun":
		var id uint64
		var pref string
		d.ScanArgs(t, "id", &id)
		d.ScanArgs(t, "preferred", &pref)
		owner, media, group := arg(d, "owner", pref), arg(d, "media", "ram"), arg(d, "group", "dg0")
		step(LUNDecl{LUN: id, Preferred: pref, Owner: owner, Media: media, Group: group})
	case "luns":
		var n int
		d.ScanArgs(t, "n", &n)
		nodes := h.c.Nodes()
		for i := 0; i < n; i++ {
			p := nodes[i%len(nodes)]
			step(LUNDecl{LUN: uint64(i), Preferred: p, Owner: p, Media: arg(d, "media", "ram"), Group: arg(d, "group", "dg0")})
		}
	case "host":
		if arg(d, "mp", "") == "none" {
			h.nomp[arg(d, "name", "")] = true
		}
		if ini := arg(d, "initiator", ""); ini != "" {
			h.initiator[arg(d, "name", "")] = ini
		}
		tn := arg(d, "type", "linux")
		typ := alua.HostType{Name: tn, TPGS: tn != "legacy", NonOwner: standbyIf(tn == "linux-dmmp")}
		step(HostDecl{Host: arg(d, "name", ""), Type: typ})
	case "operator-move":
		var id uint64
		d.ScanArgs(t, "lun", &id)
		step(OwnerChanged{LUN: id, Owner: arg(d, "to", ""), Cause: alua.CauseManual})
	case "stpg-move": // a host's SET TARGET PORT GROUPS moved it (explicit ALUA)
		var id uint64
		d.ScanArgs(t, "lun", &id)
		step(OwnerChanged{LUN: id, Owner: arg(d, "to", ""), Cause: alua.CauseSTPG})
	case "clear":
		var id uint64
		if d.HasArg("lun") {
			d.ScanArgs(t, "lun", &id)
		}
		step(ClearReport{Condition: Condition(arg(d, "cond", "")), LUN: id, Host: arg(d, "host", ""), Node: arg(d, "node", "")})
	case "io":
		// one interval of I/O: ops commands, media of them media commands
		// that completed GOOD (a disk scan: media=0)
		var id uint64
		var ops, media float64
		d.ScanArgs(t, "lun", &id)
		d.ScanArgs(t, "ops", &ops)
		if d.HasArg("media") {
			d.ScanArgs(t, "media", &media)
		}
		step(IO{Host: arg(d, "host", ""), Node: arg(d, "node", ""), LUN: id, Ops: ops, Media: media, RespTime: 200, Ticks: 1})
	case "refused": // the I/O intervals each host could not send (STANDBY everywhere)
		for _, name := range h.c.hostNames {
			fmt.Fprintf(&b, "%s refused=%d\n", name, h.refused[name])
		}
		return b.String()
	case "behaviour":
		for _, hb := range h.c.HostBehaviours() {
			fmt.Fprintf(&b, "%s type=%s follows=%s last-follow=%d rtpg=%v extended=%v suggest=%q\n", hb.Host, hb.Type,
				hb.Follows, hb.LastFollow, hb.RTPG, hb.Extended, hb.Suggest)
		}
		return b.String()
	case "path":
		// An established path: the host's multipath stack has probed it
		// for the discovery window (as if its checker had run all along).
		n := h.nexus(t, d)
		step(Login{n})
		ids := h.c.LUNs()
		if d.HasArg("luns") {
			ids = nil
			for _, v := range argList(d, "luns") {
				id, _ := strconv.ParseUint(v, 10, 64)
				ids = append(ids, id)
			}
		}
		for _, id := range ids {
			step(RTPG{Nexus: n, LUN: id, Extended: d.HasArg("extended")})
		}
		hst := h.c.hosts[n.Host]
		if s := hst.nexuses[keyOf(n)]; s != nil && !s.discovered {
			h.c.discover(hst, s)
			h.c.reconcile(hst)
		}
	case "login":
		n := h.nexus(t, d)
		if d.HasArg("silent") {
			h.silent[n] = true
		}
		step(Login{n})
	case "probe": // the host's checker starts probing a silent path
		delete(h.silent, h.nexus(t, d))
	case "logout":
		step(Logout{Nexus: h.nexus(t, d), Orderly: d.HasArg("orderly")})
	case "rtpg":
		var id uint64
		d.ScanArgs(t, "lun", &id)
		step(RTPG{Nexus: h.nexus(t, d), LUN: id, Extended: d.HasArg("extended")})
	case "node-down", "node-up":
		step(NodeState{Node: d.CmdArgs[0].Key, Up: d.Cmd == "node-up"})
	case "port-down", "port-up":
		var p int
		d.ScanArgs(t, "port", &p)
		step(PortState{Node: arg(d, "node", ""), Port: uint16(p), Up: d.Cmd == "port-up"})
	case "workload":
		host := arg(d, "host", "")
		if h.work[host] == nil {
			h.work[host] = map[uint64]wl{}
		}
		var ops float64
		d.ScanArgs(t, "ops", &ops)
		rt, _ := strconv.ParseFloat(arg(d, "rt", "200"), 64)
		for _, v := range argList(d, "luns") {
			id, _ := strconv.ParseUint(v, 10, 64)
			if ops == 0 {
				delete(h.work[host], id)
			} else {
				h.work[host][id] = wl{ops: ops, rt: rt, via: arg(d, "via", ""), sticky: d.HasArg("sticky"), split: d.HasArg("split")}
			}
		}
	case "exchange":
		var ops, us float64
		d.ScanArgs(t, "ops", &ops)
		d.ScanArgs(t, "us", &us)
		if ops == 0 {
			delete(h.exch, h.nexus(t, d))
		} else {
			h.exch[h.nexus(t, d)] = [2]float64{ops, us}
		}
	case "rebalance":
		step(Rebalance{})
		if r := h.c.Ready().Rebalance; r != nil {
			fmt.Fprintf(&b, "rebalance: %d moves %s\n", r.Moves, r.Reason)
		}
	case "paths":
		for _, p := range h.c.PathStates() {
			fmt.Fprintf(&b, "%s %s port %d: expansion=%.1f best=%.0fus degraded=%v up=%v\n", p.Nexus.Host, p.Nexus.Node,
				p.Nexus.Port, p.Expansion, p.Best, p.Degraded, p.Up)
		}
		return b.String()
	case "tick":
		n, _ := strconv.Atoi(arg(d, "n", "1"))
		for i := 0; i < n; i++ {
			h.sendIO(step)
			step(Tick{})
			h.drain(&b)
		}
		return b.String()
	case "owners":
		for _, id := range h.c.LUNs() {
			fmt.Fprintf(&b, "%d:%s ", id, h.c.Owner(id))
		}
		b.WriteString("\n")
		return b.String()
	case "hosts":
		for _, s := range h.c.HostStates() {
			fmt.Fprintf(&b, "%s reaches=%v protocol-only=%v lost=%v full=%v\n", s.Host, s.Reaches, s.ProtocolOnly, s.Lost, s.Full)
		}
		return b.String()
	case "stats":
		for _, s := range h.c.NodeStats() {
			fmt.Fprintf(&b, "%s load=%.0f util=%.2f expansion=%.2f\n", s.Node, s.Load, s.Utilisation, s.Expansion)
		}
		fmt.Fprintf(&b, "stressed=%v\n", h.c.stressed())
		return b.String()
	case "active":
		for _, r := range h.c.Active() {
			fmt.Fprintf(&b, "%s\n", r.Cause)
		}
		return b.String()
	case "explicit":
		return h.explicit(t, d)
	default:
		t.Fatalf("%s: unknown command %s", d.Pos, d.Cmd)
	}
	h.drain(&b)
	return b.String()
}

func (h *harness) init(t *testing.T, d *datadriven.TestData) {
	cfg := DefaultConfig()
	for _, a := range d.CmdArgs {
		v, f := 0, 0.0
		if len(a.Vals) > 0 {
			v, _ = strconv.Atoi(a.Vals[0])
			f, _ = strconv.ParseFloat(a.Vals[0], 64)
		}
		switch a.Key {
		case "horizon":
			cfg.ROIHorizon = f
		case "movecost":
			cfg.MoveCost = f
		case "cooldown":
			cfg.Cooldown = v
		case "plan":
			cfg.PlanInterval = v
		case "debounce":
			cfg.Debounce = v
		case "visible": // visible=(node-offline:0,...): per-condition debounce
			cfg.Debounces = map[Condition]int{}
			for _, kv := range a.Vals {
				k, n, _ := strings.Cut(kv, ":")
				ticks, err := strconv.Atoi(n)
				if err != nil {
					t.Fatalf("visible=%s: want CONDITION:TICKS", kv)
				}
				cfg.Debounces[Condition(k)] = ticks
			}
		case "pathfactor":
			cfg.PathDegradedFactor = f
		case "failback":
			cfg.FailbackWindow = v
		case "discovery":
			cfg.DiscoveryWindow = v
		case "passive":
			cfg.Passive = true
		case "stresswindow":
			cfg.StressWindow = v
		case "floor":
			cfg.StressFloor = f
		case "failbackcooldown":
			cfg.FailbackCooldown = v
		case "damp":
			cfg.DampCount = v
		case "dampwindow":
			cfg.DampWindow = v
		case "dampclear":
			cfg.DampClear = v
		case "follow":
			cfg.FollowWindow = v
		case "ship":
			cfg.ShipWindow = v
		case "settle":
			cfg.Settle = v
		case "handback":
			cfg.HandbackHold = v
		case "crashcount":
			cfg.CrashCount = v
		case "crashwindow":
			cfg.CrashWindow = v
		case "crashstable":
			cfg.CrashStable = v
		case "nodes", "capacity":
		default:
			t.Fatalf("%s: unknown init argument %s", d.Pos, a.Key)
		}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.c, h.work, h.ports, h.passive = c, map[string]map[uint64]wl{}, map[string]uint16{}, cfg.Passive
	h.exch = map[Nexus][2]float64{}
	h.nomp, h.silent, h.refused, h.initiator = map[string]bool{}, map[Nexus]bool{}, map[string]int{}, map[string]string{}
	capacity, _ := strconv.ParseFloat(arg(d, "capacity", "10000"), 64)
	nodes := argList(d, "nodes")
	if len(nodes) == 0 {
		nodes = []string{"a", "b"}
	}
	for i, n := range nodes {
		if err := c.Step(NodeDecl{Node: n, Capacity: capacity}); err != nil {
			t.Fatal(err)
		}
		h.ports[n] = uint16(1 + 2*i) // the node's first port
	}
}

func (h *harness) nexus(t *testing.T, d *datadriven.TestData) Nexus {
	host, node := arg(d, "host", ""), arg(d, "node", "")
	port := h.ports[node]
	if p := arg(d, "port", ""); p != "" {
		v, _ := strconv.Atoi(p)
		port = uint16(v)
	}
	ini, ok := h.initiator[host]
	if !ok {
		ini = "iqn.2026-11.org.example:" + host
	}
	return Nexus{Host: host, Initiator: ini, ISID: fmt.Sprintf("%04x", port), Port: port, Node: node}
}

// sendIO sends one tick of the standing workload the way an ALUA host
// routes it: to the owner when it reaches it, else to a node it reaches.
func (h *harness) connected(hs *host, node string) bool { return h.c.connected(hs, node) }

func (h *harness) sendIO(step func(Event)) {
	nexuses := make([]Nexus, 0, len(h.exch))
	for n := range h.exch {
		nexuses = append(nexuses, n)
	}
	sort.Slice(nexuses, func(i, j int) bool {
		return nexuses[i].Host < nexuses[j].Host || nexuses[i].Host == nexuses[j].Host && nexuses[i].Port < nexuses[j].Port
	})
	for _, n := range nexuses {
		step(PathLatency{Nexus: n, Ops: h.exch[n][0], Exchange: h.exch[n][1]})
	}
	// The multipath hosts' path checkers: a TEST UNIT READY on every
	// logged-in path of theirs each tick (one command: too few for Path
	// Degraded to judge).
	for _, name := range h.c.hostNames {
		hs := h.c.hosts[name]
		if h.nomp[name] {
			continue
		}
		for _, k := range sortedNexusKeys(hs) {
			if n := hs.nexuses[k].n; h.exch[n] == ([2]float64{}) && !h.silent[n] {
				step(PathLatency{Nexus: n, Ops: 1, Exchange: 100})
			}
		}
	}
	hosts := make([]string, 0, len(h.work))
	for k := range h.work {
		hosts = append(hosts, k)
	}
	sort.Strings(hosts)
	for _, name := range hosts {
		hs := h.c.hosts[name]
		if hs == nil {
			continue
		}
		r := h.c.reachable(hs)
		if len(r) == 0 {
			// No path discovered yet: it sends through a session it has
			// (its SCSI layer does, multipath or not).
			for _, n := range h.c.Nodes() {
				if h.c.connected(hs, n) {
					r = append(r, n)
				}
			}
		}
		ids := make([]uint64, 0, len(h.work[name]))
		for id := range h.work[name] {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			w := h.work[name][id]
			if len(r) == 0 && w.via == "" {
				continue // no path it knows: nowhere to send
			}
			to := h.c.Owner(id)
			if w.via != "" && (len(r) == 0 || contains(r, w.via) || h.connected(hs, w.via)) {
				r = append(r[:len(r):len(r)], w.via) // a fixed path, discovered or not
				to = w.via
			}
			if w.sticky && w.last != "" && contains(r, w.last) {
				to = w.last
			}
			if !contains(r, to) {
				to = r[0]
			}
			w.last = to
			h.work[name][id] = w
			if w.split && len(r) > 1 {
				// Round Robin over every node's paths: half through each
				// of the first two it reaches.
				for _, n := range r[:2] {
					step(IO{Host: name, Node: n, LUN: id, Ops: w.ops / 2, Media: w.ops / 2, RespTime: w.rt, Ticks: 1})
				}
				continue
			}
			if own := h.c.Owner(id); to != own && hs.typ.Standby() && !hs.handoff[own] && h.c.connected(hs, own) {
				// A non-owner path that reports STANDBY to it: scsi_dh_alua
				// fails the I/O there at once (EIO if no other path).
				h.refused[name]++
				continue
			}
			step(IO{Host: name, Node: to, LUN: id, Ops: w.ops, Media: w.ops, RespTime: w.rt, Ticks: 1})
		}
	}
}

// drain prints and acknowledges the core's decisions.
func (h *harness) drain(b *strings.Builder) {
	rd := h.c.Ready()
	for _, bt := range rd.Batches {
		fmt.Fprintf(b, "t=%d move %v -> %s (%s, %s, stop %.0fus)\n", h.c.Now(), bt.LUNs, bt.To, bt.Cause, bt.Class, bt.Stop)
	}
	for _, r := range rd.Reports {
		fmt.Fprintf(b, "t=%d %s\n", h.c.Now(), r)
	}
	for _, ho := range rd.Handoffs {
		what := "STANDBY again"
		if ho.On {
			what = "handed off to ANO"
		}
		fmt.Fprintf(b, "t=%d %s: non-owner paths for LUNs of node %s %s\n", h.c.Now(), ho.Host, ho.Node, what)
	}
	h.c.Advance()
}

// explicit runs the explicit-host baseline: each round the hosts' STPGs
// change owners, then a tick passes with their I/O.
func (h *harness) explicit(t *testing.T, d *datadriven.TestData) string {
	prefer := map[string]string{}
	for _, v := range argList(d, "prefer") {
		k, n, _ := strings.Cut(v, ":")
		prefer[k] = n
	}
	rounds, _ := strconv.Atoi(arg(d, "rounds", "10"))
	var b strings.Builder
	changes := map[uint64]int{}
	for i := 0; i < rounds; i++ {
		for _, oc := range h.c.ExplicitSTPGs(prefer) {
			changes[oc.LUN]++
			if err := h.c.Step(oc); err != nil {
				t.Fatal(err)
			}
		}
		h.sendIO(func(e Event) { h.c.Step(e) })
		h.c.Step(Tick{})
		h.drain(&b)
	}
	for _, id := range h.c.LUNs() {
		if changes[id] > 0 {
			fmt.Fprintf(&b, "LUN %d: %d owner changes by STPG in %d rounds\n", id, changes[id], rounds)
		}
	}
	return b.String()
}

func arg(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			return a.Vals[0]
		}
	}
	return def
}

func argList(d *datadriven.TestData, key string) []string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return a.Vals
		}
	}
	return nil
}

// standbyIf is the non-owner state of a type that reports STANDBY or not.
func standbyIf(standby bool) alua.AccessState {
	if standby {
		return alua.Standby
	}
	return alua.ActiveNonOptimized
}
