package scsi

import (
	"encoding/binary"
	"sort"
	"strings"
)

// Persistent reservation types (SPC-4 6.16.2 table 169).
const (
	prTypeWE   = 1 // Write Exclusive
	prTypeEA   = 3 // Exclusive Access
	prTypeWERO = 5 // Write Exclusive, Registrants Only
	prTypeEARO = 6 // Exclusive Access, Registrants Only
	prTypeWEAR = 7 // Write Exclusive, All Registrants
	prTypeEAAR = 8 // Exclusive Access, All Registrants
)

// prState is the persistent reservation state of one LU (SPC-4 5.13).
// Registrations are per I_T nexus. Guarded by LU.mu.
type prState struct {
	generation uint32
	regs       map[Nexus]uint64
	holder     *Nexus // nil when not reserved
	typ        byte
}

func (p *prState) allRegistrants() bool { return p.typ == prTypeWEAR || p.typ == prTypeEAAR }

func (p *prState) isHolder(n Nexus) bool {
	if p.holder == nil {
		return false
	}
	if p.allRegistrants() {
		_, ok := p.regs[n]
		return ok
	}
	return *p.holder == n
}

// conflicts implements SPC-4 table 68 for media commands.
func (p *prState) conflicts(n Nexus, write bool) bool {
	if p.holder == nil || p.isHolder(n) {
		return false
	}
	_, registered := p.regs[n]
	switch p.typ {
	case prTypeWE:
		return write
	case prTypeEA:
		return true
	case prTypeWERO, prTypeWEAR:
		return write && !registered
	case prTypeEARO, prTypeEAAR:
		return !registered
	}
	return false
}

func validPRType(t byte) bool {
	switch t {
	case prTypeWE, prTypeEA, prTypeWERO, prTypeEARO, prTypeWEAR, prTypeEAAR:
		return true
	}
	return false
}

// prIn answers PERSISTENT RESERVE IN (SPC-4 6.15).
func prIn(x *exec) ([]byte, error) {
	cdb := x.cdb()
	sa := cdb[1] & 0x1f
	allocLen := int(be16(cdb[7:]))
	lu := x.lu
	lu.mu.Lock()
	defer lu.mu.Unlock()
	p := &lu.pr
	var b []byte
	switch sa {
	case 0: // READ KEYS
		b = make([]byte, 8)
		binary.BigEndian.PutUint32(b, p.generation)
		for _, n := range sortedNexuses(p.regs) {
			b = binary.BigEndian.AppendUint64(b, p.regs[n])
		}
		binary.BigEndian.PutUint32(b[4:], uint32(len(b)-8))
	case 1: // READ RESERVATION
		b = make([]byte, 8)
		binary.BigEndian.PutUint32(b, p.generation)
		if p.holder != nil {
			d := make([]byte, 16)
			if !p.allRegistrants() {
				binary.BigEndian.PutUint64(d, p.regs[*p.holder])
			}
			d[13] = p.typ // scope 0 (LU_SCOPE) in the high nibble
			b = append(b, d...)
		}
		binary.BigEndian.PutUint32(b[4:], uint32(len(b)-8))
	case 2: // REPORT CAPABILITIES (SPC-4 6.15.4)
		b = make([]byte, 8)
		binary.BigEndian.PutUint16(b, 8)
		b[2] = 0x10                             // CRH: compatible reservation handling
		b[3] = 0x80                             // TMV: type mask valid; ALLOW COMMANDS 000b
		b[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02 // WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX
		b[5] = 0x01                             // EX_AC_AR
	case 3: // READ FULL STATUS (SPC-4 6.15.5)
		b = make([]byte, 8)
		binary.BigEndian.PutUint32(b, p.generation)
		for _, n := range sortedNexuses(p.regs) {
			d := make([]byte, 24)
			binary.BigEndian.PutUint64(d, p.regs[n])
			if p.isHolder(n) {
				d[12] = 0x01 // R_HOLDER
				d[13] = p.typ
			}
			binary.BigEndian.PutUint16(d[18:], n.TargetPort)
			tid := iscsiTransportID(n.InitiatorPort)
			binary.BigEndian.PutUint32(d[20:], uint32(len(tid)))
			b = append(b, d...)
			b = append(b, tid...)
		}
		binary.BigEndian.PutUint32(b[4:], uint32(len(b)-8))
	default:
		return nil, InvalidCDBField(1, 4)
	}
	return alloc(b, allocLen), nil
}

// iscsiTransportID builds an iSCSI TransportID, format 01b (SPC-4 7.6.4.6):
// "<name>,i,0x<isid>" NUL-terminated, padded to a multiple of 4.
func iscsiTransportID(port string) []byte {
	name := []byte(port)
	n := (len(name) + 1 + 3) &^ 3
	if n < 20 {
		n = 20
	}
	b := make([]byte, 4+n)
	b[0] = 0x40 | 0x05 // FORMAT CODE 01b, PROTOCOL IDENTIFIER iSCSI
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	copy(b[4:], name)
	return b
}

func sortedNexuses(m map[Nexus]uint64) []Nexus {
	out := make([]Nexus, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := strings.Compare(out[i].InitiatorPort, out[j].InitiatorPort); c != 0 {
			return c < 0
		}
		return out[i].TargetPort < out[j].TargetPort
	})
	return out
}

