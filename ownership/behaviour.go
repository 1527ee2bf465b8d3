package ownership

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/aluad/aluad/pkg/alua"
)

// Observed host behaviour: whether a host's multipath stack follows the
// array's moves, judged from where its media I/O arrives after each
// planned move (failback, balance, shipping, an operator's move), not
// from the flag of its declared type. A host that keeps its I/O on the
// old owner is "not following": moves of its LUNs are then not worth
// their cost (its I/O would be forwarded), its LUNs are shipped to where
// its I/O arrives even within the cooldown, and Host Type Incorrect is
// raised with the type that would fit.

// follow states
const (
	followUnknown = iota
	followYes
	followNo
)

type hostObs struct {
	state int
	// lastFollow: the tick it last followed a move; notFollowAt: when it
	// was last judged not to (-1: never).
	lastFollow, notFollowAt int
	// notFollowLUN/notFollowFrom/notFollowTo: the move it did not follow.
	notFollowLUN               uint64
	notFollowFrom, notFollowTo string
	// rtpg: it has sent RTPG; extended: with the extended header (the
	// mark of Linux scsi_dh_alua).
	rtpg, extended bool
	// mediaSince: the first tick its media I/O arrived (-1: never).
	mediaSince int
	// initiator: its initiator name, for the IQN naming authority.
	initiator string
	// multipath: it has shown a multipath stack (used two nodes at once:
	// handoff.go usesTwoNodesAtOnce): its RTPGs on new paths discover them.
	// confirmed: it showed it past the attach window after its latest
	// login (a scan at attach is over by then), shown without a lapse for
	// an attach window (a rescan, or two, or one slow scan, is over by
	// then), or followed a move; only an unconfirmed standing can end
	// (connectivity.go silentNode).
	multipath, confirmed bool
	// shownAt: since when its standing has been shown without a lapse
	// (showing); byName: confirmed by its initiator's name.
	shownAt         int
	showing, byName bool
	// splitShare: when it was judged not to follow, the share of its I/O
	// that did arrive at the new owner (a policy that spreads I/O over
	// every node's paths sends a good part there).
	splitShare float64
}

func (o *hostObs) resetFollow() { o.state, o.notFollowAt = followUnknown, -1 }

// followCheck watches who follows one move: the users whose I/O did not
// already arrive mostly at the new owner when it moved (a LUN shipped to
// where a host sends says nothing of whether it follows). Every move is
// watched, failovers included (there only the hosts that could have
// stayed: those that still reach the old owner).
type followCheck struct {
	at       int
	to       string
	judge    map[string]bool
	followed map[string]bool
}

func (c *Core) startFollow(l *lun, from string, cause alua.Cause) {
	f := &followCheck{at: c.now, to: l.owner, judge: map[string]bool{}, followed: map[string]bool{}}
	for name, arr := range l.hostArrive { // a set: the order does not matter
		load := l.hostLoad(name)
		if load < activeWork || arr[l.owner] >= c.cfg.ShipShare*load {
			continue
		}
		// After a failover only a host that still reaches the old owner
		// had a choice: one that lost it proves nothing by moving.
		if h := c.hosts[name]; cause == alua.CauseFailover && (h == nil || !c.reaches(h, from)) {
			continue
		}
		f.judge[name] = true
	}
	if len(f.judge) == 0 {
		return
	}
	l.follow = f
}

// follows: the array may count on h moving its I/O after a move of its
// LUNs: its type follows ALUA and it has not been seen not to.
func (c *Core) follows(h *host) bool { return h.typ.TPGS && h.obs.state != followNo }

// trackFollow judges, each tick, the hosts using LUNs whose planned move
// is being watched: a host whose media I/O arrives mostly (ShipShare) at
// the new owner follows; one whose I/O still arrives elsewhere when
// FollowWindow has passed does not. Only hosts that reach the new owner
// are judged (one that cannot reach it is a connectivity matter).
func (c *Core) trackFollow() {
	for _, id := range c.lunIDs {
		l := c.luns[id]
		f := l.follow
		if f == nil {
			continue
		}
		if l.owner != f.to {
			l.follow = nil
			continue
		}
		hosts := slices.Sorted(maps.Keys(f.judge))
		done := c.now-f.at >= c.cfg.FollowWindow
		for _, name := range hosts {
			h := c.hosts[name]
			load := l.hostLoad(name)
			if h == nil || load < activeWork || f.followed[name] || !c.reaches(h, f.to) {
				continue
			}
			if l.hostArrive[name][f.to] >= c.cfg.ShipShare*load {
				f.followed[name] = true
				h.obs.state, h.obs.lastFollow = followYes, c.now
				continue
			}
			if done {
				from, best := "", 0.0
				for _, n := range c.nodeNames {
					if v := l.hostArrive[name][n]; n != f.to && v > best {
						from, best = n, v
					}
				}
				h.obs.state, h.obs.notFollowAt = followNo, c.now
				h.obs.notFollowLUN, h.obs.notFollowFrom, h.obs.notFollowTo = l.id, from, f.to
				h.obs.splitShare = l.hostArrive[name][f.to] / load
			}
		}
		if done {
			l.follow = nil
		}
	}
}

