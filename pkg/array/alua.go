package array

import (
	"sort"
	"strings"

	"github.com/aluad/aluad/pkg/alua"
)

// Host is a declared host.
type Host struct {
	Name       string
	Type       alua.HostType
	Initiators []string
}

// aluaSnap is one LUN's ALUA state. It is never modified once published:
// a change stores a new snapshot, so every group of a LUN changes at once
// and no reader sees a half-made change (DESIGN: "change all groups of a
// LUN atomically").
type aluaSnap struct {
	owner *Node
	// moving: the groups of owner and target report TRANSITIONING.
	moving bool
	target *Node
	// status per node index: why that group's state last changed.
	status []byte
	// gen counts ownership changes of this LUN.
	gen uint64
}

// HostOf returns the host an initiator name belongs to, or an undeclared
// host of type "default" named by the initiator (lower-cased).
func (a *Array) HostOf(initiator string) Host {
	if h, ok := (*a.hosts.Load())[strings.ToLower(initiator)]; ok {
		return h
	}
	// An undeclared host is known by its initiator's name, lower-cased:
	// iSCSI names compare without case (RFC 3722), and every part of the
	// array must name the host the same way.
	return Host{Name: strings.ToLower(initiator), Type: alua.HostTypes[alua.HostDefault], Initiators: []string{initiator}}
}

