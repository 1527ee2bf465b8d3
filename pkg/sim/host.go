package sim

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// host is a simulated host's multipath stack: one session per path (one
// initiator port per target port, as open-iscsi logs in per portal), the
// group states it last read by RTPG, and the ALUA behaviour of its type:
// it sends I/O to an active/optimized path when it knows one, re-reads
// RTPG on a unit attention, and leaves a standby or unavailable path.
// A host of a type without TPGS ignores ALUA and round-robins.
type host struct {
	w         *World
	name      string
	initiator string
	ht        array.HostType
	paths     []uint16
	luns      []uint64
	sess      map[uint16]bool
	cut       map[uint16]bool
	// states is the host's view: LUN -> target port -> access state.
	states map[uint64]map[uint16]scsi.AccessState
	rr     map[uint64]int
	seen   map[seenKey]*nexusSeen
}

type seenKey struct {
	port uint16
	lun  uint64
}

// nexusSeen is what the UA invariant remembers of one (nexus, LUN): the
// access state when its last media command completed, and whether a unit
// attention was reported on it since.
type nexusSeen struct {
	state scsi.AccessState
	known bool
	ua    bool
}

func newHost(w *World, hs hostSpec) *host {
	return &host{w: w, name: hs.name, initiator: initiatorOf(hs.name), ht: array.HostTypes[hs.typ],
		paths: hs.paths, luns: hs.luns, sess: map[uint16]bool{}, cut: map[uint16]bool{},
		states: map[uint64]map[uint16]scsi.AccessState{}, rr: map[uint64]int{}, seen: map[seenKey]*nexusSeen{}}
}

func (h *host) isid(port uint16) string { return fmt.Sprintf("00023d%06x", port) }

func (h *host) nexus(port uint16) scsi.Nexus {
	return scsi.Nexus{InitiatorName: h.initiator, InitiatorPort: h.initiator + ",i,0x" + h.isid(port), TargetPort: port}
}

func (h *host) coreNexus(port uint16) ownership.Nexus {
	nx, _ := h.w.coreNexus(h.nexus(port))
	return nx
}

// usable: the target port is up, its node is up, and the path is not cut.
func (h *host) usable(port uint16) bool {
	p := h.w.arr.Port(port)
	return p != nil && h.w.portUp[port] && p.Node.Up() && !h.cut[port]
}

// connect logs in on one path if it is usable and not logged in.
func (h *host) connect(port uint16) bool {
	if h.sess[port] || !h.usable(port) {
		return false
	}
	h.sess[port] = true
	h.w.srv.NexusUp(h.nexus(port))
	for _, lun := range h.luns {
		delete(h.seen, seenKey{port, lun})
	}
	h.w.step(ownership.Login{Nexus: h.coreNexus(port)})
	return true
}

// drop ends a path's session as a fault would (connection lost).
func (h *host) drop(port uint16) {
	if !h.sess[port] {
		return
	}
	h.sess[port] = false
	h.w.srv.NexusLost(h.nexus(port))
	h.w.step(ownership.Logout{Nexus: h.coreNexus(port)})
}

// discover reads RTPG for every LUN on a new path (scsi_dh_alua's attach).
func (h *host) discover(port uint16) {
	if !h.ht.TPGS {
		return
	}
	for _, lun := range h.luns {
		h.rtpg(port, lun)
	}
}

// reconnect logs in again on every usable path that has no session.
func (h *host) reconnect() {
	for _, p := range h.paths {
		if h.connect(p) {
			h.discover(p)
		}
	}
}

func (h *host) mendAll() { clear(h.cut) }

func (h *host) setCut(port uint16, cut bool) string {
	if !h.hasPath(port) {
		return "refused: no such path"
	}
	h.w.stats.Faults++
	h.cut[port] = cut
	if cut {
		h.drop(port)
	} else if h.connect(port) {
		h.discover(port)
	}
	return "ok"
}

