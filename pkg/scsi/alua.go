package scsi

import (
	"encoding/binary"
	"fmt"

	"github.com/aluad/aluad/pkg/alua"
)

// PortGroupState is one target port group as RTPG reports it for a LU.
type PortGroupState struct {
	ID     uint16
	State  alua.AccessState
	Pref   bool
	Status byte // 0 none, 1 altered by SET TARGET PORT GROUPS, 2 altered by implicit behaviour
	Ports  []uint16
}

// ALUA is the array's view of asymmetric access that the device server
// consults. The array implements it; this package only reports and gates.
type ALUA interface {
	// TPGS is the INQUIRY TPGS field: 01b implicit, 10b explicit, 11b both.
	TPGS() byte
	// PortGroup maps a relative target port id to its target port group.
	PortGroup(port uint16) (uint16, bool)
	// Groups returns every target port group's state for lun as reported
	// to the initiator of n (the state of a non-owner group may depend on
	// the host type), all taken at one instant.
	Groups(n Nexus, lun uint64) []PortGroupState
	// State is the access state of the group holding n's target port.
	State(n Nexus, lun uint64) alua.AccessState
	// TransitionTime is the implicit transition time in seconds (RTPG byte 5).
	TransitionTime() byte
	// SetTargetPortGroups applies an explicit request (only called when
	// TPGS has the explicit bit). A returned *SenseError is reported as is.
	SetTargetPortGroups(n Nexus, lun uint64, reqs []alua.GroupRequest) error
}

// Observer is told what hosts do that the array's control path learns
// from. Calls come from command goroutines and must not block.
type Observer interface {
	// RTPG: a REPORT TARGET PORT GROUPS for lun arrived on nexus n.
	RTPG(n Nexus, lun uint64, extended bool)
	// UnitAttention: a pending unit attention r was reported to nexus n
	// for lun (as CHECK CONDITION, or as REQUEST SENSE data).
	UnitAttention(n Nexus, lun uint64, r Reason)
}

// AnnounceALUAChange queues the unit attention that tells every I_T
// nexus of luns their asymmetric access states changed (SPC-4 5.15.2.3):
// ASYMMETRIC ACCESS STATE CHANGED (2A/06) once a change took effect;
// IMPLICIT ASYMMETRIC ACCESS STATE TRANSITION FAILED (2A/07) when the
// array's own transition failed and the states went back; nothing for a
// failed explicit one (SET TARGET PORT GROUPS reports it in its status).
func (s *Server) AnnounceALUAChange(luns []uint64, failed, explicit bool) {
	r := ReasonUAAsymmetricChanged
	if failed {
		if explicit {
			return
		}
		r = ReasonUAImplicitTransitionFailed
	}
	for _, lun := range luns {
		s.QueueUA(lun, false, r)
	}
}

// reportTargetPortGroups answers REPORT TARGET PORT GROUPS (SPC-4 6.36) in
// the length-only (000b) or extended (001b) parameter data format.
func reportTargetPortGroups(x *exec) ([]byte, error) {
	cdb := x.cdb()
	format := cdb[1] >> 5
	allocLen := int(be32(cdb[6:]))
	if format > 1 {
		return nil, InvalidCDBField(1, 7)
	}
	if o := x.s.observer; o != nil {
		o.RTPG(x.c.Nexus, x.c.LUN, format == 1)
	}
	b := AppendRTPG(nil, x.s.alua.Groups(x.c.Nexus, x.c.LUN), format == 1, x.s.alua.TransitionTime())
	return alloc(b, allocLen), nil
}

