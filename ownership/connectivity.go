package ownership

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/aluad/aluad/pkg/alua"
)

// Connectivity tracking (reference 002 "Connectivity Tracking"): per host
// and node, protocol connectivity (a logged-in nexus through an up port),
// multipath discovery and I/O seen.
//
// Discovery is judged on what a multipath stack does that a lone SCSI
// layer does not: it keeps probing every path, and uses more than one
// node. multipathd's checker sends
// TEST UNIT READY (and, with prio alua, RTPG) on each path every 5-20 s;
// MSDSM and NMP have their own probes. A kernel without multipath still
// reads RTPG on every path once at scan (scsi_dh_alua attaches to every
// TPGS device) and after a unit attention on the path it uses, so one
// RTPG says nothing. A nexus is discovered when commands keep arriving on
// it (any command: a probe, an RTPG, I/O) in MediaTicks distinct ticks
// spanning a third of the discovery window and still two thirds of a
// window after it logged in (the scan at login is over by then), or when
// the host's sustained media I/O through its node proves use. Once a host
// has shown a multipath stack that way (it reached two nodes, or followed
// a move), an RTPG on a new path of its discovers that path at once: its
// stack reads RTPG as it adds the path.

type host struct {
	name    string
	typ     alua.HostType
	nexuses map[nexusKey]*nexusState
	// everReached: nodes this host has reached (for "redundancy lost").
	everReached map[string]bool
	// joining: the host logged in after it had no session at all (for
	// the first time, or back from a reboot). Until its logins and their
	// discovery have been unchanged for joinWindow ticks (since
	// joinChanged) its connectivity constrains no failover: a host
	// logging in path by path must not pull LUNs after it.
	joining     bool
	joinWindow  int
	joinChanged int
	everJoined  bool
	// lostClaimed: the discovered paths of a host known by its
	// initiator's name (rtpgShowsStack) that a fault ended, with the
	// tick: MSDSM keeps a path's device through a short outage and reads
	// no RTPG on it again when the session comes back, so a path back
	// within a silence window keeps its standing.
	lostClaimed map[nexusKey]int
	// departed: nodes the host logged out of (an orderly Logout of its
	// last nexus there), with the tick: a departure, not a fault, so
	// they still count as reached for failover.
	departed map[string]int
	// had: the nodes it has reached since it last joined (logged in with
	// no session before), at joinedAt (pendingDiscovery).
	had      map[string]bool
	joinedAt int
	// inUseSince: per node its stack probes or uses now, since when
	// without a break (a STANDBY push waits the hold on it); handoff: the
	// nodes the core last said this host's non-owner paths must not be
	// STANDBY for (handoff.go).
	inUseSince map[string]int
	handoff    map[string]bool
	// away: it has no nexus and the last one ended by Logout (a host
	// shut down or rebooting, not a host that lost its paths).
	away bool
	// lostPorts: per node, the target ports whose nexus ended in a fault
	// most recently (for the Path Flapping report).
	lostPorts map[string][]uint16
	// media: per node and LUN, the run of media commands that completed
	// GOOD (discovery evidence, MediaTicks). Per LUN: a scan that reads
	// each LUN once in turn is no run on any of them.
	media map[mediaKey]evidence
	// uses: the LUNs it sent RTPG or sustained media I/O for.
	uses map[uint64]bool
	// What the host was seen to do (behaviour.go).
	obs hostObs
}

type nexusKey struct {
	initiator, isid string
	port            uint16
}

type nexusState struct {
	n          Nexus
	since      int
	discovered bool
	// traffic is the run of ticks commands arrived on the nexus in (any
	// command: the discovery evidence of a multipath stack's probing);
	// byTraffic: that alone discovered it (expireProbes). byMedia: media
	// I/O through its node discovered it, for a host that had shown no
	// multipath stack: a kernel without multipath reads every path it
	// scans (udev's blkid at attach), for as long as the scan lasts.
	traffic   evidence
	byTraffic bool
	byMedia   bool
	// mediaProven: media I/O through its node has proven use while it
	// was logged in (usesNode at some tick, fresh or not since).
	mediaProven bool
	// probing: the run of ticks commands arrived on the nexus in from the
	// hand-back hold after its login on (past the attach), a gap longer
	// than a checker's longest interval starting a new one (inUse).
	probing evidence
	// downAt: the last tick its port or node was down (no traffic can
	// come then).
	downAt int
	// Path latency (Path Degraded): this tick's exchanges and their
	// summed time; the best interval mean seen with enough exchanges;
	// the last judged interval's expansion factor and verdict.
	pendOps, pendExch float64
	bestExch          float64
	expansion         float64
	degraded          bool
}

