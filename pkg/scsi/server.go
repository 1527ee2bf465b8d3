package scsi

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/alua"
)

// Backend is the media side of one logical unit, as the array provides it.
// via is the relative target port identifier the command arrived on, so the
// array can route it to the LUN's owner node. Offsets and lengths are bytes.
type Backend interface {
	ReadAt(via uint16, p []byte, off int64) error
	WriteAt(via uint16, p []byte, off int64, fua bool) error
	Flush(via uint16) error
	Unmap(via uint16, off, length int64) error
}

// RefBackend is a Backend that can lend a read's bytes where they lie
// (the media's mapping) instead of copying them: a large READ's data is
// then sent from there. The
// bytes stay valid until Unref, which the fabric's release of the
// response's Buf calls; a fabric that never releases it holds the
// media open.
type RefBackend interface {
	// ReadRef lends [off, off+n), or returns nil bytes and no error: use
	// ReadAt. An error is the read's (as ReadAt would have returned it).
	ReadRef(via uint16, off int64, n int) (b []byte, unref interface{ Unref() }, err error)
}

// minRefRead is the smallest READ sent from lent bytes: below it the copy
// costs less than the loan's bookkeeping.
const minRefRead = 64 << 10

// LBAStatuser is a Backend that reports provisioning (GET LBA STATUS):
// whether the bytes from off are mapped, and where that run ends. A
// Backend without it reports every block mapped.
type LBAStatuser interface {
	LBAStatus(via uint16, off int64) (end int64, mapped bool, err error)
}

// Identity is what INQUIRY reports about a LU; equal on every path.
type Identity struct {
	Vendor   string // 8 chars
	Product  string // 16 chars
	Revision string // 4 chars
	Serial   string // VPD 0x80
	// NAA is the LU's NAA designator (type 3; 8 bytes for NAA 2h, 3h
	// and 5h, 16 for 6h) that hosts use to group paths into one device.
	NAA []byte
}

// LUConfig describes one logical unit.
type LUConfig struct {
	LUN       uint64
	BlockSize int // bytes per logical block
	// PhysicalBlockSize is the unit the LU writes in underneath (READ
	// CAPACITY(16)'s LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT): a power
	// of two multiple of BlockSize; 0 means BlockSize.
	PhysicalBlockSize int
	Blocks            uint64 // capacity in logical blocks
	Identity          Identity
	Backend           Backend
	// Rotational reports a medium rotation rate in VPD 0xB1 (hdd profile);
	// false reports a non-rotating medium.
	Rotational bool
	ReadOnly   bool
}

// TargetPortInfo describes a target port for VPD 0x83 and RTPG.
type TargetPortInfo struct {
	RelativeID uint16
	Name       string // SCSI target port name ("<iqn>,t,0x<tpgt>")
}

// Server is the device server for every LU of the array.
type Server struct {
	mu    sync.RWMutex
	lus   map[uint64]*LU
	ports map[uint16]TargetPortInfo
	// nexuses known to the server (logged in), for UA fan-out.
	nexuses  map[Nexus]struct{}
	alua     ALUA
	mapper   atomic.Pointer[mapperBox]
	observer Observer
	// onPersist: a LU's saved parameters changed (SetOnPersist).
	onPersist func(lun uint64)
	// now reads the clock for per-nexus busy time.
	now func() time.Time
	// trace is the command trace while it is on (trace.go).
	trace atomic.Pointer[trace]
}

// targetPortIDs lists the relative ids of the target ports.
func (s *Server) targetPortIDs() []uint16 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids := make([]uint16, 0, len(s.ports))
	for id := range s.ports {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// SetOnPersist sets what is called when a LU's persistent parameters
// change (mode pages saved with SP=1, reservations under APTPL): the
// daemon saves them in its state. Set before serving.
func (s *Server) SetOnPersist(f func(lun uint64)) { s.onPersist = f }

// SetObserver attaches the control path's listener (RTPG receipts).
func (s *Server) SetObserver(o Observer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observer = o
}

// SetClock replaces the clock used for I/O busy time (tests).
func (s *Server) SetClock(now func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = now
}

// SetALUA attaches the array's asymmetric access view. Without it the
// server reports TPGS 00b and answers no RTPG.
func (s *Server) SetALUA(a ALUA) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.alua = a
}

// NewServer creates an empty device server.
func NewServer() *Server {
	return &Server{lus: map[uint64]*LU{}, ports: map[uint16]TargetPortInfo{}, nexuses: map[Nexus]struct{}{},
		now: time.Now}
}

