package scsi

import (
	"encoding/binary"
	"sort"
)

func testUnitReady(x *exec) ([]byte, error) { return nil, nil }

// requestSense answers REQUEST SENSE (SPC-4 6.39): a pending unit
// attention is returned as the sense data and cleared (SPC-4 5.14).
func requestSense(x *exec) ([]byte, error) {
	cdb := x.cdb()
	desc := cdb[1]&0x01 != 0
	allocLen := int(cdb[4])
	var e *SenseError
	switch {
	case x.lu == nil:
		e = Sense(ReasonLUNotSupported)
	default:
		if r, ok := x.lu.ua.take(x.c.Nexus); ok {
			e = Sense(r)
			if o := x.s.observer; o != nil {
				o.UnitAttention(x.c.Nexus, x.c.LUN, r)
			}
		} else if x.lu.isStopped() {
			e = Sense(ReasonNotReadyInitCmdRequired)
		}
	}
	if e == nil {
		b := BuildSense(&SenseError{Reason: ReasonNone}, desc)
		return alloc(b, allocLen), nil
	}
	return alloc(BuildSense(e, desc), allocLen), nil
}

// startStopUnit implements START STOP UNIT (SBC-3 5.25). The medium is not
// removable, so LOEJ with START=0 cannot eject anything.
func startStopUnit(x *exec) ([]byte, error) {
	cdb := x.cdb()
	pc := cdb[4] >> 4
	switch pc {
	case 0: // START_VALID
	case 1, 2, 3, 7, 0xa, 0xb:
		return nil, nil // power conditions: accepted, no effect on an array LU
	default:
		return nil, InvalidCDBField(4, 7)
	}
	start, loej, noFlush := cdb[4]&0x01 != 0, cdb[4]&0x02 != 0, cdb[4]&0x04 != 0
	if loej && !start {
		x.lu.mu.Lock()
		prevented := len(x.lu.prevent) > 0
		x.lu.mu.Unlock()
		if prevented {
			return nil, Sense(ReasonMediumRemovalPrevented)
		}
	}
	if !start && !noFlush {
		if err := x.lu.cfg.Backend.Flush(x.via()); err != nil {
			return nil, mediaErr(err, true)
		}
	}
	x.lu.mu.Lock()
	x.lu.stopped = !start
	x.lu.mu.Unlock()
	return nil, nil
}

// preventAllow implements PREVENT ALLOW MEDIUM REMOVAL (SBC-3 5.11),
// recorded per I_T nexus.
func preventAllow(x *exec) ([]byte, error) {
	p := x.cdb()[4] & 0x03
	x.lu.mu.Lock()
	defer x.lu.mu.Unlock()
	if p&0x01 != 0 {
		x.lu.prevent[x.c.Nexus] = true
	} else {
		delete(x.lu.prevent, x.c.Nexus)
	}
	return nil, nil
}

// sendDiagnostic implements the default self-test of SEND DIAGNOSTIC
// (SPC-4 6.42); there is no diagnostic page support.
func sendDiagnostic(x *exec) ([]byte, error) {
	cdb := x.cdb()
	plen := be16(cdb[3:])
	x.dataOutLen = int(plen)
	if plen != 0 {
		return nil, Sense(ReasonInvalidFieldInParam)
	}
	if cdb[1]&0x04 == 0 && cdb[1]>>5 != 0 && cdb[1]>>5 != 1 && cdb[1]>>5 != 2 {
		return nil, InvalidCDBField(1, 7)
	}
	return nil, nil
}

func maintenanceIn(x *exec) ([]byte, error) {
	switch x.cdb()[1] & 0x1f {
	case SAReportOpcodes:
		return reportOpcodes(x)
	case SAReportTMFs:
		return reportTMFs(x)
	case SAReportTPG:
		if x.s.alua != nil {
			return reportTargetPortGroups(x)
		}
	}
	return nil, InvalidCDBField(1, 4)
}

// maintenanceOut dispatches MAINTENANCE OUT: only SET TARGET PORT GROUPS
// exists, and only in the explicit mode; otherwise the opcode is unknown.
func maintenanceOut(x *exec) ([]byte, error) {
	explicit := x.s.alua != nil && x.s.alua.TPGS()&0x2 != 0
	switch {
	case !explicit:
		return nil, Sense(ReasonInvalidOpcode)
	case x.cdb()[1]&0x1f != SASetTPG:
		return nil, InvalidCDBField(1, 4)
	}
	return setTargetPortGroups(x)
}

// reportTMFs answers REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS (SPC-4 6.40).
func reportTMFs(x *exec) ([]byte, error) {
	allocLen := int(be32(x.cdb()[6:]))
	if allocLen < 4 {
		return nil, InvalidCDBField(6, 7)
	}
	b := make([]byte, 4)
	b[0] = 0x80 | 0x40 | 0x10 | 0x08 | 0x02 // ATS ATSS CTSS LURS TRS
	return alloc(b, allocLen), nil
}