func (c *Core) hostOf(name string) *host {
	h := c.hosts[name]
	if h == nil {
		h = &host{name: name, typ: alua.HostTypes[alua.HostDefault], nexuses: map[nexusKey]*nexusState{},
			everReached: map[string]bool{}, departed: map[string]int{}, lostPorts: map[string][]uint16{}, lostClaimed: map[nexusKey]int{},
			had: map[string]bool{}, inUseSince: map[string]int{}, handoff: map[string]bool{},
			media: map[mediaKey]evidence{}, uses: map[uint64]bool{},
			obs: hostObs{mediaSince: -1, lastFollow: -1, notFollowAt: -1}}
		c.hosts[name] = h
		c.hostNames = append(c.hostNames, name)
		sort.Strings(c.hostNames)
	}
	return h
}

func keyOf(n Nexus) nexusKey { return nexusKey{n.Initiator, n.ISID, n.Port} }

// settling: the host is joining and its window has not passed.
func (c *Core) settling(h *host) bool {
	return h.joining && c.now-h.joinChanged < h.joinWindow
}

// joinChange notes a change of a joining host's paths (a login, a
// logout, a path discovered): its window starts again.
func (c *Core) joinChange(h *host) {
	if c.settling(h) {
		h.joinChanged = c.now
	}
}

func (c *Core) login(n Nexus) {
	h := c.hostOf(n.Host)
	if _, s := c.claimNexus(n, false); s != nil {
		return // known already (its login raced an operator's Rehome)
	}
	c.addNexus(h, n)
}

// claimNexus finds n's nexus, under the host n names or, if another host
// holds it (an event resolved against the hosts before an operator's
// change, Rehome, and applied after it), moves it to the host n names:
// one nexus belongs to one host, the latest named. create makes the host
// n names if it is new.
func (c *Core) claimNexus(n Nexus, create bool) (*host, *nexusState) {
	k := keyOf(n)
	h := c.hosts[n.Host]
	if h != nil && h.nexuses[k] != nil {
		return h, h.nexuses[k]
	}
	for _, name := range c.hostNames {
		g := c.hosts[name]
		s := g.nexuses[k]
		if g == h || s == nil {
			continue
		}
		if h == nil {
			h = c.hostOf(n.Host)
		}
		delete(g.nexuses, k)
		s.n.Host = h.name
		h.nexuses[k] = s
		c.forgetIfUnconnected(g, n.Node)
		g.away = len(g.nexuses) == 0
		c.gen++
		return h, s
	}
	if create && h == nil {
		h = c.hostOf(n.Host)
	}
	return h, nil
}

// addNexus records a nexus (a login, or a command on a nexus whose login
// was missed). A host with no session before is joining: a new host
// waits Settle, a host coming back (a reboot) the discovery window.
func (c *Core) addNexus(h *host, n Nexus) *nexusState {
	if len(h.nexuses) == 0 {
		h.joining, h.joinChanged = true, c.now
		h.joinWindow = c.cfg.Settle
		if h.everJoined {
			h.joinWindow = max(c.cfg.Settle, c.cfg.DiscoveryWindow)
		}
		h.everJoined = true
		h.joinedAt = c.now
		clear(h.had)
	} else {
		c.joinChange(h)
	}
	delete(h.departed, n.Node)
	h.away = false
	h.obs.initiator = n.Initiator
	// Media evidence is per node (an IO interval names the node, not the
	// path): a new path to a node the host keeps using is in use too.
	s := &nexusState{n: n, since: c.now}
	h.nexuses[keyOf(n)] = s
	s.discovered = c.usesNode(h, n.Node)
	s.byMedia = s.discovered && !h.obs.multipath
	s.mediaProven = s.discovered
	if t, ok := h.lostClaimed[keyOf(n)]; ok {
		delete(h.lostClaimed, keyOf(n))
		if c.now-t <= c.silenceWindow() && c.nodes[n.Node] != nil {
			s.discovered, s.byMedia = true, false // back before its device went
		}
	}
	c.gen++
	return s
}

func (c *Core) logout(e Logout) {
	n := e.Nexus
	h, s := c.claimNexus(n, false)
	if s == nil {
		return
	}
	if s := h.nexuses[keyOf(n)]; !e.Orderly && h.obs.byName && s.discovered {
		h.lostClaimed[keyOf(n)] = c.now
	}
	delete(h.nexuses, keyOf(n))
	c.gen++
	c.joinChange(h)
	c.forgetIfUnconnected(h, n.Node)
	if e.Orderly {
		// It left the node when no path it used there is left (a path
		// it never used may still be logged in).
		if !c.reaches(h, n.Node) {
			h.departed[n.Node] = c.now
		}
		h.away = len(h.nexuses) == 0
		return
	}
	h.away = false
	ports := h.lostPorts[n.Node]
	if !slices.Contains(ports, n.Port) {
		if len(ports) >= 8 {
			ports = ports[1:]
		}
		h.lostPorts[n.Node] = append(ports, n.Port)
	}
}

