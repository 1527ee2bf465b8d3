package daemon

import (
	"errors"
	"sort"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// The management API's views: what an admin asks an array (status, nodes
// and ports, hosts, the connectivity matrix, per-path counters, latency),
// built from the array, the fabric and the ownership core.

// coreView is what the API reads from the ownership core in one visit.
type coreView struct {
	nodes     map[string]ownership.NodeStat
	hosts     map[string]ownership.HostState
	paths     map[pathKey]ownership.PathState
	behaviour map[string]ownership.HostBehaviour
	// tick and start turn the core's ticks into times.
	tick  time.Duration
	start time.Time
}

// at is the time of core tick t.
func (v *coreView) at(t int) time.Time { return v.start.Add(time.Duration(t) * v.tick) }

type pathKey struct {
	initiator, isid string
	port            uint16
}

// view reads the core (nil when it is not running).
func (d *Daemon) view() *coreView {
	if !d.ctl.Running() {
		return nil
	}
	started, tick := d.ctl.Clock()
	v := &coreView{nodes: map[string]ownership.NodeStat{}, hosts: map[string]ownership.HostState{},
		paths: map[pathKey]ownership.PathState{}, behaviour: map[string]ownership.HostBehaviour{}, tick: tick,
		start: started}
	err := d.ctl.Do(func(c *ownership.Core) {
		for _, hb := range c.HostBehaviours() {
			v.behaviour[hb.Host] = hb
		}
		for _, s := range c.NodeStats() {
			v.nodes[s.Node] = s
		}
		for _, h := range c.HostStates() {
			v.hosts[h.Host] = h
		}
		for _, p := range c.PathStates() {
			v.paths[pathKey{p.Nexus.Initiator, p.Nexus.ISID, p.Nexus.Port}] = p
		}
	})
	if err != nil {
		return nil
	}
	return v
}

func (d *Daemon) sessions() []fabric.PathStat {
	if d.fabric == nil {
		return nil
	}
	ps := d.fabric.PathStats()
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i].Nexus, ps[j].Nexus
		if a.InitiatorName != b.InitiatorName {
			return a.InitiatorName < b.InitiatorName
		}
		if a.TargetPort != b.TargetPort {
			return a.TargetPort < b.TargetPort
		}
		return a.InitiatorPort < b.InitiatorPort
	})
	return ps
}

func (d *Daemon) portUp(p *array.Port) bool {
	return p.Node.Up() && (d.fabric == nil || d.fabric.PortUp(p.RelativeID))
}

// Nodes reports every node with its ports.
func (d *Daemon) Nodes() []api.NodeInfo {
	return d.nodes(d.view(), d.sessions())
}

func (d *Daemon) nodes(v *coreView, sess []fabric.PathStat) []api.NodeInfo {
	perPort := map[uint16]int{}
	for _, s := range sess {
		perPort[s.Nexus.TargetPort]++
	}
	addrs := map[string]string{}
	if d.fabric != nil {
		for _, p := range d.Portals() {
			addrs[p.Port] = p.Addr
		}
	}
	var out []api.NodeInfo
	for _, n := range d.Array.Nodes {
		ni := api.NodeInfo{Name: n.Name, Up: n.Up(), GroupID: n.GroupID}
		for _, p := range n.Ports {
			addr := addrs[p.Name]
			if addr == "" {
				addr = p.Addr
			}
			ni.Ports = append(ni.Ports, api.PortInfo{Name: p.Name, Node: n.Name, Addr: addr, RelativeID: p.RelativeID,
				GroupID: n.GroupID, Up: d.portUp(p), Sessions: perPort[p.RelativeID]})
		}
		for _, l := range d.Array.LUNs {
			if l.Owner() == n {
				ni.Owned++
			}
			if l.Preferred == n {
				ni.Preferred++
			}
		}
		if v != nil {
			st := v.nodes[n.Name]
			ni.Load, ni.Utilisation, ni.Expansion = st.Load, st.Utilisation, st.Expansion
		}
		out = append(out, ni)
	}
	return out
}

// Ports lists every target port.
func (d *Daemon) Ports() []api.PortInfo {
	var out []api.PortInfo
	for _, n := range d.Nodes() {
		out = append(out, n.Ports...)
	}
	return out
}

// Hosts reports the declared hosts and the unknown initiators logged in.
func (d *Daemon) Hosts() []api.HostInfo {
	return d.hosts(d.view(), d.sessions())
}

