package scsi

import "encoding/binary"

// AccessState is an asymmetric access state (SPC-4 5.15.2.4).
type AccessState byte

const (
	StateActiveOptimized    AccessState = 0x0
	StateActiveNonOptimized AccessState = 0x1
	StateStandby            AccessState = 0x2
	StateUnavailable        AccessState = 0x3
	StateOffline            AccessState = 0xe
	StateTransitioning      AccessState = 0xf
)

// PortGroupState is one target port group as RTPG reports it for a LU.
type PortGroupState struct {
	ID     uint16
	State  AccessState
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
	// Groups returns every target port group's state for lun.
	Groups(lun uint64) []PortGroupState
	// TransitionTime is the implicit transition time in seconds (RTPG byte 5).
	TransitionTime() byte
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
	hdr := 4
	if format == 1 {
		hdr = 8
	}
	b := make([]byte, hdr)
	if format == 1 {
		b[4] = 0x10 // FORMAT TYPE 001b
		b[5] = x.s.alua.TransitionTime()
	}
	for _, g := range x.s.alua.Groups(x.c.LUN) {
		d := make([]byte, 8, 8+4*len(g.Ports))
		d[0] = byte(g.State) & 0x0f
		if g.Pref {
			d[0] |= 0x80
		}
		// T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP (O_SUP and LBD_SUP: no).
		d[1] = 0x80 | 0x08 | 0x04 | 0x02 | 0x01
		binary.BigEndian.PutUint16(d[2:], g.ID)
		d[5] = g.Status
		d[7] = byte(len(g.Ports))
		for _, p := range g.Ports {
			d = append(d, 0, 0, byte(p>>8), byte(p))
		}
		b = append(b, d...)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return alloc(b, allocLen), nil
}
