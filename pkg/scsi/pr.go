package scsi

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"
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

// itn names an I_T nexus as reservations do: the initiator port and the
// relative target port (SPC-4 5.13.2); registrations outlive sessions.
type itn struct {
	iport string
	tport uint16
}

func itnOf(n Nexus) itn { return itn{normPort(n.InitiatorPort), n.TargetPort} }

// normPort writes an iSCSI initiator port name one way: lower case, the
// ISID in 12 hex digits ("<name>,i,0x<isid>"), so a TransportID typed by
// hand names the nexus the target saw.
func normPort(s string) string {
	s = strings.ToLower(s)
	name, isid, ok := strings.Cut(s, ",i,0x")
	if !ok || len(isid) == 12 {
		return s
	}
	v, err := strconv.ParseUint(isid, 16, 48)
	if err != nil {
		return s
	}
	return fmt.Sprintf("%s,i,0x%012x", name, v)
}

// prState is the persistent reservation state of one LU (SPC-4 5.13).
// Registrations are per I_T nexus. Guarded by LU.mu.
type prState struct {
	generation uint32
	regs       map[itn]uint64
	// allTgPt: the initiator ports registered with ALL_TG_PT=1 (on every
	// target port at once; changed and removed together).
	allTgPt map[string]bool
	holder  *itn // nil when not reserved
	typ     byte
	// aptpl: the last REGISTER asked for persistence through power loss.
	aptpl bool
	// aborts counts the PREEMPT AND ABORTs that preempted someone;
	// abortedAt is, per I_T nexus, the count after the last one that
	// preempted it: its tasks that passed the reservation check before
	// are not carried out (queued, or held in a move, when it happened).
	aborts    uint64
	abortedAt map[itn]uint64
}

func newPRState() prState {
	return prState{regs: map[itn]uint64{}, allTgPt: map[string]bool{}, abortedAt: map[itn]uint64{}}
}

func (p *prState) allRegistrants() bool { return p.typ == prTypeWEAR || p.typ == prTypeEAAR }

func (p *prState) isHolder(k itn) bool {
	if p.holder == nil {
		return false
	}
	if p.allRegistrants() {
		_, ok := p.regs[k]
		return ok
	}
	return *p.holder == k
}