// forgetIfUnconnected drops the host's media evidence for a node it has
// no working path to any more (its paths logged out, or their ports or
// the node went down while a session lingers, as on a silent port).
// Media evidence is per node: a path that comes back proves itself again.
func (c *Core) forgetIfUnconnected(h *host, node string) {
	if c.connected(h, node) {
		return
	}
	for k := range h.media {
		if k.node == node {
			delete(h.media, k)
		}
	}
}

// rtpg notes an RTPG on a nexus: traffic on it. One RTPG alone does not
// discover a path (a Linux kernel without multipath reads RTPG on every
// path at scan), unless the host has shown a multipath stack already:
// its stack reads RTPG on a path as it adds it (a path back after a
// fault, a host logging in again), or its initiator is Windows' or
// ESXi's (rtpgShowsStack). A command on a nexus we missed the login of
// counts as a login.
func (c *Core) rtpg(n Nexus) {
	h, s := c.claimNexus(n, true)
	if s == nil {
		s = c.addNexus(h, n)
	}
	c.traffic(h, s)
	if !h.obs.byName && rtpgShowsStack(n.Initiator) {
		h.obs.multipath, h.obs.confirmed, h.obs.byName = true, true, true
		c.gen++
	}
	if h.obs.multipath && c.pathUp(s) {
		if !s.discovered {
			c.discover(h, s)
		}
		s.byTraffic = false
	}
}

// rtpgShowsStack: the initiator's name is the Microsoft iSCSI
// initiator's or the VMware software adapter's (their default names):
// on those systems only the multipath stack reads RTPG (MSDSM, NMP's
// SATP_ALUA), as it claims a path, and neither probes idle paths at its
// defaults (MSDSM's path verification is off; NMP evaluates paths every
// 300 s), so an RTPG is the evidence they give. The name, not the
// declared type: a Linux host declared windows by mistake still reads
// RTPG from scsi_dh_alua on every path without multipath.
func rtpgShowsStack(initiator string) bool {
	switch iqnStack(initiator) {
	case alua.HostWindows, alua.HostVMware:
		return true
	}
	return false
}

// traffic notes that commands arrived on a nexus this tick; once they
// have kept arriving (probed), the nexus is discovered.
func (c *Core) traffic(h *host, s *nexusState) {
	s.traffic = c.addEvidence(s.traffic, c.now)
	if c.now >= s.since+c.handbackHold() {
		switch p := &s.probing; {
		case p.ticks == 0 || c.now-p.last > c.checkerFresh():
			*p = evidence{first: c.now, last: c.now, ticks: 1}
		case c.now != p.last:
			p.last, p.ticks = c.now, p.ticks+1
		}
	}
	if !s.discovered && c.probed(s) {
		c.discover(h, s)
		s.byTraffic = true
	}
}

// probed: commands keep arriving on the nexus: a run that proves use
// (MediaTicks ticks spanning a third of the discovery window), still
// going a third of a window after the nexus logged in. A multipath
// checker probes every 5 s at first, doubling to 20 s (multipathd), so by
// then it has probed three times (at 0, 5 and 15 s); a scan at login is
// one burst. A scan that goes on longer still (many disks under
// emulation) looks like probing while it lasts: such a host has shown no
// multipath stack, so its discovery expires (expireProbes) and it is
// never handed back to STANDBY (handoff.go).
func (c *Core) probed(s *nexusState) bool {
	return c.proves(s.traffic) && s.traffic.last >= s.since+c.cfg.DiscoveryWindow/3
}

