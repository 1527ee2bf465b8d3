package sim

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/aluad/aluad/pkg/alua"
)

// Generate makes the script of a seed: a topology of 2-4 nodes with 1-4
// ports each, 1-64 LUNs of mixed media, groups and block sizes, 1-16
// hosts of mixed types on random subsets of the ports and LUNs, then
// steps events drawn by weight, with events tagged to run in the middle of
// the next move after every event that may start one.
func Generate(seed uint64, steps int) Script {
	g := &gen{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), kind: rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908)),
		down: map[string]bool{}}
	g.topology()
	for _, h := range g.hosts {
		g.add(Event{Verb: "login", Args: []string{h.name}})
	}
	for len(g.s) < steps+g.top {
		e := g.event(false)
		g.add(e)
		if g.r.Float64() < tagChance(e.Verb) {
			for range 1 + g.r.IntN(3) {
				t := g.event(true)
				t.At = phases[g.r.IntN(len(phases))]
				if (e.Verb == "crash" || e.Verb == "panic" || e.Verb == "power-loss") && g.r.Float64() < 0.7 {
					t.At = "takeover" // the failover that follows a crash
				}
				if g.r.Float64() < 0.2 {
					t.AtLUN = int64(g.luns[g.r.IntN(len(g.luns))].id)
				}
				g.add(t)
			}
		}
	}
	return g.s
}

var phases = []string{"flush", "hold", "destage", "switch", "takeover"}

// tagChance is how often events tagged for the middle of a move follow
// an event of this kind (the more likely it starts a move, the more often).
func tagChance(verb string) float64 {
	switch verb {
	case "move":
		return 0.8
	case "crash", "panic", "power-loss":
		return 0.6
	case "tick", "restart", "port", "cable-pull", "cable-plug", "cut", "mend", "reboot", "logout", "login":
		return 0.25
	}
	return 0
}

type gen struct {
	r *rand.Rand
	// kind draws which failure a crash or port fault is, from a stream
	// of its own so that the rest of a seed's script stays as it was.
	kind  *rand.Rand
	s     Script
	top   int
	nodes []nodeSpec
	ports []uint16
	luns  []lunSpec
	hosts []hostSpec
	// down: the nodes the script failed and has not restarted yet.
	down map[string]bool
}

func (g *gen) add(e Event) {
	if e.AtLUN == 0 && e.At == "" {
		e.AtLUN = -1
	}
	switch e.Verb {
	case "crash", "panic", "power-loss":
		g.down[e.arg(0)] = true
	case "restart":
		delete(g.down, e.arg(0))
	}
	g.s = append(g.s, e)
}

// upPorts: the ports of the nodes the script has not failed so far (an
// estimate: an event tagged for a move may run later than it is listed).
func (g *gen) upPorts() []uint16 {
	var ps []uint16
	rel := uint16(1)
	for _, n := range g.nodes {
		for range n.ports {
			if !g.down[n.name] {
				ps = append(ps, rel)
			}
			rel++
		}
	}
	return ps
}

func (g *gen) pick(n int) int { return g.r.IntN(n) }

