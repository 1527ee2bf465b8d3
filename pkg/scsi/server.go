package scsi

import (
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
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

// Identity is what INQUIRY reports about a LU; equal on every path.
type Identity struct {
	Vendor   string // 8 chars
	Product  string // 16 chars
	Revision string // 4 chars
	Serial   string // VPD 0x80
	// NAA is the 16-byte NAA IEEE Registered Extended designator (type 3,
	// NAA 6) that hosts use to group paths into one device.
	NAA [16]byte
}

// LUConfig describes one logical unit.
type LUConfig struct {
	LUN       uint64
	BlockSize int    // bytes per logical block
	Blocks    uint64 // capacity in logical blocks
	Identity  Identity
	Backend   Backend
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
	nexuses map[Nexus]struct{}
	alua    ALUA
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
	return &Server{lus: map[uint64]*LU{}, ports: map[uint16]TargetPortInfo{}, nexuses: map[Nexus]struct{}{}}
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
	if cfg.Blocks == 0 {
		return nil, fmt.Errorf("scsi: LUN %d: zero capacity", cfg.LUN)
	}
	if cfg.Backend == nil {
		return nil, fmt.Errorf("scsi: LUN %d: no backend", cfg.LUN)
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
	s.lus[cfg.LUN] = lu
	return lu, nil
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

// LUNExists implements Handler.
func (s *Server) LUNExists(lun uint64) bool { return s.LU(lun) != nil }

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
}

// Reset implements Handler for LUN RESET and target resets (SAM-5 7.7, 7.10).
func (s *Server) Reset(n Nexus, fn TMF, lun uint64) {
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
	s.mu.RLock()
	var targets []*LU
	if all {
		targets = s.allLUs()
	} else if lu := s.lus[lun]; lu != nil {
		targets = []*LU{lu}
	}
	nexuses := make([]Nexus, 0, len(s.nexuses))
	for x := range s.nexuses {
		nexuses = append(nexuses, x)
	}
	s.mu.RUnlock()
	for _, lu := range targets {
		for _, n := range nexuses {
			lu.ua.add(n, r)
		}
	}
}

// Execute implements Handler. It runs the gate (LU existence, unit
// attention, reservations) and dispatches through the opcode table.
func (s *Server) Execute(c *Command) Response {
	if len(c.CDB) == 0 {
		return checkCondition(Sense(ReasonInvalidOpcode), false)
	}
	op := &opTable[c.CDB[0]]
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
	x := &exec{s: s, lu: lu, c: c, desc: desc}
	if lu != nil {
		if !op.noUA {
			if r, ok := lu.ua.take(c.Nexus); ok {
				return checkCondition(Sense(r), desc)
			}
		}
		if op.conflicts(lu, c) {
			return Response{Status: StatusReservationConflict, DataOutLen: 0}
		}
		if lu.isStopped() && op.needsMedium {
			return checkCondition(Sense(ReasonNotReadyInitCmdRequired), desc)
		}
	}
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
	return Response{Status: st, Data: data, DataOutLen: x.dataOutLen}
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
}

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
