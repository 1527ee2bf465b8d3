package sim

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/units"
)

// topology is what a script's first lines declare:
//
//	nodes a:2,b:2                 nodes and their port counts
//	mirror on|off                 write-cache mirroring (default on)
//	lun 0 pref=a pages=16 bs=512 media=ram group=dg0
//	host h1 type=linux paths=1,2,3,4 luns=0,1 [kind=dmmp-alua]   (kinds.go; mp=none|sticky too)
type topology struct {
	nodes  []nodeSpec
	luns   []lunSpec
	hosts  []hostSpec
	mirror bool
}

type nodeSpec struct {
	name  string
	ports int
}

type lunSpec struct {
	id           uint64
	pref         string
	pages, bs    int
	media, group string
}

type hostSpec struct {
	name, typ string
	paths     []uint16
	luns      []uint64
	// kind is the host's multipath stack (kinds.go); mp=none is
	// nohandler, mp=sticky dmmp-defaults.
	kind string
}

func parseTopology(s Script) (*topology, error) {
	t := &topology{mirror: true}
	for _, e := range s {
		switch e.Verb {
		case "nodes":
			for _, f := range strings.Split(e.arg(0), ",") {
				name, ports, _ := strings.Cut(f, ":")
				n, err := strconv.Atoi(ports)
				if name == "" || err != nil || n < 1 || n > 8 {
					return nil, fmt.Errorf("nodes: bad node %q (name:ports)", f)
				}
				t.nodes = append(t.nodes, nodeSpec{name, n})
			}
		case "mirror":
			t.mirror = e.arg(0) != "off"
		case "lun":
			id, ok := e.argInt(0)
			if !ok || id < 0 {
				return nil, fmt.Errorf("lun: bad id %q", e.arg(0))
			}
			l := lunSpec{id: uint64(id), pref: e.Opts["pref"], pages: int(e.optInt("pages", 16)),
				bs: int(e.optInt("bs", 512)), media: e.Opts["media"], group: e.Opts["group"]}
			if l.media == "" {
				l.media = "ram"
			}
			if l.group == "" {
				l.group = "dg0"
			}
			if l.pages < 1 || l.pages > 4096 || (l.bs != 512 && l.bs != 4096) {
				return nil, fmt.Errorf("lun %d: pages 1-4096, bs 512 or 4096", id)
			}
			t.luns = append(t.luns, l)
		case "host":
			h := hostSpec{name: e.arg(0), typ: e.Opts["type"]}
			if h.typ == "" {
				h.typ = alua.HostDefault
			}
			kind, err := parseKind(h.name, e.Opts["kind"], e.Opts["mp"])
			if err != nil {
				return nil, err
			}
			h.kind = kind
			if _, ok := alua.HostTypes[h.typ]; !ok {
				return nil, fmt.Errorf("host %s: unknown type %q", h.name, h.typ)
			}
			for _, f := range splitList(e.Opts["paths"]) {
				n, err := strconv.ParseUint(f, 10, 16)
				if err != nil {
					return nil, fmt.Errorf("host %s: bad path %q", h.name, f)
				}
				h.paths = append(h.paths, uint16(n))
			}
			for _, f := range splitList(e.Opts["luns"]) {
				n, err := strconv.ParseUint(f, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("host %s: bad LUN %q", h.name, f)
				}
				h.luns = append(h.luns, n)
			}
			t.hosts = append(t.hosts, h)
		}
	}
	if len(t.nodes) < 2 || len(t.luns) == 0 {
		return nil, fmt.Errorf("a script needs a nodes line with two nodes or more and a lun line")
	}
	return t, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// config is the array configuration of the topology: small caches so
// that eviction and the dirty limit are reached, no interlink penalty
// (the link event sets one).
func (t *topology) config() array.Config {
	c := array.DefaultConfig()
	c.Target = "iqn.2026-11.org.aluad.sim:array"
	c.Data = "sim"
	c.Interlink.Penalty = 0
	c.Nodes = nil
	for _, n := range t.nodes {
		nc := array.NodeConfig{Name: n.name}
		for i := range n.ports {
			nc.Ports = append(nc.Ports, array.PortConfig{Name: fmt.Sprintf("%s%d", n.name, i), Addr: "127.0.0.1:0"})
		}
		c.Nodes = append(c.Nodes, nc)
	}
	c.LUNs = nil
	for _, l := range t.luns {
		c.LUNs = append(c.LUNs, array.LUNConfig{ID: l.id, Size: units.Size(l.pages * pageSize), Preferred: l.pref,
			Media: l.media, Group: l.group, BlockSize: l.bs})
	}
	for _, h := range t.hosts {
		c.Hosts = append(c.Hosts, array.HostConfig{Name: h.name, Type: h.typ, Initiators: []string{initiatorOf(h.name, h.kind)}})
	}
	mirror := t.mirror
	c.Cache.Mirror = &mirror
	c.Cache.Size = 1 << 20
	c.Cache.DirtyLimit = 32 * pageSize
	return c
}

// initiatorOf names a host's initiator: Windows' and ESXi's kinds bear
// their initiators' default names (the core reads their RTPGs as their
// stacks' by them), the rest the simulation's own.
func initiatorOf(host, kind string) string {
	switch {
	case strings.HasPrefix(kind, "win-"):
		return "iqn.1991-05.com.microsoft:" + host + ".sim.example"
	case strings.HasPrefix(kind, "vmw-"):
		return "iqn.1998-01.com.vmware:" + host + "-5f3a2c1b"
	}
	return "iqn.2026-11.org.aluad.sim:" + host
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