func (g *gen) topology() {
	nn := 2 + g.pick(3)
	var spec []string
	rel := uint16(1)
	for i := range nn {
		n := nodeSpec{name: string(rune('a' + i)), ports: 1 + g.pick(4)}
		g.nodes = append(g.nodes, n)
		spec = append(spec, fmt.Sprintf("%s:%d", n.name, n.ports))
		for range n.ports {
			g.ports = append(g.ports, rel)
			rel++
		}
	}
	g.add(Event{Verb: "nodes", Args: []string{strings.Join(spec, ",")}})
	if g.r.Float64() < 0.15 {
		g.add(Event{Verb: "mirror", Args: []string{"off"}})
	}
	nl := 1 + g.pick(16)
	if g.r.Float64() < 0.2 {
		nl = 1 + g.pick(64)
	}
	media := []string{"ram", "ram", "ssd", "hdd"}
	for i := range nl {
		l := lunSpec{id: uint64(i), pref: g.nodes[g.pick(nn)].name, pages: 2 + g.pick(15), bs: []int{512, 4096}[g.pick(2)],
			media: media[g.pick(len(media))], group: fmt.Sprintf("dg%d", g.pick(2))}
		g.luns = append(g.luns, l)
		g.add(Event{Verb: "lun", Args: []string{strconv.FormatUint(l.id, 10)}, Opts: map[string]string{
			"pref": l.pref, "pages": strconv.Itoa(l.pages), "bs": strconv.Itoa(l.bs), "media": l.media, "group": l.group}})
	}
	types := []string{"default", "linux", "linux-dmmp", "linux-standby", "windows", "vmware", "legacy"}
	for i := range 1 + g.pick(16) {
		h := hostSpec{name: fmt.Sprintf("h%d", i+1), typ: types[g.pick(len(types))]}
		for _, p := range g.ports {
			if g.r.Float64() < 0.8 {
				h.paths = append(h.paths, p)
			}
		}
		if len(h.paths) == 0 {
			h.paths = []uint16{g.ports[g.pick(len(g.ports))]}
		}
		for _, l := range g.luns {
			if g.r.Float64() < 0.5 {
				h.luns = append(h.luns, l.id)
			}
		}
		if len(h.luns) == 0 {
			h.luns = []uint64{g.luns[g.pick(len(g.luns))].id}
		}
		opts := map[string]string{"type": h.typ, "paths": joinNums(h.paths), "luns": joinNums(h.luns)}
		h.kind = drawKind(g.r.Float64(), h.typ)
		if h.kind != "auto" {
			opts["kind"] = h.kind
		}
		g.hosts = append(g.hosts, h)
		g.add(Event{Verb: "host", Args: []string{h.name}, Opts: opts})
	}
	g.top = len(g.s) + len(g.hosts)
}

// kindShares: how often each host kind is drawn (of one draw per host,
// as the older mp= was, so a seed's other draws stay as they were):
// one host in eight without multipath, as before, one in eight sticking
// to the path it uses, the rest spread over the stacks that follow or
// spread their I/O.
var kindShares = []struct {
	kind  string
	share float64
}{
	{"nohandler", 0.06}, {"dh-alua-nomp", 0.06}, {"dmmp-defaults", 0.06}, {"vmw-mru", 0.06},
	{"dmmp-alua", 0.10}, {"dmmp-followover", 0.10}, {"win-rr", 0.10}, {"win-rrws", 0.10}, {"vmw-rr", 0.10},
	{"auto", 0.26},
}

// drawKind maps a uniform draw to a host kind. A legacy-type host sees
// no ALUA: the kinds that stick to a path (which read the states to
// choose it) are drawn as auto for it, as mp=sticky was never drawn.
func drawKind(x float64, typ string) string {
	for _, k := range kindShares {
		if x < k.share {
			if typ == alua.HostLegacy && (k.kind == "dmmp-defaults" || k.kind == "vmw-mru") {
				return "auto"
			}
			return k.kind
		}
		x -= k.share
	}
	return "auto"
}

func joinNums[T uint16 | uint64](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatUint(uint64(x), 10)
	}
	return strings.Join(s, ",")
}

// weights of the event kinds (the tagged ones leave out the slow kinds).
var weights = []struct {
	verb   string
	w      float64
	tagged bool
}{
	{"read", 25, true}, {"write", 25, true}, {"ws", 3, true}, {"unmap", 3, true}, {"caw", 3, true},
	{"sync", 4, true}, {"rtpg", 2, true}, {"tick", 8, true}, {"destage", 4, true}, {"destager", 2, false},
	{"bg", 3, true}, {"crash", 1.5, true}, {"restart", 2, true}, {"port", 2, true}, {"cut", 1.5, true},
	{"mend", 1.5, true}, {"logout", 0.5, false}, {"login", 1, false}, {"reboot", 0.5, true}, {"scan", 1, false},
	{"move", 3, true}, {"capacity", 0.3, false}, {"media", 0.5, true}, {"link", 0.3, false},
}