func (h *host) hasPath(port uint16) bool { return slices.Contains(h.paths, port) }

func (h *host) sessions() int {
	n := 0
	for _, p := range h.paths {
		if h.sess[p] {
			n++
		}
	}
	return n
}

// exec runs a host event.
func (h *host) exec(e Event) string {
	switch e.Verb {
	case "login":
		h.reconnect()
		return fmt.Sprintf("%d sessions", h.sessions())
	case "logout":
		// The core cannot yet tell a Logout from a lost connection: both
		// end the session the same way here.
		for _, p := range h.paths {
			h.drop(p)
		}
		return "0 sessions"
	case "reboot":
		h.exec(Event{Verb: "logout"})
		h.reconnect()
		return fmt.Sprintf("%d sessions", h.sessions())
	case "scan":
		return h.scan()
	}
	lun := h.w.lunArg(e)
	l := h.w.arr.LUN(lun)
	if l == nil || !h.uses(lun) {
		return "refused: the host does not use that LUN"
	}
	if e.Verb == "rtpg" {
		p, ok := h.pick(lun, nil)
		if !ok {
			return "no path"
		}
		return h.rtpg(p, lun)
	}
	return h.w.m.io(h, l, e)
}

func (h *host) uses(lun uint64) bool { return slices.Contains(h.luns, lun) }

// scan is a disk probe on every path: INQUIRY, TEST UNIT READY and READ
// CAPACITY, which every OS sends with or without multipath.
func (h *host) scan() string {
	n := 0
	for _, p := range h.paths {
		if !h.sess[p] || !h.usable(p) {
			continue
		}
		for _, lun := range h.luns {
			for _, cdb := range [][]byte{
				{scsi.OpInquiry, 0, 0, 0, 96, 0},
				{scsi.OpTestUnitReady, 0, 0, 0, 0, 0},
				{scsi.OpServiceActionIn16, scsi.SAReadCapacity16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0},
			} {
				h.execOn(p, lun, cdb, nil, 96, false)
				n++
			}
		}
	}
	return fmt.Sprintf("%d commands", n)
}

// rtpg reads the LUN's group states on one path and checks them.
func (h *host) rtpg(port uint16, lun uint64) string {
	cdb := []byte{scsi.OpMaintenanceIn, 0x20 | scsi.SAReportTPG, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}
	r := h.execOn(port, lun, cdb, nil, 4096, false)
	if r.Status == scsi.StatusCheckCondition && senseOf(r).Key == 6 {
		r = h.execOn(port, lun, cdb, nil, 4096, false) // the UA is reported once
	}
	if r.Status != scsi.StatusGood {
		return fmt.Sprintf("status 0x%02x %s", byte(r.Status), senseString(r))
	}
	groups, _, _, err := scsi.ParseRTPG(r.Data)
	if err != nil {
		h.w.fail("rtpg-parse", "RTPG for LUN %d on port %d: %v", lun, port, err)
		return "bad data"
	}
	ao := 0
	st := h.states[lun]
	if st == nil {
		st = map[uint16]scsi.AccessState{}
		h.states[lun] = st
	}
	var parts []string
	for _, g := range groups {
		if g.State == scsi.StateActiveOptimized {
			ao++
		}
		for _, p := range g.Ports {
			st[p] = g.State
		}
		parts = append(parts, fmt.Sprintf("%d:%s", g.ID, stateName(g.State)))
	}
	if ao > 1 {
		h.w.fail("two-ao-groups", "host %s read %d active/optimized groups for LUN %d: %s", h.name, ao, lun,
			strings.Join(parts, " "))
	}
	return strings.Join(parts, " ")
}

func stateName(s scsi.AccessState) string { return array.AccessState(s).String() }