// conflicts implements SPC-4 table 68 for media commands.
func (p *prState) conflicts(n Nexus, write bool) bool {
	if p.holder == nil {
		return false
	}
	k := itnOf(n)
	if p.isHolder(k) {
		return false
	}
	_, registered := p.regs[k]
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

// group is the registration k belongs to: every I_T nexus of its
// initiator port when it was made with ALL_TG_PT, else k alone.
func (p *prState) group(k itn) []itn {
	if !p.allTgPt[k.iport] {
		return []itn{k}
	}
	var g []itn
	for r := range p.regs {
		if r.iport == k.iport {
			g = append(g, r)
		}
	}
	return g
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
		for _, k := range sortedITNs(p.regs) {
			b = binary.BigEndian.AppendUint64(b, p.regs[k])
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
		b[2] = 0x10 | 0x04 | 0x01 // CRH, ATP_C (ALL_TG_PT), PTPL_C (APTPL)
		b[3] = 0x80               // TMV: type mask valid; ALLOW COMMANDS 000b
		if p.aptpl {
			b[3] |= 0x01 // PTPL_A
		}
		b[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02 // WR_EX_AR EX_AC_RO WR_EX_RO EX_AC WR_EX
		b[5] = 0x01                             // EX_AC_AR
	case 3: // READ FULL STATUS (SPC-4 6.15.5)
		b = make([]byte, 8)
		binary.BigEndian.PutUint32(b, p.generation)
		shown := map[string]bool{}
		for _, k := range sortedITNs(p.regs) {
			all := p.allTgPt[k.iport]
			if all && shown[k.iport] {
				continue // one descriptor for a registration on every port
			}
			shown[k.iport] = true
			d := make([]byte, 24)
			binary.BigEndian.PutUint64(d, p.regs[k])
			if all {
				d[12] |= 0x02 // ALL_TG_PT; the relative target port is not used
			} else {
				binary.BigEndian.PutUint16(d[18:], k.tport)
			}
			if p.isHolder(k) || all && p.holder != nil && p.holder.iport == k.iport {
				d[12] |= 0x01 // R_HOLDER
				d[13] = p.typ
			}
			tid := iscsiTransportID(k.iport)
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

// parseISCSITransportID reads an iSCSI TransportID naming an initiator
// port (format 01b: "<name>,i,0x<isid>"), as REGISTER AND MOVE carries it.
func parseISCSITransportID(b []byte) (string, bool) {
	if len(b) < 4 || b[0]&0x0f != 0x05 || b[0]>>6 != 1 {
		return "", false
	}
	n := int(be16(b[2:]))
	if n < 4 || 4+n > len(b) {
		return "", false
	}
	s := string(b[4 : 4+n])
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	name, isid, ok := strings.Cut(strings.ToLower(s), ",i,0x")
	if !ok || name == "" || len(isid) == 0 || len(isid) > 12 {
		return "", false
	}
	if _, err := strconv.ParseUint(isid, 16, 48); err != nil {
		return "", false
	}
	return normPort(s), true
}

func sortedITNs(m map[itn]uint64) []itn {
	out := make([]itn, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := strings.Compare(out[i].iport, out[j].iport); c != 0 {
			return c < 0
		}
		return out[i].tport < out[j].tport
	})
	return out
}

// prOut carries out PERSISTENT RESERVE OUT (SPC-4 6.16, 5.13). A PREEMPT
// AND ABORT returns only once no task of a preempted I_T nexus can still
// change the medium: those that began before it are aborted (TASK
// ABORTED when they reach the media) and the writes already past that
// point have finished.
func prOut(x *exec) ([]byte, error) {
	ports := x.s.targetPortIDs()
	x.lu.mu.Lock()
	was := x.lu.pr.aptpl
	x.lu.mu.Unlock()
	aborted, err := x.prOutLocked(ports)
	if aborted {
		x.lu.rw.Lock() // every write that took the read side has ended
		x.lu.rw.Unlock()
	}
	x.lu.mu.Lock()
	persist := was || x.lu.pr.aptpl
	x.lu.mu.Unlock()
	if err == nil && persist && x.s.onPersist != nil {
		x.s.onPersist(x.c.LUN) // APTPL: saved across power loss
	}
	return nil, err
}

func (x *exec) prOutLocked(ports []uint16) (aborted bool, err error) {
	cdb := x.cdb()
	sa := cdb[1] & 0x1f
	scope, typ := cdb[2]>>4, cdb[2]&0x0f
	plen := int(be32(cdb[5:]))
	x.dataOutLen = plen
	if sa > 7 {
		return false, InvalidCDBField(1, 4)
	}
	if sa == 7 && plen < 24 || sa != 7 && plen != 24 {
		return false, Sense(ReasonParamListLength)
	}
	d, err := x.dataOut(plen)
	if err != nil {
		return false, err
	}
	key, saKey := be64(d), be64(d[8:])
	flags := d[20]
	if sa != 7 && flags&0x08 != 0 { // SPEC_I_PT is not offered
		return false, Sense(ReasonInvalidFieldInParam)
	}
	lu := x.lu
	lu.mu.Lock()
	defer lu.mu.Unlock()
	if lu.resv != nil { // SPC-2 reservation present (SPC-4 5.13.3, CRH)
		return false, statusErr(StatusReservationConflict)
	}
	p := &lu.pr
	k := itnOf(x.c.Nexus)
	cur, registered := p.regs[k]
	switch sa {
	case 0, 6: // REGISTER, REGISTER AND IGNORE EXISTING KEY
		if sa == 0 {
			if !registered && key != 0 || registered && key != cur {
				return false, statusErr(StatusReservationConflict)
			}
		}
		if !registered {
			if saKey == 0 {
				return false, nil
			}
			targets := []itn{k}
			if flags&0x04 != 0 { // ALL_TG_PT: every target port of the array
				targets = targets[:0]
				for _, tp := range ports {
					t := itn{k.iport, tp}
					if _, taken := p.regs[t]; taken {
						return false, statusErr(StatusReservationConflict)
					}
					targets = append(targets, t)
				}
				p.allTgPt[k.iport] = true
			}
			for _, t := range targets {
				p.regs[t] = saKey
			}
		} else if saKey == 0 {
			for _, g := range p.group(k) {
				x.unregister(g)
			}
			delete(p.allTgPt, k.iport)
		} else {
			for _, g := range p.group(k) {
				p.regs[g] = saKey
			}
		}
		p.aptpl = flags&0x01 != 0
		p.generation++
		return false, nil
	}
	if !registered || key != cur {
		return false, statusErr(StatusReservationConflict)
	}
	switch sa {
	case 1: // RESERVE
		if scope != 0 {
			return false, InvalidCDBField(2, 7)
		}
		if !validPRType(typ) {
			return false, InvalidCDBField(2, 3)
		}
		if p.holder == nil {
			h := k
			p.holder, p.typ = &h, typ
			return false, nil
		}
		if p.isHolder(k) && p.typ == typ {
			return false, nil
		}
		return false, statusErr(StatusReservationConflict)
	case 2: // RELEASE
		if p.holder == nil || !p.isHolder(k) {
			return false, nil
		}
		if scope != 0 || p.typ != typ {
			return false, Sense(ReasonInvalidReleaseOfPR)
		}
		x.releasePR(k)
		return false, nil
	case 3: // CLEAR
		for r := range p.regs {
			if r != k {
				x.uaTo(r, ReasonUAReservationsPreempted)
			}
		}
		p.regs = map[itn]uint64{}
		p.allTgPt = map[string]bool{}
		p.holder = nil
		p.generation++
		return false, nil
	case 4, 5: // PREEMPT, PREEMPT AND ABORT
		preempted, err := x.preempt(k, saKey, scope, typ)
		if err != nil || sa == 4 {
			return false, err
		}
		if len(preempted) == 0 {
			return false, nil
		}
		p.aborts++
		x.lu.aborts.Store(p.aborts)
		for _, r := range preempted {
			p.abortedAt[r] = p.aborts
		}
		return true, nil
	case 7: // REGISTER AND MOVE
		return false, x.registerAndMove(k, d, saKey, typ, scope, ports)
	}
	return false, InvalidCDBField(1, 4)
}

// registerAndMove implements REGISTER AND MOVE (SPC-4 5.13.8): the
// reservation holder registers another I_T nexus, named by a TransportID
// and a relative target port, and hands it the reservation.
func (x *exec) registerAndMove(k itn, d []byte, saKey uint64, typ, scope byte, ports []uint16) error {
	p := &x.lu.pr
	if p.holder == nil || !p.isHolder(k) || p.allRegistrants() {
		return statusErr(StatusReservationConflict)
	}
	if scope != 0 {
		return InvalidCDBField(2, 7)
	}
	if !validPRType(typ) {
		return InvalidCDBField(2, 3)
	}
	if d[17]&0x04 != 0 || saKey == 0 {
		return Sense(ReasonInvalidFieldInParam)
	}
	tidLen := int(be32(d[20:]))
	if 24+tidLen > len(d) {
		return Sense(ReasonParamListLength)
	}
	iport, ok := parseISCSITransportID(d[24 : 24+tidLen])
	tport := be16(d[18:])
	if !ok || !slices.Contains(ports, tport) {
		return Sense(ReasonInvalidFieldInParam)
	}
	dest := itn{iport, tport}
	if dest == k {
		return Sense(ReasonInvalidFieldInParam)
	}
	p.regs[dest] = saKey
	h := dest
	p.holder, p.typ = &h, typ
	if d[17]&0x02 != 0 { // UNREG: the source leaves (all its ports, if registered with ALL_TG_PT)
		for _, g := range p.group(k) {
			delete(p.regs, g)
		}
		delete(p.allTgPt, k.iport)
	}
	p.aptpl = d[17]&0x01 != 0
	p.generation++
	return nil
}

// uaTo queues a unit attention for every logged-in nexus that is k.
func (x *exec) uaTo(k itn, r Reason) {
	x.s.mu.RLock()
	defer x.s.mu.RUnlock()
	for n := range x.s.nexuses {
		if itnOf(n) == k {
			x.lu.ua.add(n, r)
		}
	}
}

// unregister removes k's registration; a holder's reservation goes with it
// (for all-registrants types, only when the last registrant leaves).
func (x *exec) unregister(k itn) {
	p := &x.lu.pr
	wasHolder := p.isHolder(k)
	delete(p.regs, k)
	if !wasHolder {
		return
	}
	if p.allRegistrants() {
		if len(p.regs) == 0 {
			p.holder = nil
		}
		return
	}
	x.releasePR(k)
}

// releasePR drops the reservation; registrants of RO/AR types learn of it
// through RESERVATIONS RELEASED (SPC-4 5.13.11.2).
func (x *exec) releasePR(by itn) {
	p := &x.lu.pr
	typ := p.typ
	p.holder = nil
	if typ == prTypeWE || typ == prTypeEA {
		return
	}
	for r := range p.regs {
		if r != by {
			x.uaTo(r, ReasonUAReservationsReleased)
		}
	}
}

// preempt implements SPC-4 5.13.11.4 and returns the I_T nexuses whose
// registrations it removed.
func (x *exec) preempt(k itn, saKey uint64, scope, typ byte) ([]itn, error) {
	p := &x.lu.pr
	if p.holder != nil && (scope != 0 || !validPRType(typ)) {
		// Checked before anything changes: a refused preempt removes
		// no registration.
		if scope != 0 {
			return nil, InvalidCDBField(2, 7)
		}
		return nil, InvalidCDBField(2, 3)
	}
	var removed []itn
	remove := func(match func(uint64) bool) int {
		n := 0
		for r, key := range p.regs {
			if r == k || !match(key) {
				continue
			}
			delete(p.regs, r)
			removed = append(removed, r)
			x.uaTo(r, ReasonUARegistrationsPreempted)
			n++
		}
		return n
	}
	takeOver := func() error {
		if scope != 0 {
			return InvalidCDBField(2, 7)
		}
		if !validPRType(typ) {
			return InvalidCDBField(2, 3)
		}
		h := k
		p.holder, p.typ = &h, typ
		return nil
	}
	switch {
	case p.holder == nil:
		if saKey == 0 {
			return nil, Sense(ReasonInvalidFieldInParam)
		}
		if remove(func(key uint64) bool { return key == saKey }) == 0 {
			return nil, statusErr(StatusReservationConflict)
		}
	case p.allRegistrants():
		if saKey == 0 {
			remove(func(uint64) bool { return true })
			if err := takeOver(); err != nil {
				return nil, err
			}
		} else if remove(func(key uint64) bool { return key == saKey }) == 0 {
			return nil, statusErr(StatusReservationConflict)
		}
	case p.regs[*p.holder] == saKey:
		remove(func(key uint64) bool { return key == saKey })
		if err := takeOver(); err != nil {
			return nil, err
		}
	default:
		if saKey == 0 {
			return nil, Sense(ReasonInvalidFieldInParam)
		}
		if remove(func(key uint64) bool { return key == saKey }) == 0 {
			return nil, statusErr(StatusReservationConflict)
		}
	}
	for _, r := range removed {
		if !slices.ContainsFunc(sortedITNs(p.regs), func(o itn) bool { return o.iport == r.iport }) {
			delete(p.allTgPt, r.iport)
		}
	}
	p.generation++
	return removed, nil
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

// SavedPR is a LU's persistent reservation state as APTPL keeps it
// through a power loss (SPC-4 5.13.5): what the daemon saves.
type SavedPR struct {
	Generation    uint32              `json:"generation"`
	Type          byte                `json:"type,omitempty"`
	Registrations []SavedRegistration `json:"registrations"`
}

// SavedRegistration is one registered I_T nexus.
type SavedRegistration struct {
	InitiatorPort string `json:"initiator_port"`
	TargetPort    uint16 `json:"target_port"`
	Key           uint64 `json:"key"`
	AllTgPt       bool   `json:"all_tg_pt,omitempty"`
	Holder        bool   `json:"holder,omitempty"`
}

// SavedPR returns the state to keep, or nil when the last REGISTER did
// not ask for persistence (APTPL=0): a power loss then clears it.
func (lu *LU) SavedPR() *SavedPR {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	p := &lu.pr
	if !p.aptpl {
		return nil
	}
	s := &SavedPR{Generation: p.generation, Registrations: []SavedRegistration{}}
	if p.holder != nil {
		s.Type = p.typ
	}
	for _, k := range sortedITNs(p.regs) {
		s.Registrations = append(s.Registrations, SavedRegistration{InitiatorPort: k.iport, TargetPort: k.tport,
			Key: p.regs[k], AllTgPt: p.allTgPt[k.iport], Holder: p.isHolder(k)})
	}
	return s
}

// RestorePR brings back saved state at start.
func (lu *LU) RestorePR(s SavedPR) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	p := newPRState()
	p.generation, p.aptpl = s.Generation, true
	for _, r := range s.Registrations {
		k := itn{normPort(r.InitiatorPort), r.TargetPort}
		p.regs[k] = r.Key
		if r.AllTgPt {
			p.allTgPt[k.iport] = true
		}
		if r.Holder && validPRType(s.Type) {
			h := k
			p.holder, p.typ = &h, s.Type
		}
	}
	lu.pr = p
	lu.aborts.Store(0)
}