func (g *gen) event(tagged bool) Event {
	total := 0.0
	for _, w := range weights {
		if !tagged || w.tagged {
			total += w.w
		}
	}
	x := g.r.Float64() * total
	verb := "tick"
	for _, w := range weights {
		if tagged && !w.tagged {
			continue
		}
		if x < w.w {
			verb = w.verb
			break
		}
		x -= w.w
	}
	e := Event{Verb: verb, AtLUN: -1}
	h := g.hosts[g.pick(len(g.hosts))]
	node := g.nodes[g.pick(len(g.nodes))].name
	set := func(k, v string) {
		if e.Opts == nil {
			e.Opts = map[string]string{}
		}
		e.Opts[k] = v
	}
	switch verb {
	case "read", "write", "ws", "unmap", "caw", "sync", "rtpg":
		lun := h.luns[g.pick(len(h.luns))]
		e.Args = []string{h.name, strconv.FormatUint(lun, 10)}
		if verb != "sync" && verb != "rtpg" {
			set("lba", strconv.Itoa(g.pick(48)))
			if verb != "caw" {
				set("n", strconv.Itoa(1+g.pick(16)))
			}
		}
		if verb == "write" && g.r.Float64() < 0.15 {
			set("fua", "1")
		}
	case "tick":
		// Long stretches of time only between moves: a move held for
		// seconds would itself keep other takeovers waiting.
		if !tagged && g.r.Float64() < 0.2 {
			set("n", strconv.Itoa(2+g.pick(12)))
		}
	case "destage":
		e.Args = []string{node}
		set("pages", strconv.Itoa(1+g.pick(32)))
	case "destager", "restart":
		e.Args = []string{node}
	case "crash":
		e.Args = []string{node}
		// A node failure: the target software (closed), a panic (reset)
		// or a power loss (silent until each host's ping times out).
		e.Verb = []string{"crash", "panic", "power-loss", "power-loss"}[g.kind.IntN(4)]
	case "port":
		// Ports of nodes the script has not failed: the array refuses
		// a port fault on a down node (its ports follow it).
		ports := g.ports
		if up := g.upPorts(); len(up) > 0 {
			ports = up
		}
		e.Args = []string{strconv.Itoa(int(ports[g.pick(len(ports))])), []string{"down", "up", "up"}[g.pick(3)]}
		// A port fault: disabled (down/up) or its cable (pull/plug).
		if g.kind.IntN(3) == 0 {
			e.Verb, e.Args = map[string]string{"down": "cable-pull", "up": "cable-plug"}[e.Args[1]], e.Args[:1]
		}
	case "cut", "mend":
		e.Args = []string{h.name, strconv.Itoa(int(h.paths[g.pick(len(h.paths))]))}
	case "logout", "login", "reboot", "scan":
		e.Args = []string{h.name}
	case "move":
		var ids []string
		for range 1 + g.pick(3) {
			ids = append(ids, strconv.FormatUint(g.luns[g.pick(len(g.luns))].id, 10))
		}
		e.Args = []string{strings.Join(ids, ","), node}
	case "capacity":
		e.Args = []string{node, strconv.Itoa(5 + g.pick(2000))}
	case "media":
		e.Args = []string{strconv.FormatUint(g.luns[g.pick(len(g.luns))].id, 10)}
		set("fail", []string{"none", "none", "write", "read", "sync"}[g.pick(5)])
		set("delay", []string{"0s", "0s", "200us", "5ms"}[g.pick(4)])
	case "link":
		e.Args = []string{[]string{"0s", "50us", "2ms"}[g.pick(3)]}
	}
	return e
}
