package scsi

// LUN mapping (LUN masking): which LUs an initiator may address and under
// which LUN numbers. Storage admins map a volume to a host or a host group
// at a LUN number of their choosing; the device server asks the LUNMapper
// on every command to turn the LUN the initiator addressed into the LU's
// own number. Without a mapper every initiator sees every LU at its own
// number.
//
// An unmapped LUN behaves as a LUN with no LU behind it (SPC-4 6.6.2,
// SAM-5 5.9): INQUIRY answers with peripheral qualifier 011b and device
// type 1Fh, other commands get LOGICAL UNIT NOT SUPPORTED, and REPORT LUNS
// lists only what is mapped.

// LUNMapper resolves an initiator's LUN numbers.
type LUNMapper interface {
	// Resolve turns the LUN n addressed into the LU's number; false when
	// nothing is mapped there for n.
	Resolve(n Nexus, lun uint64) (uint64, bool)
	// Visible lists n's LUN numbers in increasing order.
	Visible(n Nexus) []uint64
}

// SetLUNMapper installs (or, with nil, removes) the LUN map. Callers that
// change what a mapper answers call MapChanged for the nexuses affected.
func (s *Server) SetLUNMapper(m LUNMapper) {
	s.mapper.Store(&mapperBox{m})
}

// mapperBox holds the mapper for an atomic load on every command.
type mapperBox struct{ m LUNMapper }

func (s *Server) lunMapper() LUNMapper {
	if b := s.mapper.Load(); b != nil {
		return b.m
	}
	return nil
}

// unmapped is an LU number no LU has (ids stop at 16383).
const unmapped = ^uint64(0)

// resolve returns the LU number behind the LUN n addressed (unmapped
// when none).
func (s *Server) resolve(n Nexus, lun uint64) uint64 {
	m := s.lunMapper()
	if m == nil {
		return lun
	}
	if v, ok := m.Resolve(n, lun); ok {
		return v
	}
	return unmapped
}

// visible lists the LUN numbers n may address.
func (s *Server) visible(n Nexus) []uint64 {
	if m := s.lunMapper(); m != nil {
		return m.Visible(n)
	}
	return s.LUNs()
}

// MapChanged queues REPORTED LUNS DATA HAS CHANGED (3F/0E) for every
// logged-in nexus affected says yes to, on each LU it can now address
// (SPC-4 6.33; what LIO does when an ACL's mapped LUNs change). Call it
// after the mapper answers the new map.
func (s *Server) MapChanged(affected func(Nexus) bool) int {
	s.mu.RLock()
	var hit []Nexus
	for n := range s.nexuses {
		if affected(n) {
			hit = append(hit, n)
		}
	}
	s.mu.RUnlock()
	for _, n := range hit {
		for _, l := range s.visible(n) {
			if lu := s.LU(s.resolve(n, l)); lu != nil {
				lu.ua.add(n, ReasonUAReportedLUNsChanged)
			}
		}
	}
	return len(hit)
}
