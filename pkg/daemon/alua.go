package daemon

import (
	"errors"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// aluaView presents the array's ALUA state to the device server
// (scsi.ALUA). The array owns the states; this only translates.
type aluaView struct {
	arr *array.Array
	srv *scsi.Server
}

func (v aluaView) TPGS() byte { return v.arr.TPGS() }

func (v aluaView) TransitionTime() byte { return v.arr.TransitionTime() }

func (v aluaView) PortGroup(port uint16) (uint16, bool) {
	p := v.arr.Port(port)
	if p == nil {
		return 0, false
	}
	return p.Node.GroupID, true
}

func (v aluaView) Groups(n scsi.Nexus, lun uint64) []scsi.PortGroupState {
	l := v.arr.LUN(lun)
	if l == nil {
		return nil
	}
	gs := l.Groups(n.InitiatorName)
	out := make([]scsi.PortGroupState, len(gs))
	for i, g := range gs {
		out[i] = scsi.PortGroupState{ID: g.ID, State: scsi.AccessState(g.State), Pref: g.Pref, Status: g.Status,
			Ports: g.Ports}
	}
	return out
}

func (v aluaView) State(n scsi.Nexus, lun uint64) scsi.AccessState {
	l, p := v.arr.LUN(lun), v.arr.Port(n.TargetPort)
	if l == nil || p == nil {
		return scsi.StateActiveOptimized // nothing to gate: the LU check answers
	}
	return scsi.AccessState(l.State(n.InitiatorName, p.Node))
}

// SetTargetPortGroups honours STPG the way the explicit baseline does:
// ownership moves at once to the group asked to be active/optimized (or,
// when the owner's group is asked to step down, to the first other group
// that is up), flushing before I/O is served again.
func (v aluaView) SetTargetPortGroups(n scsi.Nexus, lun uint64, reqs []scsi.TPGRequest) error {
	l := v.arr.LUN(lun)
	if l == nil {
		return scsi.Sense(scsi.ReasonLUNotSupported)
	}
	var to *array.Node
	demote := false
	for _, r := range reqs {
		g := v.arr.NodeByGroup(r.Group)
		if g == nil {
			return scsi.Sense(scsi.ReasonInvalidFieldInParam)
		}
		switch r.State {
		case scsi.StateActiveOptimized:
			if to != nil && to != g || !g.Up() {
				return scsi.Sense(scsi.ReasonInvalidFieldInParam)
			}
			to = g
		case scsi.StateActiveNonOptimized, scsi.StateStandby:
			if g == l.Owner() {
				demote = true
			}
		default: // a host may not make a node unavailable, offline or transitioning
			return scsi.Sense(scsi.ReasonInvalidFieldInParam)
		}
	}
	if to == nil && demote {
		for _, g := range v.arr.Nodes {
			if g != l.Owner() && g.Up() {
				to = g
				break
			}
		}
		if to == nil {
			return scsi.Sense(scsi.ReasonInvalidFieldInParam)
		}
	}
	if to == nil || to == l.Owner() {
		return nil
	}
	_, err := v.arr.Move([]uint64{lun}, to.Name, array.CauseSTPG)
	switch {
	case errors.Is(err, array.ErrNoChange):
		return nil
	case err != nil:
		return scsi.Sense(scsi.ReasonSTPGFailed)
	}
	// SPC-4 5.15.2.2: the change is announced to every I_T nexus other
	// than the one that asked for it.
	v.srv.ClearUA(n, lun, scsi.ReasonUAAsymmetricChanged)
	return nil
}

// announce turns an array change into unit attentions: 2A/06 on every
// I_T nexus of every LUN in it, or 2A/07 when the transition failed
// (SPC-4 5.15.2.3).
func announce(srv *scsi.Server, c array.Change) {
	r := scsi.ReasonUAAsymmetricChanged
	if c.Failed {
		if c.Cause == array.CauseSTPG {
			return // rolled back; the STPG itself reports the failure
		}
		r = scsi.ReasonUAImplicitTransitionFailed
	}
	for _, lun := range c.LUNs {
		srv.QueueUA(lun, false, r)
	}
}