// AddTargetPort registers a target port.
func (s *Server) AddTargetPort(p TargetPortInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ports[p.RelativeID] = p
}

// AddLU creates a logical unit.
func (s *Server) AddLU(cfg LUConfig) (*LU, error) {
	if cfg.BlockSize < 512 || cfg.BlockSize&(cfg.BlockSize-1) != 0 {
		return nil, fmt.Errorf("scsi: LUN %d: block size %d is not a power of two >= 512", cfg.LUN, cfg.BlockSize)
	}
	if cfg.PhysicalBlockSize == 0 {
		cfg.PhysicalBlockSize = cfg.BlockSize
	}
	if _, ok := PhysicalBlockExponent(cfg.BlockSize, cfg.PhysicalBlockSize); !ok {
		return nil, fmt.Errorf("scsi: LUN %d: physical block size %d is not a power of two multiple (up to 2^15) of the block size %d",
			cfg.LUN, cfg.PhysicalBlockSize, cfg.BlockSize)
	}
	if cfg.Blocks == 0 {
		return nil, fmt.Errorf("scsi: LUN %d: zero capacity", cfg.LUN)
	}
	if cfg.Backend == nil {
		return nil, fmt.Errorf("scsi: LUN %d: no backend", cfg.LUN)
	}
	if err := checkNAA(cfg.Identity.NAA); err != nil {
		return nil, fmt.Errorf("scsi: LUN %d: %w", cfg.LUN, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.lus[cfg.LUN]; dup {
		return nil, fmt.Errorf("scsi: LUN %d defined twice", cfg.LUN)
	}
	lu := newLU(cfg)
	for n := range s.nexuses {
		lu.ua.add(n, ReasonUAPowerOn)
	}
	s.lunMapChanged()
	s.lus[cfg.LUN] = lu
	return lu, nil
}

// RemoveLU deletes a logical unit. Commands already past the gate finish
// on it; later ones get LOGICAL UNIT NOT SUPPORTED.
func (s *Server) RemoveLU(lun uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.lus[lun]; !ok {
		return fmt.Errorf("scsi: no LUN %d", lun)
	}
	delete(s.lus, lun)
	s.lunMapChanged()
	return nil
}

// lunMapChanged queues REPORTED LUNS DATA HAS CHANGED (3F/0E) on every LU
// for every known nexus (SPC-4 6.33: the LU inventory changed). The caller
// holds s.mu.
func (s *Server) lunMapChanged() {
	for _, lu := range s.lus {
		for n := range s.nexuses {
			lu.ua.add(n, ReasonUAReportedLUNsChanged)
		}
	}
}

// LU returns a logical unit.
func (s *Server) LU(lun uint64) *LU {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lus[lun]
}

// LUNs lists the configured LUNs in order.
func (s *Server) LUNs() []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]uint64, 0, len(s.lus))
	for l := range s.lus {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// LUNExists implements Handler: is an LU mapped at lun for n.
func (s *Server) LUNExists(n Nexus, lun uint64) bool { return s.LU(s.resolve(n, lun)) != nil }

// NexusUp implements Handler: a new I_T nexus sees POWER ON, RESET on each
// LU (SAM-5 6.3.2: a unit attention for every new I_T nexus).
func (s *Server) NexusUp(n Nexus) {
	s.mu.Lock()
	s.nexuses[n] = struct{}{}
	lus := s.allLUs()
	s.mu.Unlock()
	for _, lu := range lus {
		lu.ua.reset(n, ReasonUAPowerOn)
	}
	s.markIOGone(n, false)
}

// NexusLost implements Handler: SPC-2 reservations held through n are
// released (SPC-4 5.13.1 / SPC-2 7.21) and its unit attentions dropped.
// Persistent reservations survive, as they must.
func (s *Server) NexusLost(n Nexus) {
	s.mu.Lock()
	delete(s.nexuses, n)
	lus := s.allLUs()
	s.mu.Unlock()
	for _, lu := range lus {
		lu.nexusLost(n)
	}
	s.markIOGone(n, true)
	if o, ok := s.observer.(NexusObserver); ok {
		o.NexusLost(n)
	}
}

// NexusObserver is an Observer that is also told when a nexus ends, at
// once, before a Logout is answered (the array's STANDBY hand-off must
// take effect before the host turns to its other paths).
type NexusObserver interface {
	NexusLost(n Nexus)
}

// Reset implements Handler for LUN RESET and target resets (SAM-5 7.7, 7.10).
func (s *Server) Reset(n Nexus, fn TMF, lun uint64) {
	if fn == TMFLUNReset {
		lun = s.resolve(n, lun)
	}
	s.mu.RLock()
	var targets []*LU
	if fn == TMFLUNReset {
		if lu := s.lus[lun]; lu != nil {
			targets = append(targets, lu)
		}
	} else {
		targets = s.allLUs()
	}
	nexuses := make([]Nexus, 0, len(s.nexuses))
	for x := range s.nexuses {
		nexuses = append(nexuses, x)
	}
	s.mu.RUnlock()
	for _, lu := range targets {
		lu.reset(nexuses)
	}
}

func (s *Server) allLUs() []*LU {
	out := make([]*LU, 0, len(s.lus))
	for _, lu := range s.lus {
		out = append(out, lu)
	}
	return out
}

// QueueUA queues a unit attention for every known nexus on lun (all LUNs
// when all is set): used for ALUA changes and LUN map changes.
func (s *Server) QueueUA(lun uint64, all bool, r Reason) {
	s.queueUA(func(lu *LU) bool { return all || lu.cfg.LUN == lun }, func(Nexus) bool { return true }, r)
}

// QueueUAWhere queues a unit attention r for luns on the nexuses match
// accepts (one host's: its access states changed, not everyone's).
func (s *Server) QueueUAWhere(luns []uint64, match func(Nexus) bool, r Reason) {
	s.queueUA(func(lu *LU) bool { return slices.Contains(luns, lu.cfg.LUN) }, match, r)
}

// queueUA queues r on the LUs and nexuses the predicates accept.
func (s *Server) queueUA(onLU func(*LU) bool, onNexus func(Nexus) bool, r Reason) {
	s.mu.RLock()
	var targets []*LU
	for _, lu := range s.lus {
		if onLU(lu) {
			targets = append(targets, lu)
		}
	}
	var nexuses []Nexus
	for x := range s.nexuses {
		if onNexus(x) {
			nexuses = append(nexuses, x)
		}
	}
	s.mu.RUnlock()
	for _, lu := range targets {
		for _, n := range nexuses {
			lu.ua.add(n, r)
		}
	}
}

// Nexuses lists the nexuses logged in now (unordered).
func (s *Server) Nexuses() []Nexus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Nexus, 0, len(s.nexuses))
	for x := range s.nexuses {
		out = append(out, x)
	}
	return out
}