// Hosts lists the declared hosts.
func (a *Array) Hosts() []Host {
	var out []Host
	seen := map[string]bool{}
	for _, h := range *a.hosts.Load() {
		if !seen[h.Name] {
			seen[h.Name] = true
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// State returns the access state of group (a node) for lun as reported to
// initiator (SPC-4 5.15.2.4). Order matters: a down node is unavailable
// whatever else holds; a group in a move is transitioning; while the
// owner is down the others are transitioning (implicit: the array takes
// the LUN over) or standby (explicit: a host's STPG does); the owner is
// active/optimized; other groups take the host type's non-owner state.
func (l *LUN) State(initiator string, group *Node) alua.AccessState {
	return l.stateIn(l.alua.Load(), initiator, group)
}

func (l *LUN) stateIn(s *aluaSnap, initiator string, group *Node) alua.AccessState {
	switch {
	case !group.Up():
		return alua.Unavailable
	case s.moving && (group == s.owner || group == s.target):
		return alua.Transitioning
	case !s.owner.Up():
		if l.arr.Explicit() {
			// The owner failed and only a host's STPG moves the LUN, as
			// on an explicit-ALUA array: the survivors are standby
			// (I/O gets 04/0B) and accept the STPG that takes it over.
			return alua.Standby
		}
		return alua.Transitioning // the array's own takeover is pending
	case group == s.owner:
		return alua.ActiveOptimized
	}
	return l.arr.nonOwnerState(initiator, s.owner)
}

// nonOwnerState is the state a group that does not own a LUN reports to
// initiator: its host type's, except that a STANDBY type's host handed
// off for the owner's node (it does not reach that node: it logged out
// of it, or lost its paths there) sees ANO, so its I/O is forwarded,
// never refused. With explicit ALUA a STANDBY path is the host's to take
// over by SET TARGET PORT GROUPS: nothing is handed off.
func (a *Array) nonOwnerState(initiator string, owner *Node) alua.AccessState {
	h := a.HostOf(initiator)
	if h.Type.Standby() && !a.Explicit() && a.HandedOff(h.Name, owner.Name) {
		return alua.ActiveNonOptimized
	}
	return h.Type.NonOwner
}

// HandedOff reports whether host's non-owner paths report ANO for the
// LUNs node owns although its type reports STANDBY: as last set, or the
// default (SetHandoffDefault) for a host and node never set.
func (a *Array) HandedOff(host, node string) bool {
	if m := a.handoff.Load(); m != nil {
		if on, ok := (*m)[host][node]; ok {
			return on
		}
	}
	return a.handoffDefault.Load()
}

// SetHandoffDefault sets what HandedOff says of a host and node that were
// never set: a controller of a cluster that does not run the ownership
// core hands every STANDBY-type host off (nothing there can tell when to
// hand it back).
func (a *Array) SetHandoffDefault(on bool) { a.handoffDefault.Store(on) }

// ClearHandoffs forgets every hand-off set: the default applies again (the
// core that set them stopped).
func (a *Array) ClearHandoffs() {
	a.handoffMu.Lock()
	a.handoff.Store(nil)
	a.handoffMu.Unlock()
}

// SetHandoff hands host's non-owner paths off to ANO for the LUNs node
// owns (on), or back to its type's state; it reports whether that
// changed anything. The caller announces the change (a unit attention on
// the host's nexuses for those LUNs).
func (a *Array) SetHandoff(host, node string, on bool) bool {
	a.handoffMu.Lock()
	defer a.handoffMu.Unlock()
	changed := a.HandedOff(host, node) != on
	next := map[string]map[string]bool{}
	if m := a.handoff.Load(); m != nil {
		for h, ns := range *m {
			next[h] = ns
		}
	}
	ns := map[string]bool{}
	for n, v := range next[host] {
		ns[n] = v
	}
	ns[node] = on
	next[host] = ns
	a.handoff.Store(&next)
	return changed
}

// OwnedBy lists the LUNs node owns now, in id order.
func (a *Array) OwnedBy(node string) []uint64 {
	var out []uint64
	for _, l := range a.LUNs {
		if l.Owner().Name == node {
			out = append(out, l.ID)
		}
	}
	return out
}

// GroupState is one target port group as reported for a LUN.
type GroupState struct {
	Node   *Node
	ID     uint16
	State  alua.AccessState
	Pref   bool
	Status byte
	Ports  []uint16
}

// Groups reports every group's state for the LUN as seen by initiator,
// from one snapshot.
//
// PREF marks the owner's group, not the configured preferred owner: the
// array moves LUNs by itself, and Linux multipath-tools' prio alua ranks
// a PREF group that is not optimized at 90, above an optimized group (50),
// so a PREF bit left on the home node kept dm-multipath (group_by_prio,
// failback immediate) on the old owner after every move (found in the
// QEMU lab, cluster-tests). A down owner's group loses PREF: no group has
// it until a takeover or the owner's restart.
func (l *LUN) Groups(initiator string) []GroupState {
	s := l.alua.Load()
	out := make([]GroupState, 0, len(l.arr.Nodes))
	for _, n := range l.arr.Nodes {
		g := GroupState{Node: n, ID: n.GroupID, Pref: n == s.owner && n.Up(), Status: s.status[n.Index],
			State: l.stateIn(s, initiator, n)}
		for _, p := range n.Ports {
			g.Ports = append(g.Ports, p.RelativeID)
		}
		out = append(out, g)
	}
	return out
}

// Moving reports whether the LUN is in an ownership transition.
func (l *LUN) Moving() bool { return l.alua.Load().moving }

// Generation counts the LUN's ownership changes since start.
func (l *LUN) Generation() uint64 { return l.alua.Load().gen }

// TPGS is the INQUIRY TPGS field: 01b implicit only, 11b when hosts may
// also set states explicitly (the baseline mode).
func (a *Array) TPGS() byte {
	if a.cfg.ALUA == "explicit" {
		return 0x3
	}
	return 0x1
}

// Explicit reports whether SET TARGET PORT GROUPS is honoured.
func (a *Array) Explicit() bool { return a.cfg.ALUA == "explicit" }

// TransitionTime is the implicit transition time in seconds (RTPG byte 5).
func (a *Array) TransitionTime() byte { return byte(a.cfg.TransitionTime.Seconds()) }

// NodeByGroup returns the node whose target port group id is id.
func (a *Array) NodeByGroup(id uint16) *Node {
	for _, n := range a.Nodes {
		if n.GroupID == id {
			return n
		}
	}
	return nil
}