func (d *Daemon) hosts(v *coreView, sess []fabric.PathStat) []api.HostInfo {
	cfg, lm := d.Array.Config(), d.Array.LUNMap()
	byName := map[string]*api.HostInfo{}
	var order []string
	add := func(h array.Host, declared bool) *api.HostInfo {
		if hi := byName[h.Name]; hi != nil {
			return hi
		}
		hi := &api.HostInfo{Name: h.Name, Declared: declared, Type: h.Type.Name, TypeDoc: h.Type.Doc,
			NonOwner: h.Type.NonOwner.String(), FollowsALUA: h.Type.TPGS, Initiators: h.Initiators,
			Nodes: map[string]string{}, Auth: authMode(cfg, h.Name), LUNs: map[uint64]uint64{}}
		for _, hc := range cfg.Hosts {
			if hc.Name == h.Name {
				hi.Group = hc.Group
			}
		}
		if len(h.Initiators) > 0 {
			hi.LUNs = lm.Sees(h.Initiators[0])
		}
		byName[h.Name] = hi
		order = append(order, h.Name)
		return hi
	}
	declared := map[string]bool{}
	for _, h := range d.Array.Hosts() {
		add(h, true)
		declared[h.Name] = true
	}
	for _, s := range sess {
		h := d.Array.HostOf(s.Nexus.InitiatorName)
		add(h, declared[h.Name]).Sessions++
	}
	sort.Strings(order)
	out := make([]api.HostInfo, 0, len(order))
	for _, name := range order {
		hi := byName[name]
		var st ownership.HostState
		hi.Observed = "unknown"
		if v != nil {
			st = v.hosts[name]
			if hb, ok := v.behaviour[name]; ok {
				switch hb.Follows {
				case "yes":
					hi.Observed = "follows"
				case "no":
					hi.Observed = "does not follow"
				}
				if hb.LastFollow >= 0 {
					t := v.at(hb.LastFollow)
					hi.LastFollow = &t
				}
				hi.RTPG, hi.ExtendedRTPG = hb.RTPG, hb.Extended
				hi.SuggestedType, hi.SuggestWhy = hb.Suggest, hb.Why
			}
		}
		for _, n := range d.Array.Nodes {
			state := "none"
			switch {
			case !n.Up():
				state = "node-offline"
			case contains(st.Reaches, n.Name):
				state = "reaches"
			case contains(st.ProtocolOnly, n.Name):
				state = "protocol-only"
			case contains(st.Lost, n.Name):
				state = "lost"
			case v == nil && hasSession(sess, d, name, n):
				state = "logged-in" // no core: logins are all that is known
			}
			hi.Nodes[n.Name] = state
		}
		out = append(out, *hi)
	}
	return out
}