// prOut carries out PERSISTENT RESERVE OUT (SPC-4 6.16, 5.13).
func prOut(x *exec) ([]byte, error) {
	cdb := x.cdb()
	sa := cdb[1] & 0x1f
	scope, typ := cdb[2]>>4, cdb[2]&0x0f
	plen := int(be32(cdb[5:]))
	x.dataOutLen = plen
	if sa > 6 {
		return nil, InvalidCDBField(1, 4) // REGISTER AND MOVE is not supported
	}
	if plen != 24 {
		return nil, Sense(ReasonParamListLength)
	}
	if len(x.c.Data) < 24 {
		return nil, Sense(ReasonParamListLength)
	}
	d := x.c.Data[:24]
	key, saKey := be64(d), be64(d[8:])
	flags := d[20]
	if flags&0x08 != 0 || flags&0x04 != 0 { // SPEC_I_PT, ALL_TG_PT unsupported
		return nil, Sense(ReasonInvalidFieldInParam)
	}
	if flags&0x01 != 0 { // APTPL: persist through power loss is not offered
		return nil, Sense(ReasonInvalidFieldInParam)
	}
	lu := x.lu
	lu.mu.Lock()
	defer lu.mu.Unlock()
	if lu.resv != nil { // SPC-2 reservation present (SPC-4 5.13.3, CRH)
		return nil, statusErr(StatusReservationConflict)
	}
	p := &lu.pr
	n := x.c.Nexus
	cur, registered := p.regs[n]
	switch sa {
	case 0, 6: // REGISTER, REGISTER AND IGNORE EXISTING KEY
		if sa == 0 {
			if !registered && key != 0 || registered && key != cur {
				return nil, statusErr(StatusReservationConflict)
			}
		}
		if !registered {
			if saKey == 0 {
				return nil, nil
			}
			p.regs[n] = saKey
		} else if saKey == 0 {
			x.unregister(n)
		} else {
			p.regs[n] = saKey
		}
		p.generation++
		return nil, nil
	}
	if !registered || key != cur {
		return nil, statusErr(StatusReservationConflict)
	}
	switch sa {
	case 1: // RESERVE
		if scope != 0 {
			return nil, InvalidCDBField(2, 7)
		}
		if !validPRType(typ) {
			return nil, InvalidCDBField(2, 3)
		}
		if p.holder == nil {
			h := n
			p.holder, p.typ = &h, typ
			return nil, nil
		}
		if p.isHolder(n) && p.typ == typ {
			return nil, nil
		}
		return nil, statusErr(StatusReservationConflict)
	case 2: // RELEASE
		if p.holder == nil || !p.isHolder(n) {
			return nil, nil
		}
		if scope != 0 || p.typ != typ {
			return nil, Sense(ReasonInvalidReleaseOfPR)
		}
		x.releasePR(n)
		return nil, nil
	case 3: // CLEAR
		for r := range p.regs {
			if r != n {
				lu.ua.add(r, ReasonUAReservationsPreempted)
			}
		}
		p.regs = map[Nexus]uint64{}
		p.holder = nil
		p.generation++
		return nil, nil
	case 4, 5: // PREEMPT, PREEMPT AND ABORT
		return nil, x.preempt(n, saKey, scope, typ)
	}
	return nil, InvalidCDBField(1, 4)
}