// ClearUA removes a pending unit attention r for n on lun, if any.
func (s *Server) ClearUA(n Nexus, lun uint64, r Reason) {
	if lu := s.LU(lun); lu != nil {
		lu.ua.clear(n, r)
	}
}

// Execute implements Handler. It runs the gate (LU existence, unit
// attention, reservations) and dispatches through the opcode table.
func (s *Server) Execute(c *Command) Response {
	if len(c.CDB) == 0 {
		return checkCondition(Sense(ReasonInvalidOpcode), false)
	}
	op := &opTable[c.CDB[0]]
	if v := s.resolve(c.Nexus, c.LUN); v != c.LUN {
		cc := *c // the fabric's command keeps the initiator's LUN
		cc.LUN = v
		c = &cc
	}
	lu := s.LU(c.LUN)
	desc := lu != nil && lu.dsense()
	if op.handler == nil {
		return checkCondition(Sense(ReasonInvalidOpcode), desc)
	}
	if len(c.CDB) < op.cdbLen {
		return checkCondition(Sense(ReasonInvalidFieldInCDB), desc)
	}
	// SAM-5 5.4: the low bits of the CONTROL byte: NACA and LINK are not supported.
	if op.cdbLen > 0 && c.CDB[op.cdbLen-1]&0x05 != 0 {
		return checkCondition(InvalidCDBField(op.cdbLen-1, 2), desc)
	}
	if lu == nil && !op.noLU {
		return checkCondition(Sense(ReasonLUNotSupported), false)
	}
	if lu == nil {
		return s.run(op, &exec{s: s, c: c, desc: desc})
	}
	start := s.now()
	x := &c.x
	*x = exec{s: s, lu: lu, c: c, desc: desc}
	r := s.gateAndRun(op, x)
	end := s.now()
	lu.io.record(c.Nexus, op.io, &r, x.state == alua.ActiveNonOptimized, start, end.Sub(start))
	if t := s.trace.Load(); t != nil {
		t.command(c.Nexus, c.LUN, op.io, c.CDB[0], &r, x.state == alua.ActiveNonOptimized, start, end)
	}
	return r
}

