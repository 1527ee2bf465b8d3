package mgmt

// The management API's views: what an admin asks an array (status, nodes
// and ports, hosts, the connectivity matrix, per-path counters, latency,
// reports), built from the array, the front end and the ownership core.

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/reports"
	"github.com/aluad/aluad/pkg/scsi"
)

// View builds the API's views from the running array.
type View struct {
	Array   *array.Array
	SCSI    *scsi.Server
	Control *control.Path
	// FrontEnd is the running front end (nil before it starts).
	FrontEnd func() FrontEnd
	// Portals are the bound portals.
	Portals func() []api.PortalInfo
	// Events is the feed after seq, and how many it no longer holds.
	Events func(seq uint64) ([]api.Event, uint64)
	// State is the state directory's health (nil: none kept).
	State   func() *api.StateInfo
	Metrics *Metrics
	Now     func() time.Time
	// Controller is the node this process serves when the controllers
	// run as processes (empty: the embedded array, every node here).
	Controller string
	// traceReaders: when each reader of the trace last read it.
	traceMu      sync.Mutex
	traceReaders map[string]time.Time
}

// FrontEnd is what the views read of the front end.
type FrontEnd interface {
	PathStats() []fabric.PathStat
	PortUp(port uint16) bool
}

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
func (vw *View) view() *coreView {
	if !vw.Control.Running() {
		return nil
	}
	started, tick := vw.Control.Clock()
	v := &coreView{nodes: map[string]ownership.NodeStat{}, hosts: map[string]ownership.HostState{},
		paths: map[pathKey]ownership.PathState{}, behaviour: map[string]ownership.HostBehaviour{}, tick: tick,
		start: started}
	err := vw.Control.Do(func(c *ownership.Core) {
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

func (vw *View) sessions() []fabric.PathStat {
	fe := vw.FrontEnd()
	if fe == nil {
		return nil
	}
	ps := fe.PathStats()
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

func (vw *View) portUp(p *array.Port) bool {
	fe := vw.FrontEnd()
	return p.Node.Up() && (fe == nil || fe.PortUp(p.RelativeID))
}

// Nodes reports every node with its ports.
func (vw *View) Nodes() []api.NodeInfo {
	return vw.nodes(vw.view(), vw.sessions())
}

func (vw *View) nodes(v *coreView, sess []fabric.PathStat) []api.NodeInfo {
	perPort := map[uint16]int{}
	for _, s := range sess {
		perPort[s.Nexus.TargetPort]++
	}
	addrs := map[string]string{}
	if vw.FrontEnd() != nil {
		for _, p := range vw.Portals() {
			addrs[p.Port] = p.Addr
		}
	}
	var out []api.NodeInfo
	for _, n := range vw.Array.Nodes {
		ni := api.NodeInfo{Name: n.Name, Up: n.Up(), GroupID: n.GroupID}
		for _, p := range n.Ports {
			addr := addrs[p.Name]
			if addr == "" {
				addr = p.Addr
			}
			ni.Ports = append(ni.Ports, api.PortInfo{Name: p.Name, Node: n.Name, Addr: addr, RelativeID: p.RelativeID,
				GroupID: n.GroupID, Up: vw.portUp(p), Sessions: perPort[p.RelativeID]})
		}
		for _, l := range vw.Array.LUNs {
			if l.Owner() == n {
				ni.Owned++
			}
			if l.Preferred == n {
				ni.Preferred++
			}
		}
		if v != nil {
			st := v.nodes[n.Name]
			ni.Load, ni.Utilisation, ni.Expansion, ni.Capacity = st.Load, st.Utilisation, st.Expansion, st.Capacity
		}
		out = append(out, ni)
	}
	return out
}

// Ports lists every target port.
func (vw *View) Ports() []api.PortInfo {
	var out []api.PortInfo
	for _, n := range vw.Nodes() {
		out = append(out, n.Ports...)
	}
	return out
}

// Hosts reports the declared hosts and the unknown initiators logged in.
func (vw *View) Hosts() []api.HostInfo {
	return vw.hosts(vw.view(), vw.sessions())
}

func (vw *View) hosts(v *coreView, sess []fabric.PathStat) []api.HostInfo {
	cfg, lm := vw.Array.Config(), vw.Array.LUNMap()
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
	for _, h := range vw.Array.Hosts() {
		add(h, true)
		declared[h.Name] = true
	}
	for _, s := range sess {
		h := vw.Array.HostOf(s.Nexus.InitiatorName)
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
		for _, n := range vw.Array.Nodes {
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
			case v == nil && vw.hasSession(sess, name, n):
				state = "logged-in" // no core: logins are all that is known
			}
			hi.Nodes[n.Name] = state
		}
		out = append(out, *hi)
	}
	return out
}

func (vw *View) hasSession(sess []fabric.PathStat, host string, n *array.Node) bool {
	for _, s := range sess {
		if p := vw.Array.Port(s.Nexus.TargetPort); p != nil && p.Node == n && vw.Array.HostOf(s.Nexus.InitiatorName).Name == host {
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
func (vw *View) Status() api.StatusInfo {
	v, sess := vw.view(), vw.sessions()
	cfg := vw.Array.Config()
	st := api.StatusInfo{Target: cfg.Target, ALUA: cfg.ALUA, Ownership: vw.Control.Running(), Nodes: vw.nodes(v, sess),
		LUNs: len(vw.Array.LUNs), Sessions: len(sess), Reports: map[string]int{}, Time: vw.Now()}
	for _, l := range vw.Array.LUNs {
		if l.Owner() != l.Preferred {
			st.LUNsOffPreferred++
		}
	}
	for _, h := range vw.hosts(v, sess) {
		if h.Declared {
			st.Hosts++
		} else {
			st.Unknown++
		}
	}
	if rs, err := vw.Reports(); err == nil {
		for _, r := range rs {
			st.Reports[string(r.Severity)]++
		}
	}
	st.Access, st.Mappings, st.UnknownInitiators = "open", len(cfg.Mappings), cfg.Access.UnknownInitiators
	if !vw.Array.LUNMap().Open() {
		st.Access = "mapped"
	}
	st.State = vw.State()
	st.Controller = vw.Controller
	return st
}

// Paths reports every logged-in path with its counters.
func (vw *View) Paths() []api.PathInfo {
	v, sess := vw.view(), vw.sessions()
	type agg struct {
		cmds, br, bw, nonOpt uint64
		busy                 time.Duration
		luns                 map[uint64]*api.PathLUN
	}
	per := map[scsi.Nexus]*agg{}
	for _, s := range vw.SCSI.IOStats() {
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
	last := vw.Control.LastIO()
	now := vw.Now()
	var out []api.PathInfo
	for _, s := range sess {
		n := s.Nexus
		e := vw.Control.Event("", n)
		pi := api.PathInfo{State: "up", Host: e.Host, Initiator: n.InitiatorName, ISID: e.ISID, Node: e.Node, RelativeID: n.TargetPort,
			Since: s.Since, Exchanges: s.Exchanges}
		port := vw.Array.Port(n.TargetPort)
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
		for _, l := range vw.Array.LUNs {
			pl := api.PathLUN{LUN: l.ID}
			if port != nil {
				pl.State = l.State(n.InitiatorName, port.Node).String()
			}
			if a != nil && a.luns[l.ID] != nil && age > 0 {
				pl.AvgMBps = a.luns[l.ID].AvgMBps / age / 1e6
			}
			if iv, ok := last[control.IOKey{Nexus: n, LUN: l.ID}]; ok && iv.Interval > 0 {
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
	live := map[string]bool{} // initiator|port with a session now
	for _, s := range sess {
		live[strings.ToLower(s.Nexus.InitiatorName)+"|"+strconv.Itoa(int(s.Nexus.TargetPort))] = true
	}
	for _, lp := range vw.Control.LostPaths() {
		n := lp.Nexus
		if live[strings.ToLower(n.InitiatorName)+"|"+strconv.Itoa(int(n.TargetPort))] {
			continue // back already (a new session, perhaps a new ISID, before the old one's end was noticed)
		}
		e := vw.Control.Event("", n)
		pi := api.PathInfo{State: "failed", Reason: lp.Reason, Host: e.Host, Initiator: n.InitiatorName, ISID: e.ISID,
			Node: e.Node, RelativeID: n.TargetPort, Since: lp.At}
		if port := vw.Array.Port(n.TargetPort); port != nil {
			pi.Port, pi.GroupID = port.Name, port.Node.GroupID
			for _, l := range vw.Array.LUNs {
				pi.LUNs = append(pi.LUNs, api.PathLUN{LUN: l.ID, State: "-"})
			}
		}
		out = append(out, pi)
	}
	// Each host's paths together, up before failed, by node and port.
	slices.SortStableFunc(out, func(a, b api.PathInfo) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(b.State, a.State), cmp.Compare(a.Node, b.Node),
			cmp.Compare(a.RelativeID, b.RelativeID))
	})
	return out
}

// Latency reports every port's recent intervals.
func (vw *View) Latency() []api.PortLatency {
	m := vw.Metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.PortLatency
	for _, p := range vw.Array.Ports {
		pc := m.port(p.RelativeID)
		out = append(out, api.PortLatency{Node: p.Node.Name, Port: p.Name,
			Samples: append([]api.LatencySample{}, pc.history...)})
	}
	return out
}

// ClearReport is the operator clearing a latched report.
func (vw *View) ClearReport(req api.ClearRequest) error {
	return vw.Control.ClearReport(ownership.ClearReport{Condition: ownership.Condition(req.Condition), LUN: req.LUN,
		Host: req.Host, Node: req.Node})
}

func (vw *View) Rebalance() (api.RebalanceReply, error) {
	res, batches, err := vw.Control.Rebalance()
	if err != nil {
		return api.RebalanceReply{}, err
	}
	out := api.RebalanceReply{Moves: res.Moves, Reason: res.Reason, Batches: []api.BatchInfo{}}
	for _, bt := range batches {
		out.Batches = append(out.Batches, api.BatchInfo{LUNs: bt.LUNs, To: bt.To, Cause: string(bt.Cause)})
	}
	return out, nil
}

// PathIOs reports the I/O counters of every (nexus, LUN).
func (vw *View) PathIOs() []api.PathIO {
	var out []api.PathIO
	for _, s := range vw.SCSI.IOStats() {
		e := vw.Control.Event("", s.Nexus)
		out = append(out, api.PathIO{Initiator: e.Initiator, ISID: e.ISID, Host: e.Host, TargetPort: e.TargetPort,
			Node: e.Node, LUN: s.LUN, Reads: s.Reads, Writes: s.Writes, Other: s.Other, Media: s.Media,
			LastMedia: s.LastMedia, NonOptimized: s.NonOptimized, Gone: s.Gone})
	}
	return out
}

// LUNInfos reports every LUN.
func (vw *View) LUNInfos() []api.LUNInfo {
	var out []api.LUNInfo
	for _, l := range vw.Array.LUNs {
		li := api.LUNInfo{ID: l.ID, Owner: l.Owner().Name, Preferred: l.Preferred.Name, Media: l.Media, Group: l.Group,
			Moving: l.Moving(), Generation: l.Generation(), Size: l.Size, BlockSize: l.BlockSize,
			PhysicalBlockSize: l.PhysicalBlockSize, WWID: "naa." + hex.EncodeToString(vw.Array.NAA(l)), Serial: vw.Array.Serial(l)}
		for _, g := range l.Groups("") {
			li.Groups = append(li.Groups, api.GroupInfo{Node: g.Node.Name, ID: g.ID, State: g.State.String(), Pref: g.Pref,
				Status: g.Status, Ports: g.Ports})
		}
		st := l.Stats()
		for _, n := range vw.Array.Nodes {
			s := &st[n.Index]
			li.Nodes = append(li.Nodes, api.NodeIO{Node: n.Name, Commands: s.Commands.Load(), Bytes: s.Bytes.Load(),
				Forwarded: s.Forwarded.Load(), ForwardedBytes: s.ForwardedBytes.Load()})
		}
		out = append(out, li)
	}
	return out
}

// Connectivity reports the host x node matrix.
func (vw *View) Connectivity() api.Connectivity {
	c := api.Connectivity{Hosts: []api.ConnectivityRow{}}
	for _, n := range vw.Array.Nodes {
		c.Nodes = append(c.Nodes, n.Name)
	}
	for _, h := range vw.Hosts() {
		row := api.ConnectivityRow{Host: h.Name, Declared: h.Declared, Type: h.Type}
		for _, n := range c.Nodes {
			row.Cells = append(row.Cells, h.Nodes[n])
		}
		c.Hosts = append(c.Hosts, row)
	}
	return c
}

// Reports returns the conditions raised now, as an admin reads them: the
// catalog entry, the host, node, ports and LUNs concerned, the core's
// cause, and since when (from the event feed, while it still holds the
// raise).
func (vw *View) Reports() ([]reports.Report, error) {
	raised, err := vw.Control.Reports()
	if err != nil {
		return nil, err
	}
	type reportKey struct {
		cond       ownership.Condition
		host, node string
		lun        uint64
		port       uint16
	}
	since := map[reportKey]time.Time{}
	evs, _ := vw.Events(0)
	for _, e := range evs {
		if e.Kind == api.EventReport && e.Report != nil {
			r := e.Report
			since[reportKey{ownership.Condition(r.Condition), r.Host, r.Node, r.LUN, r.Port}] = e.Time
		}
	}
	var out []reports.Report
	for _, rc := range raised {
		entry, ok := ownership.Lookup(rc.Condition)
		if !ok {
			entry = ownership.Warnable{Condition: rc.Condition, Code: "?", Title: string(rc.Condition), Severity: ownership.Major}
		}
		r := reports.Report{Warnable: entry, Host: rc.Host, Node: rc.Node, Cause: rc.Cause,
			Since: since[reportKey{rc.Condition, rc.Host, rc.Node, rc.LUN, rc.Port}]}
		if p := vw.Array.Port(rc.Port); rc.Condition == ownership.PathDegraded && p != nil {
			r.Ports = []string{p.Name} // one path
		} else if n := vw.Array.Node(rc.Node); n != nil {
			for _, p := range n.Ports {
				r.Ports = append(r.Ports, p.Name)
			}
		}
		switch {
		case rc.Host == "" && rc.Node == "":
			r.LUNs = []uint64{rc.LUN}
		case vw.Array.Node(rc.Node) != nil:
			n := vw.Array.Node(rc.Node)
			// A host condition about a node concerns the LUNs whose home
			// is that node: the ones it cannot be given back.
			for _, l := range vw.Array.LUNs {
				if l.Preferred == n {
					r.LUNs = append(r.LUNs, l.ID)
				}
			}
		}
		out = append(out, r)
	}
	reports.Sort(out)
	return out, nil
}

// authMode says how a host authenticates, for views: none, chap or
// chap-mutual (never the secrets).
func authMode(cfg array.Config, host string) string {
	c := cfg.Auth.CHAP
	for _, h := range cfg.Hosts {
		if h.Name == host && h.CHAP != nil {
			c = h.CHAP
		}
	}
	switch {
	case c == nil:
		return "none"
	case c.TargetUser != "" || (cfg.Auth.CHAP != nil && cfg.Auth.CHAP.TargetUser != ""):
		return "chap-mutual"
	}
	return "chap"
}

// traceIdle: a trace nobody has read for this long is turned off.
const traceIdle = time.Minute

// Trace reads the command trace from the cursors, turning it on (10 ms
// buckets) at the first read; a watcher turns it off once nobody has read
// it for traceIdle, so a qualification that dies leaves no cost behind.
func (vw *View) Trace(bucket, note uint64, reader string) api.TraceReply {
	now := time.Now()
	if vw.Now != nil {
		now = vw.Now()
	}
	vw.traceMu.Lock()
	if vw.traceReaders == nil {
		vw.traceReaders = map[string]time.Time{}
	}
	others := 0
	for id, t := range vw.traceReaders {
		switch {
		case now.Sub(t) > 2*time.Second:
			delete(vw.traceReaders, id)
		case id != reader:
			others++
		}
	}
	vw.traceReaders[reader] = now
	vw.traceMu.Unlock()
	if _, on := vw.SCSI.TraceIdle(); !on {
		vw.SCSI.StartTrace(0)
		go func() {
			for {
				time.Sleep(traceIdle / 12)
				if vw.SCSI.StopTraceIfIdle(traceIdle) {
					return
				}
			}
		}()
	}
	r, _ := vw.SCSI.TraceSince(bucket, note)
	out := api.TraceReply{BucketNs: int64(r.Bucket), NextBucket: r.NextBucket, NextNote: r.NextNote, Lost: r.Lost, Started: r.Started,
		DelayNs: int64(r.Delay), Readers: others, Skipped: r.Skipped,
		Buckets: make([]api.TraceBucket, 0, len(r.Buckets)), Notes: make([]api.TraceNote, 0, len(r.Notes))}
	names := map[scsi.Nexus]api.TraceNexus{}
	nexus := func(n scsi.Nexus) api.TraceNexus {
		if tn, ok := names[n]; ok {
			return tn
		}
		e := vw.Control.Event("", n)
		tn := api.TraceNexus{Initiator: e.Initiator, ISID: e.ISID, Host: e.Host, TargetPort: e.TargetPort, Node: e.Node}
		names[n] = tn
		return tn
	}
	rel := func(t, start int64) int64 {
		if t == 0 {
			return 0
		}
		return t - start
	}
	for _, b := range r.Buckets {
		out.Buckets = append(out.Buckets, api.TraceBucket{TraceNexus: nexus(b.Nexus), LUN: b.LUN, Start: b.Start,
			Arrived: b.Arrived, Done: b.Done, Good: b.Good, Checks: b.Checks, NonOptimized: b.NonOptimized,
			FirstArrival: rel(b.FirstArrival, b.Start), LastArrival: rel(b.LastArrival, b.Start),
			FirstGood: rel(b.FirstGood, b.Start), LastGood: rel(b.LastGood, b.Start)})
	}
	for _, n := range r.Notes {
		tn := api.TraceNote{TraceNexus: nexus(n.Nexus), Time: n.Time, LUN: n.LUN}
		if n.Check {
			tn.Kind, tn.Opcode, tn.Sense = api.TraceCheck, n.Opcode, fmt.Sprintf("%X/%02X/%02X", n.Key, n.ASC, n.ASCQ)
		} else {
			tn.Kind, tn.Function = api.TraceTMF, api.TMFNames[int(n.TMF)]
		}
		out.Notes = append(out.Notes, tn)
	}
	return out
}

// StopTrace turns the command trace off.
func (vw *View) StopTrace() { vw.SCSI.StopTrace() }