type opDesc struct {
	op     byte
	sa     uint16
	hasSA  bool
	cdbLen int
	usage  []byte
	tmo    uint32
}

func supportedOps() []opDesc {
	var out []opDesc
	for i := range opTable {
		e := &opTable[i]
		if e.handler == nil || e.unlisted {
			continue
		}
		if len(e.sa) == 0 {
			out = append(out, opDesc{op: byte(i), cdbLen: e.cdbLen, usage: e.usage, tmo: e.timeout})
			continue
		}
		var sas []int
		for sa := range e.sa {
			sas = append(sas, int(sa))
		}
		sort.Ints(sas)
		for _, sa := range sas {
			s := e.sa[byte(sa)]
			usage := s.usage
			if usage == nil {
				usage = append([]byte(nil), e.usage...)
				usage[1] = e.usage[1]&^0x1f | byte(sa)
			}
			out = append(out, opDesc{op: byte(i), sa: uint16(sa), hasSA: true, cdbLen: e.cdbLen, usage: usage, tmo: e.timeout})
		}
	}
	return out
}

func timeoutDesc(tmo uint32) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b, 0x0a)
	binary.BigEndian.PutUint32(b[4:], tmo)
	binary.BigEndian.PutUint32(b[8:], tmo)
	return b
}

// reportOpcodes answers REPORT SUPPORTED OPERATION CODES (SPC-4 6.35).
func reportOpcodes(x *exec) ([]byte, error) {
	cdb := x.cdb()
	rctd := cdb[2]&0x80 != 0
	opt := cdb[2] & 0x07
	reqOp, reqSA := cdb[3], be16(cdb[4:])
	allocLen := int(be32(cdb[6:]))
	ops := x.s.opsWithALUA()
	switch opt {
	case 0:
		b := make([]byte, 4)
		for _, d := range ops {
			e := make([]byte, 8)
			e[0] = d.op
			binary.BigEndian.PutUint16(e[2:], d.sa)
			if d.hasSA {
				e[5] |= 0x01 // SERVACTV
			}
			if rctd {
				e[5] |= 0x02 // CTDP
			}
			binary.BigEndian.PutUint16(e[6:], uint16(d.cdbLen))
			b = append(b, e...)
			if rctd {
				b = append(b, timeoutDesc(d.tmo)...)
			}
		}
		binary.BigEndian.PutUint32(b, uint32(len(b)-4))
		return alloc(b, allocLen), nil
	case 1, 2, 3:
		hasSAs := x.s.opHasSA(reqOp)
		if opt == 1 && hasSAs || opt == 2 && !hasSAs && opTable[reqOp].handler != nil && !opTable[reqOp].unlisted {
			return nil, InvalidCDBField(2, 2)
		}
		var found *opDesc
		for i := range ops {
			d := &ops[i]
			if d.op == reqOp && (!d.hasSA || (opt != 1 && d.sa == reqSA)) {
				found = d
				break
			}
		}
		b := make([]byte, 4)
		if found == nil {
			b[1] = 0x01 // not supported
		} else {
			b[1] = 0x03 // supported, in conformance with a standard
			if rctd {
				b[1] |= 0x80
			}
			binary.BigEndian.PutUint16(b[2:], uint16(len(found.usage)))
			b = append(b, found.usage...)
			if rctd {
				b = append(b, timeoutDesc(found.tmo)...)
			}
		}
		return alloc(b, allocLen), nil
	}
	return nil, InvalidCDBField(2, 2)
}

func (s *Server) opHasSA(op byte) bool {
	if len(opTable[op].sa) > 0 {
		return true
	}
	return s.alua != nil && (op == OpMaintenanceIn || op == OpMaintenanceOut && s.alua.TPGS()&0x2 != 0)
}

// opsWithALUA lists the supported commands including RTPG/STPG when ALUA
// is configured.
func (s *Server) opsWithALUA() []opDesc {
	ops := supportedOps()
	if s.alua == nil {
		return ops
	}
	ops = append(ops, opDesc{op: OpMaintenanceIn, sa: SAReportTPG, hasSA: true, cdbLen: 12, tmo: 30,
		usage: []byte{0xa3, 0xea, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}})
	if s.alua.TPGS()&0x02 != 0 {
		ops = append(ops, opDesc{op: OpMaintenanceOut, sa: SASetTPG, hasSA: true, cdbLen: 12, tmo: 30,
			usage: []byte{0xa4, 0x0a, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}})
	}
	sort.SliceStable(ops, func(i, j int) bool {
		if ops[i].op != ops[j].op {
			return ops[i].op < ops[j].op
		}
		return ops[i].sa < ops[j].sa
	})
	return ops
}