// expireProbes ends, at a tick, the discovery of the nexuses that only
// traffic discovered, of hosts that have not shown a multipath stack,
// once their traffic has stopped for a gap: a host without multipath
// that scanned its disks a few times in a row is not probing its paths.
// A nexus that media I/O discovered (byMedia) ends the same way, but only
// while the host's media I/O goes on through another node: its scan's
// reads (udev probing each disk it attaches, for minutes on a slow host)
// have stopped and its I/O goes elsewhere; or when it is silent
// everywhere and those reads came through more than one node (scanOnly).
// A host idle everywhere that used one node keeps it: silence says
// nothing of its paths.
func (c *Core) expireProbes() {
	for _, name := range c.hostNames {
		h := c.hosts[name]
		if h.obs.multipath {
			if h.obs.confirmed || !c.silentNode(h) {
				continue
			}
			// Its overlapping use of two nodes was a scan (udev reading
			// every disk at attach, under load for minutes), not a
			// multipath stack: a checker would still be probing. What it
			// discovered stands only on evidence that keeps coming: media
			// I/O that proved use of the node, or else traffic (the RTPG
			// it read as a stack would was its kernel's, on every path).
			h.obs.multipath = false
			for _, s := range h.nexuses {
				if s.discovered && !s.byTraffic {
					s.byMedia, s.byTraffic = s.mediaProven, !s.mediaProven
				}
			}
			c.gen++
		}
		scanOnly := c.scanOnly(h)
		for _, k := range sortedNexusKeys(h) {
			s := h.nexuses[k]
			if !c.pathUp(s) {
				s.downAt = c.now // a path that is down is silent: no fault of its stack's
				continue
			}
			quiet := c.now - max(s.traffic.last, s.downAt)
			if !s.discovered || quiet < c.evidenceGap() || c.usesNode(h, s.n.Node) {
				continue
			}
			if s.byTraffic || s.byMedia && (c.usesOtherNode(h, s.n.Node) || scanOnly) {
				s.discovered, s.byTraffic, s.byMedia = false, false, false
				c.gen++
				if !c.reaches(h, s.n.Node) {
					// It stopped using the node: no path was lost there
					// (no Host Redundancy Lost).
					delete(h.everReached, s.n.Node)
				}
			}
		}
	}
}

// silentNode: the host has a node whose every path is up, logged in and
// silent (no command) for the silence window (a minute), and whose use
// its media I/O does not prove, whatever it sends elsewhere. A multipath
// stack's checker probes every path it has every 5-20 s (40 s with some
// vendors' polling_interval), used or not, busy or idle: a host whose
// standing is not confirmed (shown within the attach window after a
// login) and that then leaves a node's up paths silent had shown a scan
// (or a rescan), not a stack. Commands on another node do not excuse the
// silence: a host without multipath whose one path moved there (its
// node failed and came back) sends them through that path, and one
// still logging in reads RTPG on each path it attaches.
func (c *Core) silentNode(h *host) bool {
	return len(c.silentNodes(h, c.silenceWindow())) > 0
}

// silenceWindow: Config.SilenceWindow, never under the evidence gap.
func (c *Core) silenceWindow() int { return max(c.evidenceGap(), c.cfg.SilenceWindow) }

// silentNodes: the nodes whose every up path of the host's has been
// logged in and silent for gap ticks, and whose use its media I/O does
// not prove.
func (c *Core) silentNodes(h *host, gap int) map[string]bool {
	silent := map[string]bool{}
	for _, n := range c.nodeNames {
		quiet, any := true, false
		for _, s := range h.nexuses {
			if s.n.Node != n || !c.pathUp(s) {
				continue
			}
			any = true
			if c.now-max(s.traffic.last, s.downAt, s.since) < gap {
				quiet = false
			}
		}
		if any && quiet && !c.usesNode(h, n) {
			silent[n] = true
		}
	}
	return silent
}

// scanOnly: the host is silent on every node it is logged in to, and
// media I/O discovered paths of its on more than one node: the reads were
// a scan's (a host without multipath uses one path), not its use.
func (c *Core) scanOnly(h *host) bool {
	if len(c.silentNodes(h, c.evidenceGap())) != c.connectedCount(h) {
		return false
	}
	nodes := map[string]bool{}
	for _, s := range h.nexuses {
		if s.discovered && s.byMedia {
			nodes[s.n.Node] = true
		}
	}
	return len(nodes) > 1
}

// discover marks a nexus as in use by the host's multipath driver.
func (c *Core) discover(h *host, s *nexusState) {
	s.discovered, s.byTraffic, s.byMedia = true, false, false
	delete(h.departed, s.n.Node)
	c.gen++
	c.joinChange(h)
}

// pathLatency records one interval of a nexus's exchange times. Samples
// for a nexus that is not logged in (the last interval of one that has
// just logged out) are dropped: they must not bring it back.
func (c *Core) pathLatency(e PathLatency) error {
	if c.nodes[e.Nexus.Node] == nil {
		return fmt.Errorf("ownership: path latency for unknown node %q", e.Nexus.Node)
	}
	if e.Ops < 0 || e.Exchange < 0 {
		return fmt.Errorf("ownership: path latency with negative counts")
	}
	h := c.hosts[e.Nexus.Host]
	if h == nil {
		return nil
	}
	s := h.nexuses[keyOf(e.Nexus)]
	if s == nil {
		return nil
	}
	if e.Ops > 0 && c.pathUp(s) {
		c.traffic(h, s)
	}
	s.pendOps += e.Ops
	s.pendExch += e.Ops * e.Exchange
	return nil
}