// unregister removes n's registration; a holder's reservation goes with it
// (for all-registrants types, only when the last registrant leaves).
func (x *exec) unregister(n Nexus) {
	p := &x.lu.pr
	wasHolder := p.isHolder(n)
	delete(p.regs, n)
	if !wasHolder {
		return
	}
	if p.allRegistrants() {
		if len(p.regs) == 0 {
			p.holder = nil
		}
		return
	}
	x.releasePR(n)
}

// releasePR drops the reservation; registrants of RO/AR types learn of it
// through RESERVATIONS RELEASED (SPC-4 5.13.11.2).
func (x *exec) releasePR(by Nexus) {
	p := &x.lu.pr
	typ := p.typ
	p.holder = nil
	if typ == prTypeWE || typ == prTypeEA {
		return
	}
	for r := range p.regs {
		if r != by {
			x.lu.ua.add(r, ReasonUAReservationsReleased)
		}
	}
}

// preempt implements SPC-4 5.13.11.4.
func (x *exec) preempt(n Nexus, saKey uint64, scope, typ byte) error {
	p := &x.lu.pr
	remove := func(match func(uint64) bool) int {
		removed := 0
		for r, k := range p.regs {
			if r == n || !match(k) {
				continue
			}
			delete(p.regs, r)
			x.lu.ua.add(r, ReasonUARegistrationsPreempted)
			removed++
		}
		return removed
	}
	takeOver := func() error {
		if scope != 0 {
			return InvalidCDBField(2, 7)
		}
		if !validPRType(typ) {
			return InvalidCDBField(2, 3)
		}
		h := n
		p.holder, p.typ = &h, typ
		return nil
	}
	switch {
	case p.holder == nil:
		if saKey == 0 {
			return Sense(ReasonInvalidFieldInParam)
		}
		if remove(func(k uint64) bool { return k == saKey }) == 0 {
			return statusErr(StatusReservationConflict)
		}
	case p.allRegistrants():
		if saKey == 0 {
			remove(func(uint64) bool { return true })
			if err := takeOver(); err != nil {
				return err
			}
		} else if remove(func(k uint64) bool { return k == saKey }) == 0 {
			return statusErr(StatusReservationConflict)
		}
	case p.regs[*p.holder] == saKey:
		remove(func(k uint64) bool { return k == saKey })
		if err := takeOver(); err != nil {
			return err
		}
	default:
		if saKey == 0 {
			return Sense(ReasonInvalidFieldInParam)
		}
		if remove(func(k uint64) bool { return k == saKey }) == 0 {
			return statusErr(StatusReservationConflict)
		}
	}
	p.generation++
	return nil
}

// reserve6 implements RESERVE(6) (SPC-2 7.21): an exclusive reservation
// for one I_T nexus, conflicting with persistent reservations (CRH=1).
func reserve6(x *exec) ([]byte, error) {
	cdb := x.cdb()
	if cdb[1]&0x01 != 0 { // extent reservations are obsolete
		return nil, InvalidCDBField(1, 0)
	}
	lu := x.lu
	lu.mu.Lock()
	defer lu.mu.Unlock()
	if lu.pr.holder != nil || len(lu.pr.regs) > 0 {
		return nil, statusErr(StatusReservationConflict)
	}
	if lu.resv != nil && *lu.resv != x.c.Nexus {
		return nil, statusErr(StatusReservationConflict)
	}
	n := x.c.Nexus
	lu.resv = &n
	return nil, nil
}

// release6 implements RELEASE(6): only the holder releases; anyone else
// gets GOOD with no effect (SPC-2 7.17).
func release6(x *exec) ([]byte, error) {
	lu := x.lu
	lu.mu.Lock()
	defer lu.mu.Unlock()
	if lu.resv != nil && *lu.resv == x.c.Nexus {
		lu.resv = nil
	}
	return nil, nil
}