// pick chooses the path for a command: logged in, usable, not avoided;
// the best known state first (AO, ANO, unknown, the rest), round robin
// among equals. A host without TPGS round-robins over every path.
func (h *host) pick(lun uint64, avoid map[uint16]bool) (uint16, bool) {
	best, rank := []uint16(nil), 99
	for _, p := range h.paths {
		if !h.sess[p] || !h.usable(p) || avoid[p] {
			continue
		}
		r := 0
		if h.ht.TPGS {
			r = stateRank(h.states[lun], p)
		}
		switch {
		case r < rank:
			best, rank = []uint16{p}, r
		case r == rank:
			best = append(best, p)
		}
	}
	if len(best) == 0 {
		return 0, false
	}
	h.rr[lun]++
	return best[h.rr[lun]%len(best)], true
}

func stateRank(st map[uint16]scsi.AccessState, p uint16) int {
	s, ok := st[p]
	switch {
	case !ok:
		return 2
	case s == scsi.StateActiveOptimized:
		return 0
	case s == scsi.StateActiveNonOptimized:
		return 1
	case s == scsi.StateTransitioning:
		return 3
	}
	return 4
}

// send issues a command as the multipath stack does: on a unit attention
// it re-reads RTPG and retries; on standby or unavailable it marks the
// path and tries another; other outcomes are final. ok is false when no
// path could carry it.
func (h *host) send(lun uint64, cdb, data []byte, inLen int) (scsi.Response, bool) {
	avoid := map[uint16]bool{}
	if h.ht.TPGS && len(h.states[lun]) == 0 {
		if p, ok := h.pick(lun, nil); ok {
			h.rtpg(p, lun)
		}
	}
	var r scsi.Response
	for range 6 {
		p, ok := h.pick(lun, avoid)
		if !ok {
			return r, false
		}
		r = h.execOn(p, lun, cdb, data, inLen, true)
		if r.Status != scsi.StatusCheckCondition {
			return r, true
		}
		s := senseOf(r)
		switch {
		case s.Key == 6: // unit attention: re-read the states, retry
			if h.ht.TPGS {
				h.rtpg(p, lun)
			}
		case s.Key == 2 && s.ASC == 4 && (s.ASCQ == 0x0b || s.ASCQ == 0x0c): // standby, unavailable
			avoid[p] = true
			if h.ht.TPGS {
				h.rtpg(p, lun)
			}
		default:
			return r, true
		}
	}
	return r, true
}

// execOn sends one command on one path and keeps the UA invariant's
// record: every nexus whose access state changed must have had a unit
// attention reported before its next media command completes GOOD.
func (h *host) execOn(port uint16, lun uint64, cdb, data []byte, inLen int, mediaCmd bool) scsi.Response {
	w := h.w
	w.stats.Commands++
	r := w.srv.Execute(&scsi.Command{Nexus: h.nexus(port), LUN: lun, CDB: cdb, Data: data, DataInLen: inLen})
	if r.Status == scsi.StatusGood {
		w.stats.Good++
	}
	k := seenKey{port, lun}
	s := h.seen[k]
	if s == nil {
		s = &nexusSeen{}
		h.seen[k] = s
	}
	if r.Status == scsi.StatusCheckCondition && senseOf(r).Key == 6 {
		s.ua = true
	}
	if mediaCmd && r.Status == scsi.StatusGood {
		cur := scsi.AccessState(w.arr.LUN(lun).State(h.initiator, w.arr.Port(port).Node))
		if s.known && cur != s.state && !s.ua {
			w.fail("ua-before-media", "host %s port %d LUN %d: state %s -> %s with no unit attention before a media command completed",
				h.name, port, lun, stateName(s.state), stateName(cur))
		}
		s.state, s.known, s.ua = cur, true, false
	}
	return r
}

func senseOf(r scsi.Response) scsi.ParsedSense {
	s, _ := scsi.ParseSense(r.Sense)
	return s
}

func senseString(r scsi.Response) string {
	if r.Status != scsi.StatusCheckCondition {
		return ""
	}
	s := senseOf(r)
	return fmt.Sprintf("%x/%02x/%02x", s.Key, s.ASC, s.ASCQ)
}

func put64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }
func put32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
