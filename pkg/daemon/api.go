package daemon

import (
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/scsi"
)

// The management API's views: what an admin asks an array (status, nodes
// and ports, hosts, the connectivity matrix, per-path counters, latency),
// built from the array, the fabric and the ownership core.

// StatusInfo is GET /v1/status: the array at a glance.
type StatusInfo struct {
	Target    string     `json:"target"`
	ALUA      string     `json:"alua"`
	Ownership bool       `json:"ownership_core"`
	Nodes     []NodeInfo `json:"nodes"`
	LUNs      int        `json:"luns"`
	// LUNsOffPreferred counts LUNs not on their preferred owner.
	LUNsOffPreferred int            `json:"luns_off_preferred"`
	Hosts            int            `json:"hosts"`
	Unknown          int            `json:"unknown_initiators"`
	Sessions         int            `json:"sessions"`
	Reports          map[string]int `json:"reports"` // by severity
	Time             time.Time      `json:"time"`
	// Access: "open" (nothing mapped: every admitted initiator sees every
	// LUN) or "mapped"; UnknownInitiators the policy for undeclared ones.
	Access            string `json:"access"`
	Mappings          int    `json:"mappings"`
	UnknownInitiators string `json:"unknown_initiators_policy"`
	// State is the state directory's health (nil: no state kept).
	State *StateInfo `json:"state,omitempty"`
}

// NodeInfo is one storage node.
type NodeInfo struct {
	Name    string     `json:"name"`
	Up      bool       `json:"up"`
	GroupID uint16     `json:"group_id"`
	Ports   []PortInfo `json:"ports"`
	// Owned and Preferred count the LUNs the node owns and is home to.
	Owned     int `json:"owned"`
	Preferred int `json:"preferred"`
	// Load, Utilisation and Expansion are the ownership core's figures
	// (work per tick served as owner, over capacity, and the response
	// time over the best seen).
	Load        float64 `json:"load"`
	Utilisation float64 `json:"utilisation"`
	Expansion   float64 `json:"expansion"`
}

// PortInfo is one target port.
type PortInfo struct {
	Name       string `json:"name"`
	Node       string `json:"node"`
	Addr       string `json:"addr"`
	RelativeID uint16 `json:"relative_id"`
	GroupID    uint16 `json:"group_id"`
	Up         bool   `json:"up"`
	Sessions   int    `json:"sessions"`
}

// HostInfo is a host: declared in the config, or an unknown initiator
// that logged in (Declared false, type default).
type HostInfo struct {
	Name     string `json:"name"`
	Declared bool   `json:"declared"`
	Type     string `json:"type"`
	TypeDoc  string `json:"type_doc"`
	// NonOwner is the ALUA state the host sees on a non-owner group.
	NonOwner    string `json:"non_owner_state"`
	FollowsALUA bool   `json:"follows_alua"`
	// Observed is what the host was seen to do after the array's planned
	// moves of its LUNs: "follows", "does not follow" or "unknown" (no
	// move watched yet); LastFollow when it last followed one.
	Observed   string     `json:"observed"`
	LastFollow *time.Time `json:"last_follow,omitempty"`
	// RTPG: it has read REPORT TARGET PORT GROUPS (ExtendedRTPG: with the
	// extended header, as Linux scsi_dh_alua does).
	RTPG         bool `json:"rtpg"`
	ExtendedRTPG bool `json:"extended_rtpg"`
	// SuggestedType is the host type its behaviour, IQN naming authority
	// and command pattern fit, when that is not its type; SuggestWhy the
	// evidence. The array never changes a declared type by itself.
	SuggestedType string   `json:"suggested_type,omitempty"`
	SuggestWhy    string   `json:"suggest_why,omitempty"`
	Initiators    []string `json:"initiators"`
	Sessions      int      `json:"sessions"`
	// Group is the host group; Auth how it logs in (none, chap,
	// chap-mutual; never a secret); LUNs what it sees, host LUN -> LUN.
	Group string            `json:"group,omitempty"`
	Auth  string            `json:"auth"`
	LUNs  map[uint64]uint64 `json:"luns"`
	// Per node: reaches (paths in use), protocol-only (logged in, never
	// discovered), lost (reached before, not now), none, node-offline.
	Nodes map[string]string `json:"nodes"`
}