// foldPaths ends a tick for path latency (reference 004): a path's
// expansion factor is this interval's mean exchange time over the best
// interval mean it has shown with at least MinExpansionOps exchanges.
// It is degraded when that factor is PathDegradedFactor or more, and that
// many times more than the slowdown of its node (the array's own
// response time) and of its peer paths to the same node: a path slower
// only because the array is busy is not degraded; nor is one whose
// exchanges take less than PathDegradedMicros longer than its best (a
// host does not notice it). Intervals with fewer
// than PathMinOps exchanges are not judged; the verdict stands.
func (c *Core) foldPaths() {
	nodeEF := map[string]float64{}
	for _, st := range c.NodeStats() {
		nodeEF[st.Node] = st.Expansion
	}
	type judged struct {
		s     *nexusState
		ef    float64
		added float64 // µs over its best
	}
	var js []judged
	for _, name := range c.hostNames {
		h := c.hosts[name]
		for _, k := range sortedNexusKeys(h) {
			s := h.nexuses[k]
			if s.pendOps >= c.cfg.PathMinOps && s.pendOps > 0 {
				mean := s.pendExch / s.pendOps
				if s.pendOps >= c.cfg.MinExpansionOps && mean > 0 && (s.bestExch == 0 || mean < s.bestExch) {
					s.bestExch = mean
				}
				if s.bestExch > 0 {
					s.expansion = mean / s.bestExch
					js = append(js, judged{s, s.expansion, mean - s.bestExch})
				}
			}
			s.pendOps, s.pendExch = 0, 0
		}
	}
	for _, j := range js {
		var peers []float64
		for _, o := range js {
			if o.s != j.s && o.s.n.Node == j.s.n.Node {
				peers = append(peers, o.ef)
			}
		}
		ref := max(1, nodeEF[j.s.n.Node], median(peers))
		f := c.cfg.PathDegradedFactor
		j.s.degraded = j.ef >= f && j.ef >= f*ref && j.added >= c.cfg.PathDegradedMicros
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// sortedNexusKeys lists a host's nexuses in a fixed order.
func sortedNexusKeys(h *host) []nexusKey {
	ks := make([]nexusKey, 0, len(h.nexuses))
	for k := range h.nexuses {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.port != b.port {
			return a.port < b.port
		}
		if a.initiator != b.initiator {
			return a.initiator < b.initiator
		}
		return a.isid < b.isid
	})
	return ks
}

// PathState is one nexus's latency verdict.
type PathState struct {
	Nexus Nexus
	// Expansion is the last judged interval's exchange time over the
	// path's best (0: not judged yet); Best is that best, in µs.
	Expansion, Best float64
	Degraded        bool
	Discovered      bool
	Up              bool
}

// PathStates reports every nexus, by host then port.
func (c *Core) PathStates() []PathState {
	var out []PathState
	for _, name := range c.hostNames {
		h := c.hosts[name]
		for _, k := range sortedNexusKeys(h) {
			s := h.nexuses[k]
			out = append(out, PathState{Nexus: s.n, Expansion: s.expansion, Best: s.bestExch, Degraded: s.degraded,
				Discovered: s.discovered, Up: c.pathUp(s)})
		}
	}
	return out
}

// pathUp: the nexus's node and port are up.
func (c *Core) pathUp(s *nexusState) bool {
	nd := c.nodes[s.n.Node]
	return nd != nil && nd.up && !nd.portDown[s.n.Port]
}

// connected: the host has a logged-in nexus to node through an up port.
func (c *Core) connected(h *host, nodeName string) bool {
	for _, s := range h.nexuses {
		if s.n.Node == nodeName && c.pathUp(s) {
			return true
		}
	}
	return false
}

// reaches: the host can send I/O to node: connected and discovered.
func (c *Core) reaches(h *host, nodeName string) bool {
	for _, s := range h.nexuses {
		if s.n.Node == nodeName && s.discovered && c.pathUp(s) {
			return true
		}
	}
	return false
}

// notDiscovering: connected to node for at least the discovery window
// without any discovered nexus there (protocol-only: host configuration).
func (c *Core) notDiscovering(h *host, nodeName string) bool {
	oldest, any := c.now, false
	for _, s := range h.nexuses {
		if s.n.Node != nodeName || !c.pathUp(s) {
			continue
		}
		if s.discovered {
			return false
		}
		any = true
		oldest = min(oldest, s.since)
	}
	return any && c.now-oldest >= c.cfg.DiscoveryWindow
}

// reachable lists the nodes the host reaches, in name order (cached until
// connectivity next changes).
func (c *Core) reachable(h *host) []string { return c.reachEntry(h).nodes }

// reachableIdx is reachable as indexes into nodeNames.
func (c *Core) reachableIdx(h *host) []int { return c.reachEntry(h).idx }

func (c *Core) reachEntry(h *host) reachEntry {
	if e, ok := c.reach[h.name]; ok && e.gen == c.gen {
		return e
	}
	e := reachEntry{gen: c.gen}
	for i, n := range c.nodeNames {
		if c.reaches(h, n) {
			e.nodes = append(e.nodes, n)
			e.idx = append(e.idx, i)
		}
	}
	c.reach[h.name] = e
	return e
}

// HostState is a host's derived connectivity state.
type HostState struct {
	Host string
	// Reaches: nodes the host can send I/O to; ProtocolOnly: nodes it is
	// logged in to but whose paths its multipath driver does not use;
	// Lost: nodes it reached before and reaches no more.
	Reaches, ProtocolOnly, Lost []string
	// Full: it reaches every node that is up.
	Full bool
}

// HostStates reports every host's connectivity, in host order.
func (c *Core) HostStates() []HostState {
	var out []HostState
	for _, name := range c.hostNames {
		h := c.hosts[name]
		st := HostState{Host: name, Full: true}
		for _, n := range c.nodeNames {
			switch {
			case c.reaches(h, n):
				st.Reaches = append(st.Reaches, n)
			case c.connected(h, n):
				st.ProtocolOnly = append(st.ProtocolOnly, n)
			}
			if !c.reaches(h, n) {
				if h.everReached[n] {
					st.Lost = append(st.Lost, n)
				}
				if c.nodes[n].up {
					st.Full = false
				}
			}
		}
		out = append(out, st)
	}
	return out
}

// allowed returns the up nodes every connected user of l reaches: the
// owners that strand no host (for failover). Users that reach no node at
// all do not constrain (nothing can help them), nor do hosts still
// joining. A node a host logged out of (orderly) still counts as reached:
// a host leaving, or an admin removing its paths, is not a fault; only
// when that host is the one user of the LUN still doing I/O does the LUN
// follow it. A node whose discovery may still come counts too: a host
// that is still logging in, or whose multipath stack has not had the time
// to probe a new path, has lost nothing there. When no node suits
// everyone, it returns the nodes reached by the most users (ties: all of
// them) and false.
func (c *Core) allowed(l *lun) ([]string, bool) { return c.allowedFor(l, false) }

// allowedStrict is allowed for planned moves (failback, balance,
// shipping): a host still joining constrains too, so a move never goes
// where a host that is coming back cannot follow.
func (c *Core) allowedStrict(l *lun) ([]string, bool) { return c.allowedFor(l, true) }

func (c *Core) allowedFor(l *lun, strict bool) ([]string, bool) {
	if cap(c.scratch) < len(c.nodeNames) {
		c.scratch = make([]int, len(c.nodeNames))
	}
	count := c.scratch[:len(c.nodeNames)]
	clear(count)
	users := 0
	for name := range l.users { // counting: the order does not matter
		h := c.hosts[name]
		if !strict && c.settling(h) {
			continue
		}
		r := c.reachableIdx(h)
		if len(r) == 0 && strict {
			// Not judged yet (no path of its discovered): a planned move
			// goes only where it has a session, or where its I/O arrives.
			if r = c.connectedIdx(h); len(r) == 0 {
				r = c.arrivesIdx(l, name)
			}
		}
		if len(r) == 0 {
			continue
		}
		users++
		for _, i := range r {
			count[i]++
		}
		if strict {
			continue // nothing is moved where a user has no path
		}
		// A node the host left on purpose still counts for failover,
		// unless the host is the LUN's one user still doing I/O; so does a
		// node whose discovery may still come (pendingDiscovery), and a
		// node a host that has shown no multipath stack is logged in to
		// and has never used: it lost nothing there, it sends through
		// one path that no failover can change, and its I/O arriving at
		// a non-owner is forwarded (where it arrives is shipping's
		// business, with its ROI check).
		departed := len(h.departed) > 0 && !c.soleActiveUser(l, h)
		for i, n := range c.nodeNames {
			if slices.Contains(r, i) {
				continue
			}
			if _, ok := h.departed[n]; ok && departed || c.pendingDiscovery(h, n) ||
				!h.obs.multipath && !h.everReached[n] && c.connected(h, n) {
				count[i]++
			}
		}
	}
	up := c.upNodes()
	if users == 0 {
		return up, true
	}
	best, nBest := 0, 0
	for i, n := range c.nodeNames {
		if !c.nodes[n].up {
			continue
		}
		switch {
		case count[i] > best:
			best, nBest = count[i], 1
		case count[i] == best:
			nBest++
		}
	}
	if nBest == len(up) {
		return up, best == users
	}
	out := make([]string, 0, nBest)
	for i, n := range c.nodeNames {
		if c.nodes[n].up && count[i] == best {
			out = append(out, n)
		}
	}
	return out, best == users
}

// pendingDiscovery: the host does not reach node, but may yet: it joined
// less than a discovery window ago and has not reached node since (a
// booting host logs in portal by portal, and its multipath stack probes
// each new path for two thirds of a window before it counts), or it has
// a session there younger than a discovery window. No path of it there
// was lost: it is no reason for a failover.
func (c *Core) pendingDiscovery(h *host, node string) bool {
	if !h.had[node] && c.now-h.joinedAt < c.cfg.DiscoveryWindow {
		return true
	}
	for _, s := range h.nexuses {
		if s.n.Node == node && !s.discovered && c.pathUp(s) && c.now-s.since < c.cfg.DiscoveryWindow {
			return true
		}
	}
	return false
}

// connectedIdx lists, as indexes into nodeNames, the nodes the host has a
// session to through an up port.
func (c *Core) connectedIdx(h *host) []int {
	var out []int
	for i, n := range c.nodeNames {
		if c.connected(h, n) {
			out = append(out, i)
		}
	}
	return out
}

// arrivesIdx lists, as indexes into nodeNames, the nodes where host's
// media I/O to l arrives.
func (c *Core) arrivesIdx(l *lun, host string) []int {
	var out []int
	for i, n := range c.nodeNames {
		if l.hostArrive[host][n] > 0 {
			out = append(out, i)
		}
	}
	return out
}

// soleActiveUser: h is the only user of l with a session (a host that is
// away, rebooting or shut down, still counts as a user: its departure
// must not move the LUN), and its media I/O to l arrived in an interval
// after its last departure: it is still using the LUN through its other
// paths (a rebooting host, which logs out of its paths one after
// another, sends nothing in between).
func (c *Core) soleActiveUser(l *lun, h *host) bool {
	for name := range l.users {
		if o := c.hosts[name]; o != h && (len(o.nexuses) > 0 || o.away) {
			return false
		}
	}
	left := never
	for _, t := range h.departed {
		left = max(left, t)
	}
	ev := l.mediaSeen[h.name]
	return ev.ticks > 0 && ev.last > left
}

// activeWork is the rolling work per tick above which a host counts as
// doing I/O to a LUN.
const activeWork = 0.5

// evidence is a run of media I/O from a host through a node or to a LUN:
// the first and last ticks it arrived in and how many distinct ticks.
// A gap of a discovery window starts a new run.
type evidence struct{ first, last, ticks int }

// add notes media I/O at tick now.
func (c *Core) addEvidence(e evidence, now int) evidence {
	switch {
	case e.ticks == 0 || now-e.last >= c.evidenceGap():
		return evidence{first: now, last: now, ticks: 1}
	case now != e.last:
		e.last, e.ticks = now, e.ticks+1
	}
	return e
}

// usesNode: the host's media I/O through node proves its driver uses a
// path there: a run that proves use, still going two thirds of a
// discovery window after the host's oldest session there began. The
// disk scan at login is over by then, however slow the host (a guest
// under emulation scans its disks for tens of seconds).
func (c *Core) usesNode(h *host, node string) bool {
	for k, e := range h.media { // any LUN's run will do: the order does not matter
		if k.node == node && c.usesNodeFor(h, node, e) {
			return true
		}
	}
	return false
}

// usesOtherNode: the host's media I/O proves use of a node other than
// node.
func (c *Core) usesOtherNode(h *host, node string) bool {
	for k, e := range h.media { // any will do: the order does not matter
		if k.node != node && c.usesNodeFor(h, k.node, e) {
			return true
		}
	}
	return false
}

// mediaKey names a run of media I/O: through a node to a LUN.
type mediaKey struct {
	node string
	lun  uint64
}

// usesNodeFor: one run through node proves use.
func (c *Core) usesNodeFor(h *host, node string, e evidence) bool {
	if !c.proves(e) {
		return false
	}
	since, any := c.now, false
	for _, s := range h.nexuses {
		if s.n.Node == node {
			since, any = min(since, s.since), true
		}
	}
	return any && e.last >= since+2*c.cfg.DiscoveryWindow/3
}

// proves: the run is fresh, has MediaTicks distinct ticks, and spans a
// third of the discovery window. A disk scan reads a burst of blocks on
// every path at login and then nothing; a multipath driver that uses a
// path keeps using it.
func (c *Core) proves(e evidence) bool {
	span := max(c.cfg.MediaTicks-1, c.cfg.DiscoveryWindow/3)
	return e.ticks >= c.cfg.MediaTicks && e.last-e.first >= span && c.now-e.last < c.evidenceGap()
}

// evidenceGap: a gap this long ends a run (the discovery window, and
// never so short that MediaTicks ticks in a row cannot make one).
func (c *Core) evidenceGap() int { return max(c.cfg.DiscoveryWindow, 2*c.cfg.MediaTicks) }

// upNodes lists the up nodes in name order (cached until connectivity
// next changes; callers must not modify it).
func (c *Core) upNodes() []string {
	if c.upGen == c.gen && c.up != nil {
		return c.up
	}
	c.up = c.up[:0:0]
	for _, n := range c.nodeNames {
		if c.nodes[n].up {
			c.up = append(c.up, n)
		}
	}
	c.upGen = c.gen
	return c.up
}

// lunTPGS: every user of l follows ALUA, so the array may move it for
// balance (reference 002: host type configuration).
func (c *Core) lunTPGS(l *lun) bool {
	for name := range l.users {
		if h := c.hosts[name]; h != nil && !h.typ.TPGS {
			return false
		}
	}
	return true
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// rehome moves an initiator's nexuses from one host to another (Rehome).
// When they are all From has and To has none (a host declared for a
// logged-in initiator, or renamed), the host itself is renamed: what it
// was seen to do, the I/O it sent and its standing carry over, and only
// its type is To's. Otherwise each nexus joins To as a login with its
// discovery kept.
func (c *Core) rehome(e Rehome) {
	h := c.hosts[e.From]
	for _, name := range c.hostNames {
		if h == nil && strings.EqualFold(name, e.From) {
			h = c.hosts[name] // an undeclared host, known by its initiator name as the host sent it
		}
	}
	if h == nil || h.name == e.To {
		return
	}
	var keys []nexusKey
	for k := range h.nexuses {
		if strings.EqualFold(k.initiator, e.Initiator) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.SortFunc(keys, func(a, b nexusKey) int { return cmp.Or(cmp.Compare(a.port, b.port), cmp.Compare(a.isid, b.isid)) })
	to := c.hosts[e.To]
	c.gen++
	if (to == nil || len(to.nexuses) == 0) && len(keys) == len(h.nexuses) {
		typ := alua.HostTypes[alua.HostDefault]
		if to != nil {
			typ = to.typ
		}
		c.renameHost(h, e.To)
		if h.typ != typ {
			h.typ = typ
			h.obs.resetFollow()
			h.obs.mediaSince = -1
		}
		c.updateHandoffs([]string{h.name})
		return
	}
	to = c.hostOf(e.To)
	for _, k := range keys {
		s := h.nexuses[k]
		delete(h.nexuses, k)
		n := s.n
		n.Host = e.To
		if t := c.addNexus(to, n); s.discovered {
			t.discovered, t.byMedia, t.mediaProven = true, s.byMedia, s.mediaProven
		}
		c.forgetIfUnconnected(h, n.Node)
	}
	h.away = len(h.nexuses) == 0
	c.reconcile(to)
	c.updateHandoffs([]string{h.name, to.name})
}

// renameHost gives h the name to, in every table keyed by host name. A
// hand-off in force under the old name ends there (updateHandoffs sets
// it again under the new one).
func (c *Core) renameHost(h *host, to string) {
	from := h.name
	for _, n := range c.nodeNames {
		if h.handoff[n] {
			c.ready.Handoffs = append(c.ready.Handoffs, Handoff{Host: from, Node: n, On: false})
		}
	}
	clear(h.handoff)
	delete(c.hosts, from)
	c.hostNames = slices.DeleteFunc(c.hostNames, func(s string) bool { return s == from || s == to })
	h.name = to
	c.hosts[to] = h
	c.hostNames = append(c.hostNames, to)
	sort.Strings(c.hostNames)
	for _, s := range h.nexuses {
		s.n.Host = to
	}
	delete(c.reach, from)
	delete(c.reach, to)
	move := func(m map[string]bool) {
		if m[from] {
			delete(m, from)
			m[to] = true
		}
	}
	for _, id := range c.lunIDs {
		l := c.luns[id]
		move(l.users)
		if v, ok := l.hostArrive[from]; ok {
			delete(l.hostArrive, from)
			l.hostArrive[to] = v
		}
		if v, ok := l.hostPending[from]; ok {
			delete(l.hostPending, from)
			l.hostPending[to] = v
		}
		if v, ok := l.mediaSeen[from]; ok {
			delete(l.mediaSeen, from)
			l.mediaSeen[to] = v
		}
		if f := l.follow; f != nil {
			move(f.judge)
			move(f.followed)
		}
		if i := slices.Index(l.flapHosts, from); i >= 0 {
			l.flapHosts = slices.Delete(l.flapHosts, i, i+1)
			if !slices.Contains(l.flapHosts, to) {
				l.flapHosts = append(l.flapHosts, to)
			}
		}
	}
}