// gateAndRun applies, in order, unit attention (SPC-4 5.14), the ALUA
// access state (SPC-4 5.15.2.4), reservations (SPC-4 5.13.1) and the
// stopped state, then runs the handler. The order follows LIO's
// target_cmd_parse_cdb: a pending UA is reported even on a standby path.
func (s *Server) gateAndRun(op *opEntry, x *exec) Response {
	lu, c, desc := x.lu, x.c, x.desc
	if !op.noUA {
		if r, ok := lu.ua.take(c.Nexus); ok {
			if o := s.observer; o != nil {
				o.UnitAttention(c.Nexus, c.LUN, r)
			}
			return checkCondition(Sense(r), desc)
		}
	}
	var e *SenseError
	if x.state, e = s.aluaGate(c); e != nil {
		return checkCondition(e, desc)
	}
	if op.conflicts(lu, c, &x.aborts) {
		return Response{Status: StatusReservationConflict, DataOutLen: 0}
	}
	if lu.isStopped() && op.needsMedium {
		return checkCondition(Sense(ReasonNotReadyInitCmdRequired), desc)
	}
	return s.run(op, x)
}

// run executes a command's handler and turns its outcome into a response.
func (s *Server) run(op *opEntry, x *exec) Response {
	desc := x.desc
	data, err := op.handler(x)
	if err != nil {
		if st, ok := err.(statusErr); ok {
			return Response{Status: Status(st), DataOutLen: x.dataOutLen}
		}
		r := checkCondition(AsSense(err), desc)
		r.DataOutLen = x.dataOutLen
		return r
	}
	st := StatusGood
	if x.status != 0 {
		st = x.status
	}
	return Response{Status: st, Data: data, DataOutLen: x.dataOutLen, Buf: x.buf}
}

// statusErr returns a bare status (RESERVATION CONFLICT) from a handler.
type statusErr Status

func (e statusErr) Error() string { return fmt.Sprintf("status 0x%02x", byte(e)) }

func checkCondition(e *SenseError, desc bool) Response {
	return Response{Status: StatusCheckCondition, Sense: BuildSense(e, desc), DataOutLen: 0}
}

// exec is one command in flight through a handler.
type exec struct {
	s          *Server
	lu         *LU
	c          *Command
	desc       bool
	status     Status
	dataOutLen int
	// state is the ALUA access state the command arrived in.
	state alua.AccessState
	// aborts: the LU's PREEMPT AND ABORT count when the task passed the
	// reservation check (see live).
	aborts uint64
	// buf: the pooled buffer the handler's data lies in (read).
	buf *Buffer
	// noLend: the handler reads the data itself (VERIFY): never lent.
	noLend bool
}

// live reports whether the task may still change the medium: no PREEMPT
// AND ABORT has preempted its nexus since it passed the reservation
// check (SPC-4 5.13.11.2.4).
func (x *exec) live() bool {
	if x.lu.aborts.Load() == x.aborts {
		return true // no PREEMPT AND ABORT since: no lock on the write path
	}
	x.lu.mu.Lock()
	defer x.lu.mu.Unlock()
	p := &x.lu.pr
	if p.aborts == x.aborts {
		return true
	}
	return p.abortedAt[itnOf(x.c.Nexus)] <= x.aborts
}

// GuardedBackend is a Backend whose writes may wait (a move's stop holds
// them): it asks live once the write may go ahead and, if a PREEMPT AND
// ABORT aborted the task meanwhile, does not carry it out and returns an
// error with a TaskAborted() true method.
type GuardedBackend interface {
	WriteAtIf(via uint16, p []byte, off int64, fua bool, live Liveness) error
	UnmapIf(via uint16, off, length int64, live Liveness) error
}

// Liveness is what a GuardedBackend asks: may the task still change the
// medium. (An interface, not a func: the task is passed as is, and a
// method value would be allocated per write.)
type Liveness = interface{ Live() bool }

// Live implements Liveness.
func (x *exec) Live() bool { return x.live() }

func (x *exec) cdb() []byte { return x.c.CDB }

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// alloc truncates data to an allocation length.
func alloc(data []byte, n int) []byte {
	if len(data) > n {
		return data[:n]
	}
	return data
}

// checkNAA checks an NAA designator's length against its NAA field
// (SPC-4 7.8.6.6): 8 bytes for NAA 2h, 3h and 5h, 16 for 6h.
func checkNAA(naa []byte) error {
	if len(naa) == 0 {
		return nil // none reported (tests of the device server alone)
	}
	want := map[byte]int{2: 8, 3: 8, 5: 8, 6: 16}[naa[0]>>4]
	if want == 0 || len(naa) != want {
		return fmt.Errorf("NAA designator % x: NAA %xh needs %d bytes", naa, naa[0]>>4, want)
	}
	return nil
}