// PathInfo is one path (I_T nexus) with its counters: the per-path load
// view (reference 000's "ra mlm load show").
type PathInfo struct {
	Host       string    `json:"host"`
	Initiator  string    `json:"initiator"`
	ISID       string    `json:"isid"`
	Node       string    `json:"node"`
	Port       string    `json:"port"`
	RelativeID uint16    `json:"relative_id"`
	GroupID    uint16    `json:"group_id"`
	Since      time.Time `json:"since"`
	// Commands, bytes and the device server's mean service time (µs),
	// since login.
	Commands     uint64  `json:"commands"`
	BytesRead    uint64  `json:"bytes_read"`
	BytesWritten uint64  `json:"bytes_written"`
	NonOptimized uint64  `json:"non_optimized"`
	ServiceUs    float64 `json:"service_us"`
	// Exchanges and their mean latency (µs), fabric included.
	Exchanges uint64  `json:"exchanges"`
	LatencyUs float64 `json:"latency_us"`
	// MBps is the last stats interval's rate, AvgMBps the rate since login.
	MBps    float64 `json:"mbps"`
	AvgMBps float64 `json:"avg_mbps"`
	// Expansion is the core's latency expansion factor (0: not judged
	// yet); Degraded its Path Degraded verdict; Discovered: the host's
	// multipath driver uses the path (RTPG or I/O seen).
	Expansion  float64   `json:"expansion"`
	Degraded   bool      `json:"degraded"`
	Discovered bool      `json:"discovered"`
	LUNs       []PathLUN `json:"luns"`
}

// PathLUN is one LUN as seen on one path: its ALUA state for this host,
// whether the path carried its I/O in the last interval (INU, in use) or
// not (RDY), and its rates.
type PathLUN struct {
	LUN     uint64  `json:"lun"`
	State   string  `json:"state"`
	InUse   bool    `json:"in_use"`
	MBps    float64 `json:"mbps"`
	AvgMBps float64 `json:"avg_mbps"`
}

// PortLatency is GET /v1/latency: every port's recent intervals.
type PortLatency struct {
	Node    string          `json:"node"`
	Port    string          `json:"port"`
	Samples []LatencySample `json:"samples"`
}

// RebalanceReply is POST /v1/rebalance.
type RebalanceReply struct {
	Moves   int         `json:"moves"`
	Reason  string      `json:"reason,omitempty"`
	Batches []BatchInfo `json:"batches"`
}