// forwardDelta is how much more of l's work per tick would be forwarded
// (arrive at a node that does not own it) if l moved to dest, counting
// only the users that will not follow a move: followers move their I/O
// with the LUN. unknown is the same for the users not yet seen to follow
// or not (no move of their LUNs watched yet), who count as followers in
// delta. Negative: the move forwards less.
func (c *Core) forwardDelta(l *lun, dest string) (delta, unknown float64) {
	for _, name := range slices.Sorted(maps.Keys(l.hostArrive)) {
		h := c.hosts[name]
		if h == nil {
			continue
		}
		arr := l.hostArrive[name]
		d := arr[l.owner] - arr[dest] // forwarded after minus before
		switch {
		case !c.follows(h):
			delta += d
		case h.obs.state == followUnknown:
			unknown += d
		}
	}
	return delta, unknown
}

// strandsNonFollower: moving l to dest would take it away from where a
// user that does not follow moves (by type, or as seen) sends its I/O:
// that user's I/O would be forwarded for as long as the LUN stays.
func (c *Core) strandsNonFollower(l *lun, dest string) bool {
	for _, name := range c.sortedUsers(l) {
		h := c.hosts[name]
		load := l.hostLoad(name)
		if h == nil || c.follows(h) || load < activeWork {
			continue
		}
		if l.hostArrive[name][dest] < c.cfg.ShipShare*load {
			return true
		}
	}
	return false
}

// IQN naming authorities of the initiators that ship with common stacks.
var iqnAuthorities = []iqnAuth{
	{"iqn.1993-08.org.debian", "open-iscsi (Debian, Ubuntu)", alua.HostLinuxDMMP},
	{"iqn.2004-10.com.ubuntu", "open-iscsi (Ubuntu)", alua.HostLinuxDMMP},
	{"iqn.1994-05.com.redhat", "open-iscsi (Red Hat)", alua.HostLinuxDMMP},
	{"iqn.1996-04.de.suse", "open-iscsi (SUSE)", alua.HostLinuxDMMP},
	{"iqn.2005-03.org.open-iscsi", "open-iscsi", alua.HostLinuxDMMP},
	{"iqn.1991-05.com.microsoft", "the Microsoft iSCSI initiator (MSDSM)", alua.HostWindows},
	{"iqn.1998-01.com.vmware", "the VMware software iSCSI adapter (NMP)", alua.HostVMware},
}

type iqnAuth struct{ prefix, stack, typ string }

// iqnAuthority finds the stack whose naming authority the initiator's
// name bears.
func iqnAuthority(initiator string) (iqnAuth, bool) {
	for _, a := range iqnAuthorities {
		if strings.HasPrefix(strings.ToLower(initiator), a.prefix) {
			return a, true
		}
	}
	return iqnAuth{}, false
}

// iqnStack is the host type of the stack the initiator's name names ("").
func iqnStack(initiator string) string {
	a, _ := iqnAuthority(initiator)
	return a.typ
}

