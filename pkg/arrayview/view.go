// Package arrayview presents the array's ALUA state to the SCSI device
// server: it implements scsi.ALUA over pkg/array (which must not import
// pkg/scsi). The daemon and the whole-array simulation both wire the
// array to the device server through it; the unit attentions that
// announce a change are the control path's (pkg/drive). It imports
// pkg/array and pkg/scsi only.
package arrayview

import (
	"errors"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// View presents the array's ALUA state to the device server
// (scsi.ALUA). The array owns the states; this only translates.
type View struct {
	Arr *array.Array
	Srv *scsi.Server
	// HostBlind: the fabric cannot tell hosts apart on a device (TCMU),
	// so every host sees the states of a host of the default type, the
	// same states LIO's own gate is given.
	HostBlind bool
}

func (v View) initiator(n scsi.Nexus) string {
	if v.HostBlind {
		return ""
	}
	return n.InitiatorName
}

func (v View) TPGS() byte { return v.Arr.TPGS() }

func (v View) TransitionTime() byte { return v.Arr.TransitionTime() }

func (v View) PortGroup(port uint16) (uint16, bool) {
	p := v.Arr.Port(port)
	if p == nil {
		return 0, false
	}
	return p.Node.GroupID, true
}

func (v View) Groups(n scsi.Nexus, lun uint64) []scsi.PortGroupState {
	l := v.Arr.LUN(lun)
	if l == nil {
		return nil
	}
	gs := l.Groups(v.initiator(n))
	out := make([]scsi.PortGroupState, len(gs))
	for i, g := range gs {
		out[i] = scsi.PortGroupState{ID: g.ID, State: alua.AccessState(g.State), Pref: g.Pref, Status: g.Status,
			Ports: g.Ports}
	}
	return out
}

func (v View) State(n scsi.Nexus, lun uint64) alua.AccessState {
	l, p := v.Arr.LUN(lun), v.Arr.Port(n.TargetPort)
	if l == nil || p == nil {
		return alua.ActiveOptimized // nothing to gate: the LU check answers
	}
	return alua.AccessState(l.State(v.initiator(n), p.Node))
}

// SetTargetPortGroups passes an STPG to the array, which owns the
// decision, and maps the outcome to sense data.
func (v View) SetTargetPortGroups(n scsi.Nexus, lun uint64, reqs []alua.GroupRequest) error {
	if v.Arr.LUN(lun) == nil {
		return scsi.Sense(scsi.ReasonLUNotSupported)
	}
	greqs := make([]alua.GroupRequest, len(reqs))
	for i, r := range reqs {
		greqs[i] = alua.GroupRequest{Group: r.Group, State: alua.AccessState(r.State)}
	}
	moved, err := v.Arr.SetGroups(lun, greqs)
	switch {
	case errors.Is(err, array.ErrBadRequest):
		return scsi.Sense(scsi.ReasonInvalidFieldInParam)
	case err != nil:
		return scsi.Sense(scsi.ReasonSTPGFailed)
	}
	if moved {
		// SPC-4 5.15.2.2: the change is announced to every I_T nexus
		// other than the one that asked for it.
		v.Srv.ClearUA(n, lun, scsi.ReasonUAAsymmetricChanged)
	}
	return nil
}