// BatchInfo is one planned batch.
type BatchInfo struct {
	LUNs  []uint64 `json:"luns"`
	To    string   `json:"to"`
	Cause string   `json:"cause"`
}

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
	b := d.brain.Load()
	if b == nil {
		return nil
	}
	v := &coreView{nodes: map[string]ownership.NodeStat{}, hosts: map[string]ownership.HostState{},
		paths: map[pathKey]ownership.PathState{}, behaviour: map[string]ownership.HostBehaviour{}, tick: b.tick,
		start: b.started}
	err := b.do(func(c *ownership.Core) {
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

func (d *Daemon) sessions() []iscsi.PathStat {
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
func (d *Daemon) Nodes() []NodeInfo {
	return d.nodes(d.view(), d.sessions())
}

func (d *Daemon) nodes(v *coreView, sess []iscsi.PathStat) []NodeInfo {
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
	var out []NodeInfo
	for _, n := range d.Array.Nodes {
		ni := NodeInfo{Name: n.Name, Up: n.Up(), GroupID: n.GroupID}
		for _, p := range n.Ports {
			addr := addrs[p.Name]
			if addr == "" {
				addr = p.Addr
			}
			ni.Ports = append(ni.Ports, PortInfo{Name: p.Name, Node: n.Name, Addr: addr, RelativeID: p.RelativeID,
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
func (d *Daemon) Ports() []PortInfo {
	var out []PortInfo
	for _, n := range d.Nodes() {
		out = append(out, n.Ports...)
	}
	return out
}

// Hosts reports the declared hosts and the unknown initiators logged in.
func (d *Daemon) Hosts() []HostInfo {
	return d.hosts(d.view(), d.sessions())
}

func (d *Daemon) hosts(v *coreView, sess []iscsi.PathStat) []HostInfo {
	cfg, lm := d.Array.Config(), d.Array.LUNMap()
	byName := map[string]*HostInfo{}
	var order []string
	add := func(h array.Host, declared bool) *HostInfo {
		if hi := byName[h.Name]; hi != nil {
			return hi
		}
		hi := &HostInfo{Name: h.Name, Declared: declared, Type: h.Type.Name, TypeDoc: h.Type.Doc,
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
	out := make([]HostInfo, 0, len(order))
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

func hasSession(sess []iscsi.PathStat, d *Daemon, host string, n *array.Node) bool {
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
func (d *Daemon) Status() StatusInfo {
	v, sess := d.view(), d.sessions()
	cfg := d.Array.Config()
	st := StatusInfo{Target: cfg.Target, ALUA: cfg.ALUA, Ownership: d.brain.Load() != nil, Nodes: d.nodes(v, sess),
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
	if s := d.state; s != nil {
		s.mu.Lock()
		st.State = &StateInfo{Dir: s.dir, LoadError: s.loadErr, SaveError: s.saveErr, Saves: s.saves}
		s.mu.Unlock()
	}
	return st
}

// Paths reports every logged-in path with its counters.
func (d *Daemon) Paths() []PathInfo {
	v, sess := d.view(), d.sessions()
	type agg struct {
		cmds, br, bw, nonOpt uint64
		busy                 time.Duration
		luns                 map[uint64]*PathLUN
	}
	per := map[scsi.Nexus]*agg{}
	for _, s := range d.SCSI.IOStats() {
		if s.Gone {
			continue
		}
		a := per[s.Nexus]
		if a == nil {
			a = &agg{luns: map[uint64]*PathLUN{}}
			per[s.Nexus] = a
		}
		a.cmds += s.Reads + s.Writes + s.Other
		a.br += s.BytesRead
		a.bw += s.BytesWritten
		a.nonOpt += s.NonOptimized
		a.busy += s.Busy
		a.luns[s.LUN] = &PathLUN{LUN: s.LUN, AvgMBps: float64(s.BytesRead + s.BytesWritten)}
	}
	d.ioMu.Lock()
	last := make(map[ioKey]IOInterval, len(d.lastIO))
	for k, iv := range d.lastIO {
		last[k] = *iv
	}
	d.ioMu.Unlock()
	now := d.now()
	var out []PathInfo
	for _, s := range sess {
		n := s.Nexus
		e := d.nexusEvent("", n)
		pi := PathInfo{Host: e.Host, Initiator: n.InitiatorName, ISID: e.ISID, Node: e.Node, RelativeID: n.TargetPort,
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
			pl := PathLUN{LUN: l.ID}
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
func (d *Daemon) Latency() []PortLatency {
	m := d.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []PortLatency
	for _, p := range d.Array.Ports {
		pc := m.port(p.RelativeID)
		out = append(out, PortLatency{Node: p.Node.Name, Port: p.Name,
			Samples: append([]LatencySample{}, pc.history...)})
	}
	return out
}

// Rebalance asks the ownership core for a balance plan now.
// ClearRequest names a latched report to clear: path-flapping with its
// LUN, or host-type-incorrect with its host.
type ClearRequest struct {
	Condition string `json:"condition"`
	LUN       uint64 `json:"lun"`
	Host      string `json:"host"`
}

// ClearReport is the operator clearing a latched report.
func (d *Daemon) ClearReport(req ClearRequest) error {
	b := d.brain.Load()
	if b == nil {
		return errNoCore
	}
	var err error
	if derr := b.do(func(c *ownership.Core) {
		err = c.Step(ownership.ClearReport{Condition: ownership.Condition(req.Condition), LUN: req.LUN, Host: req.Host})
		b.apply(c.Ready())
		c.Advance()
	}); derr != nil {
		return derr
	}
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "ownership: "))
	}
	return nil
}

func (d *Daemon) Rebalance() (RebalanceReply, error) {
	b := d.brain.Load()
	if b == nil {
		return RebalanceReply{}, errNoCore
	}
	res, batches, err := b.rebalance()
	if err != nil {
		return RebalanceReply{}, err
	}
	out := RebalanceReply{Moves: res.Moves, Reason: res.Reason, Batches: []BatchInfo{}}
	for _, bt := range batches {
		out.Batches = append(out.Batches, BatchInfo{LUNs: bt.LUNs, To: bt.To, Cause: string(bt.Cause)})
	}
	return out, nil
}