// suggestType says which host type fits what the host was seen to do,
// and why ("" when its type fits, or nothing is known): a host seen not
// to follow moves fits a type whose non-owner paths it must leave
// (linux-dmmp, for a Linux stack: its IQN's naming authority or
// scsi_dh_alua's extended-header RTPG) or one the array never moves
// (legacy); a host that never reads RTPG fits legacy; an undeclared host
// (type default) fits the type of the stack its IQN or RTPG pattern
// names. The array never changes a declared type by itself.
func (c *Core) suggestType(h *host) (typ, why string) {
	stack, stackTyp := "", ""
	if a, ok := iqnAuthority(h.obs.initiator); ok {
		stack, stackTyp = a.stack, a.typ
	}
	linux := stackTyp == alua.HostLinuxDMMP || stackTyp == "" && h.obs.extended
	evidence := func() string {
		var parts []string
		if stack != "" {
			parts = append(parts, fmt.Sprintf("its initiator name is %s's", stack))
		}
		if h.obs.extended {
			parts = append(parts, "it reads RTPG with the extended header as Linux scsi_dh_alua does")
		}
		return strings.Join(parts, " and ")
	}
	switch {
	case !c.multipathShown(h) && c.connectedCount(h) > 1:
		// No multipath stack: no host type helps (a STANDBY type would
		// turn its only paths STANDBY); Multipath Not Discovering Paths
		// says what to do.
		return "", ""
	case c.neverRTPG(h):
		return alua.HostLegacy, "it has never read RTPG: its multipath stack ignores ALUA"
	case h.obs.state == followNo && c.splitsIO(h):
		return "", "" // its load-balance policy, not its type (hostTypeIncorrect)
	case h.obs.state == followNo && linux && !h.typ.Standby():
		why := evidence()
		if why != "" {
			why += "; "
		}
		return alua.HostLinuxDMMP, why + "dm-multipath at its defaults (failback manual) keeps I/O on active/non-optimized " +
			"paths, and the DM-MP type's standby non-owner paths make it leave them at once"
	case h.obs.state == followNo:
		return alua.HostLegacy, "it does not follow moves: the array then never moves its LUNs for balance"
	case h.typ.Name == alua.HostDefault && stackTyp != "":
		return stackTyp, evidence()
	case h.typ.Name == alua.HostDefault && linux:
		return alua.HostLinuxDMMP, evidence()
	}
	return "", ""
}

// multipathShown: the host has shown a multipath stack: it has reached
// two nodes or more by evidence scans cannot give (its stack probes or
// uses paths on each: trackReach), or it followed a move.
func (c *Core) multipathShown(h *host) bool {
	return h.obs.multipath || h.obs.state == followYes
}

// splitsIO: when judged not to follow, a good part of its I/O (a quarter
// or more) did arrive at the new owner: its load-balance policy spreads
// I/O over every node's paths (Windows Round Robin, VMware RR without
// SATP_ALUA, dm-multipath multibus), which no host type changes.
func (c *Core) splitsIO(h *host) bool { return h.obs.splitShare >= 1-c.cfg.ShipShare }

// policyAdvice names the load-balance policy that keeps a stack's I/O on
// the optimized paths.
func (c *Core) policyAdvice(h *host) string {
	switch c.stackType(h) {
	case alua.HostWindows:
		return "set its MPIO load-balance policy to Round Robin with Subset (MSDSM), which uses the active/optimized paths only"
	case alua.HostVMware:
		return "claim the LUNs with VMW_SATP_ALUA and use VMW_PSP_MRU, or VMW_PSP_RR, which round-robins over the active/optimized paths only"
	}
	return "set its multipath policy to group paths by priority (dm-multipath: path_grouping_policy group_by_prio with prio alua), not multibus"
}

// stackType is the host type of the stack the host's initiator name or
// declared type names ("" if neither says).
func (c *Core) stackType(h *host) string {
	if t := iqnStack(h.obs.initiator); t != "" {
		return t
	}
	switch h.typ.Name {
	case alua.HostWindows, alua.HostVMware:
		return h.typ.Name
	}
	return ""
}

// neverRTPG: the host is a proven user of some LUN (sustained media I/O)
// for the discovery window and has never read RTPG.
func (c *Core) neverRTPG(h *host) bool {
	return len(h.uses) > 0 && h.obs.mediaSince >= 0 && !h.obs.rtpg && c.now-h.obs.mediaSince >= c.cfg.DiscoveryWindow
}

// HostBehaviour is what a host was seen to do beside its declared type.
type HostBehaviour struct {
	Host, Type string
	// Follows: "yes", "no" or "unknown" (no planned move of its LUNs
	// has been watched yet); LastFollow the tick it last followed (-1).
	Follows    string
	LastFollow int
	// RTPG: it has read RTPG; Extended: with the extended header.
	RTPG, Extended bool
	// Multipath: it has shown a multipath stack (reached two nodes or
	// followed a move): its RTPG on a new path discovers that path.
	Multipath bool
	// Suggest is the type its behaviour fits ("": nothing to say), Why
	// the evidence.
	Suggest, Why string
}