func hasSession(sess []fabric.PathStat, d *Daemon, host string, n *array.Node) bool {
	for _, s := range sess {
		if p := d.Array.Port(s.Nexus.TargetPort); p != nil && p.Node == n && d.Array.HostOf(s.Nexus.InitiatorName).Name == host {
			return true
		}
	}
	return false
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// Status reports the array at a glance.
func (d *Daemon) Status() api.StatusInfo {
	v, sess := d.view(), d.sessions()
	cfg := d.Array.Config()
	st := api.StatusInfo{Target: cfg.Target, ALUA: cfg.ALUA, Ownership: d.ctl.Running(), Nodes: d.nodes(v, sess),
		LUNs: len(d.Array.LUNs), Sessions: len(sess), Reports: map[string]int{}, Time: d.now()}
	for _, l := range d.Array.LUNs {
		if l.Owner() != l.Preferred {
			st.LUNsOffPreferred++
		}
	}
	for _, h := range d.hosts(v, sess) {
		if h.Declared {
			st.Hosts++
		} else {
			st.Unknown++
		}
	}
	if rs, err := d.Reports(); err == nil {
		for _, r := range rs {
			st.Reports[string(r.Severity)]++
		}
	}
	st.Access, st.Mappings, st.UnknownInitiators = "open", len(cfg.Mappings), cfg.Access.UnknownInitiators
	if !d.Array.LUNMap().Open() {
		st.Access = "mapped"
	}
	if d.state != nil {
		st.State = d.state.Info()
	}
	return st
}

// Paths reports every logged-in path with its counters.
func (d *Daemon) Paths() []api.PathInfo {
	v, sess := d.view(), d.sessions()
	type agg struct {
		cmds, br, bw, nonOpt uint64
		busy                 time.Duration
		luns                 map[uint64]*api.PathLUN
	}
	per := map[scsi.Nexus]*agg{}
	for _, s := range d.SCSI.IOStats() {
		if s.Gone {
			continue
		}
		a := per[s.Nexus]
		if a == nil {
			a = &agg{luns: map[uint64]*api.PathLUN{}}
			per[s.Nexus] = a
		}
		a.cmds += s.Reads + s.Writes + s.Other
		a.br += s.BytesRead
		a.bw += s.BytesWritten
		a.nonOpt += s.NonOptimized
		a.busy += s.Busy
		a.luns[s.LUN] = &api.PathLUN{LUN: s.LUN, AvgMBps: float64(s.BytesRead + s.BytesWritten)}
	}
	d.ioMu.Lock()
	last := make(map[ioKey]api.IOInterval, len(d.lastIO))
	for k, iv := range d.lastIO {
		last[k] = *iv
	}
	d.ioMu.Unlock()
	now := d.now()
	var out []api.PathInfo
	for _, s := range sess {
		n := s.Nexus
		e := d.ctl.Event("", n)
		pi := api.PathInfo{Host: e.Host, Initiator: n.InitiatorName, ISID: e.ISID, Node: e.Node, RelativeID: n.TargetPort,
			Since: s.Since, Exchanges: s.Exchanges}
		port := d.Array.Port(n.TargetPort)
		if port != nil {
			pi.Port, pi.GroupID = port.Name, port.Node.GroupID
		}
		if s.Exchanges > 0 {
			pi.LatencyUs = float64(s.Exchange) / float64(s.Exchanges) / float64(time.Microsecond)
		}
		age := now.Sub(s.Since).Seconds()
		a := per[n]
		if a != nil {
			pi.Commands, pi.BytesRead, pi.BytesWritten, pi.NonOptimized = a.cmds, a.br, a.bw, a.nonOpt
			if a.cmds > 0 {
				pi.ServiceUs = float64(a.busy) / float64(a.cmds) / float64(time.Microsecond)
			}
			if age > 0 {
				pi.AvgMBps = float64(a.br+a.bw) / age / 1e6
			}
		}
		for _, l := range d.Array.LUNs {
			pl := api.PathLUN{LUN: l.ID}
			if port != nil {
				pl.State = l.State(n.InitiatorName, port.Node).String()
			}
			if a != nil && a.luns[l.ID] != nil && age > 0 {
				pl.AvgMBps = a.luns[l.ID].AvgMBps / age / 1e6
			}
			if iv, ok := last[ioKey{n, l.ID}]; ok && iv.Interval > 0 {
				pl.InUse = iv.Reads+iv.Writes > 0
				pl.MBps = float64(iv.BytesRead+iv.BytesWritten) / iv.Interval.Seconds() / 1e6
				pi.MBps += pl.MBps
			}
			pi.LUNs = append(pi.LUNs, pl)
		}
		if v != nil {
			ps := v.paths[pathKey{n.InitiatorName, e.ISID, n.TargetPort}]
			pi.Expansion, pi.Degraded, pi.Discovered = ps.Expansion, ps.Degraded, ps.Discovered
		}
		out = append(out, pi)
	}
	return out
}

// Latency reports every port's recent intervals.
func (d *Daemon) Latency() []api.PortLatency {
	m := d.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.PortLatency
	for _, p := range d.Array.Ports {
		pc := m.port(p.RelativeID)
		out = append(out, api.PortLatency{Node: p.Node.Name, Port: p.Name,
			Samples: append([]api.LatencySample{}, pc.history...)})
	}
	return out
}

// ClearReport is the operator clearing a latched report.
func (d *Daemon) ClearReport(req api.ClearRequest) error {
	return d.ctl.ClearReport(ownership.ClearReport{Condition: ownership.Condition(req.Condition), LUN: req.LUN, Host: req.Host})
}

func (d *Daemon) Rebalance() (api.RebalanceReply, error) {
	res, batches, err := d.ctl.Rebalance()
	if err != nil {
		return api.RebalanceReply{}, err
	}
	out := api.RebalanceReply{Moves: res.Moves, Reason: res.Reason, Batches: []api.BatchInfo{}}
	for _, bt := range batches {
		out.Batches = append(out.Batches, api.BatchInfo{LUNs: bt.LUNs, To: bt.To, Cause: string(bt.Cause)})
	}
	return out, nil
}

// SetNodeCapacity re-declares a node's capacity (work units per tick) to
// the running ownership core, e.g. after the lab has measured its load.
func (d *Daemon) SetNodeCapacity(node string, capacity float64) error {
	if !d.ctl.Running() {
		return errors.New("the ownership core is not running")
	}
	if d.Array.Node(node) == nil || capacity <= 0 {
		return errors.New("need a known node and a positive capacity")
	}
	d.ctl.Post(ownership.NodeDecl{Node: node, Capacity: capacity})
	if d.state != nil {
		d.state.SetCapacity(node, capacity)
	}
	return nil
}