// AppendRTPG appends REPORT TARGET PORT GROUPS parameter data for groups
// in the length-only or the extended (FORMAT TYPE 001b) format.
func AppendRTPG(b []byte, groups []PortGroupState, extended bool, transitionTime byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	if extended {
		b = append(b, 0x10, transitionTime, 0, 0) // FORMAT TYPE 001b, IMPLICIT TRANSITION TIME
	}
	for _, g := range groups {
		st := byte(g.State) & 0x0f
		if g.Pref {
			st |= 0x80
		}
		// T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP (O_SUP and LBD_SUP: no).
		b = append(b, st, 0x80|0x08|0x04|0x02|0x01, byte(g.ID>>8), byte(g.ID), 0, g.Status, 0, byte(len(g.Ports)))
		for _, p := range g.Ports {
			b = append(b, 0, 0, byte(p>>8), byte(p))
		}
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// ParseRTPG parses REPORT TARGET PORT GROUPS parameter data (either
// format). It is the inverse of AppendRTPG; initiators and tests use it.
func ParseRTPG(b []byte) (groups []PortGroupState, extended bool, transitionTime byte, err error) {
	if len(b) < 4 {
		return nil, false, 0, fmt.Errorf("rtpg: %d bytes, need 4", len(b))
	}
	n := int(be32(b))
	end := 4 + n
	if end > len(b) || n < 0 {
		return nil, false, 0, fmt.Errorf("rtpg: length %d exceeds the %d bytes returned", n, len(b)-4)
	}
	off := 4
	if n >= 4 && b[4]&0x70 == 0x10 {
		extended, transitionTime, off = true, b[5], 8
	}
	for off < end {
		if off+8 > end {
			return nil, false, 0, fmt.Errorf("rtpg: truncated descriptor at byte %d", off)
		}
		d := b[off:]
		g := PortGroupState{State: alua.AccessState(d[0] & 0x0f), Pref: d[0]&0x80 != 0, ID: be16(d[2:]), Status: d[5]}
		cnt := int(d[7])
		off += 8
		if off+4*cnt > end {
			return nil, false, 0, fmt.Errorf("rtpg: group %d lists %d ports past the end", g.ID, cnt)
		}
		for i := 0; i < cnt; i++ {
			g.Ports = append(g.Ports, be16(b[off+4*i+2:]))
		}
		off += 4 * cnt
		groups = append(groups, g)
	}
	return groups, extended, transitionTime, nil
}

// ParseSTPG parses SET TARGET PORT GROUPS parameter data (SPC-4 6.46): a
// 4-byte reserved header, then 4-byte descriptors.
func ParseSTPG(b []byte) ([]alua.GroupRequest, error) {
	if len(b) < 4 || (len(b)-4)%4 != 0 {
		return nil, Sense(ReasonParamListLength)
	}
	var out []alua.GroupRequest
	for off := 4; off < len(b); off += 4 {
		out = append(out, alua.GroupRequest{State: alua.AccessState(b[off] & 0x0f), Group: be16(b[off+2:])})
	}
	return out, nil
}

// AppendSTPG appends SET TARGET PORT GROUPS parameter data for reqs (the
// initiator side of ParseSTPG).
func AppendSTPG(b []byte, reqs []alua.GroupRequest) []byte {
	b = append(b, 0, 0, 0, 0)
	for _, r := range reqs {
		b = append(b, byte(r.State)&0x0f, 0, byte(r.Group>>8), byte(r.Group))
	}
	return b
}

// setTargetPortGroups handles SET TARGET PORT GROUPS (SPC-4 6.46) in the
// explicit mode; maintenanceOut has already refused it in implicit-only
// mode (TPGS 01b), where the command is not supported.
func setTargetPortGroups(x *exec) ([]byte, error) {
	plen := int(be32(x.cdb()[6:]))
	x.dataOutLen = plen
	if plen == 0 {
		return nil, nil
	}
	d, err := x.dataOut(plen)
	if err != nil {
		return nil, err
	}
	reqs, err := ParseSTPG(d)
	if err != nil {
		return nil, err
	}
	return nil, x.s.alua.SetTargetPortGroups(x.c.Nexus, x.c.LUN, reqs)
}

// ALUA gate (CONVENTIONS 5, LIO target_alua_state_check). Which commands a
// LU accepts through a target port in each asymmetric access state:
//
//   - Active/optimized, active/non-optimized: every command (SPC-4
//     5.15.2.4.2, 5.15.2.4.3).
//   - Standby (SPC-4 5.15.2.4.4; SBC-3 4.22 adds READ CAPACITY): INQUIRY,
//     LOG SELECT/SENSE, MODE SELECT/SENSE, REPORT LUNS, RECEIVE/SEND
//     DIAGNOSTIC, REPORT/SET TARGET PORT GROUPS, REQUEST SENSE, PERSISTENT
//     RESERVE IN/OUT, READ CAPACITY; others get 04/0B.
//   - Unavailable (SPC-4 5.15.2.4.5): INQUIRY, REPORT LUNS, REPORT/SET
//     TARGET PORT GROUPS, REQUEST SENSE; others get 04/0C.
//   - Transitioning (SPC-4 5.15.2.4.6): INQUIRY, REPORT LUNS, REPORT TARGET
//     PORT GROUPS, REQUEST SENSE; others get 04/0A.
type aluaAllow byte

const (
	allowStandby aluaAllow = 1 << iota
	allowUnavailable
	allowTransitioning
	allowAll = allowStandby | allowUnavailable | allowTransitioning
)

// aluaAllowed returns what opcode/service action op/sa may do.
func aluaAllowed(cdb []byte) aluaAllow {
	op := &opTable[cdb[0]]
	sa := cdb[1] & 0x1f
	switch cdb[0] {
	case OpMaintenanceIn:
		if sa == SAReportTPG {
			return allowAll
		}
		return 0
	case OpMaintenanceOut:
		if sa == SASetTPG {
			return allowStandby | allowUnavailable
		}
		return 0
	case OpServiceActionIn16:
		if sa == SAReadCapacity16 {
			return allowStandby
		}
		return 0
	}
	return op.alua
}

// aluaGate returns the access state of the command's target port for its
// LU and the NOT READY sense if that state does not allow the command.
func (s *Server) aluaGate(c *Command) (alua.AccessState, *SenseError) {
	if s.alua == nil {
		return alua.ActiveOptimized, nil
	}
	var need aluaAllow
	var r Reason
	st := s.alua.State(c.Nexus, c.LUN)
	switch st {
	case alua.ActiveOptimized, alua.ActiveNonOptimized:
		return st, nil
	case alua.Standby:
		need, r = allowStandby, ReasonNotReadyStandby
	case alua.Transitioning:
		need, r = allowTransitioning, ReasonNotReadyTransitioning
	default: // unavailable, offline
		need, r = allowUnavailable, ReasonNotReadyUnavailable
	}
	if aluaAllowed(c.CDB)&need != 0 {
		return st, nil
	}
	return st, Sense(r)
}