// ShownMultipath reports whether host has shown a multipath stack (its
// RTPG on a new path then discovers that path).
func (c *Core) ShownMultipath(host string) bool {
	h := c.hosts[host]
	return h != nil && h.obs.multipath
}

// HostBehaviours reports every host's observed behaviour, in host order.
func (c *Core) HostBehaviours() []HostBehaviour {
	out := make([]HostBehaviour, 0, len(c.hostNames))
	for _, name := range c.hostNames {
		h := c.hosts[name]
		b := HostBehaviour{Host: name, Type: h.typ.Name, Follows: "unknown", LastFollow: h.obs.lastFollow,
			RTPG: h.obs.rtpg, Extended: h.obs.extended, Multipath: h.obs.multipath}
		switch h.obs.state {
		case followYes:
			b.Follows = "yes"
		case followNo:
			b.Follows = "no"
		}
		if t, why := c.suggestType(h); t != h.typ.Name {
			b.Suggest, b.Why = t, why
		}
		out = append(out, b)
	}
	return out
}

// hostTypeIncorrect says why h's declared type does not fit what it was
// seen to do ("" when it fits): a type that follows ALUA whose host kept
// its I/O on the old owner after a planned move, or never read RTPG.
func (c *Core) hostTypeIncorrect(h *host) string {
	if !h.typ.TPGS || len(h.nexuses) == 0 {
		return ""
	}
	if !c.multipathShown(h) && c.connectedCount(h) > 1 {
		return "" // no multipath stack: Multipath Not Discovering Paths says so
	}
	typ, why := c.suggestType(h)
	fit := ""
	if typ != "" && typ != h.typ.Name {
		fit = fmt.Sprintf("; the type that fits is %s (%s)", typ, why)
	}
	switch {
	case h.obs.state == followNo && c.splitsIO(h):
		return fmt.Sprintf("host %s splits its I/O to LUN %d across nodes: %.0f%% of it arrived through node %s %s after "+
			"the LUN moved there, the rest through node %s; that is its load-balance policy, not its host type, and no "+
			"host type stops the forwarding: %s",
			h.name, h.obs.notFollowLUN, 100*h.obs.splitShare, h.obs.notFollowTo, c.span(c.cfg.FollowWindow),
			h.obs.notFollowFrom, c.policyAdvice(h))
	case h.obs.state == followNo:
		return fmt.Sprintf("host %s is declared %s, which follows ALUA changes, but its I/O to LUN %d still arrived "+
			"through node %s %s after the LUN moved to node %s%s",
			h.name, h.typ.Name, h.obs.notFollowLUN, h.obs.notFollowFrom, c.span(c.cfg.FollowWindow), h.obs.notFollowTo, fit)
	case c.neverRTPG(h):
		return fmt.Sprintf("host %s is declared %s, which reads REPORT TARGET PORT GROUPS, but it has sent media I/O "+
			"for %s and never an RTPG%s", h.name, h.typ.Name, c.span(c.now-h.obs.mediaSince), fit)
	}
	return ""
}

// clearReport is the operator clearing a latched condition.
func (c *Core) clearReport(e ClearReport) error {
	switch e.Condition {
	case PathFlapping:
		l := c.luns[e.LUN]
		if l == nil {
			return fmt.Errorf("ownership: no LUN %d", e.LUN)
		}
		if l.damped < 0 {
			return fmt.Errorf("ownership: LUN %d is not damped", e.LUN)
		}
		l.damped, l.failovers, l.flapHosts = -1, nil, nil // the operator's word: counting starts again
		c.reconcile(nil)
	case HostTypeIncorrect:
		h := c.hosts[e.Host]
		if h == nil {
			return fmt.Errorf("ownership: no host %q", e.Host)
		}
		h.obs.resetFollow()
		h.obs.mediaSince = -1
	case NodeUnstable:
		n := c.nodes[e.Node]
		if n == nil {
			return fmt.Errorf("ownership: no node %q", e.Node)
		}
		if !c.unstable(e.Node) {
			return fmt.Errorf("ownership: node %s is not unstable", e.Node)
		}
		n.failures, n.unstable = nil, false // the operator's word: counting starts again
		c.reconcile(nil)
	default:
		return fmt.Errorf("ownership: %s clears by itself; only %s, %s and %s are cleared by the operator",
			e.Condition, PathFlapping, HostTypeIncorrect, NodeUnstable)
	}
	return nil
}
