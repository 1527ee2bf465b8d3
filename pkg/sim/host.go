package sim

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// host is a simulated host's multipath stack: one session per path (one
// initiator port per target port, as open-iscsi logs in per portal), the
// group states it last read by RTPG, and the behaviour of its kind
// (kinds.go): its checker, when it reads RTPG, which paths carry its
// I/O. It leaves a standby or unavailable path. A host of a type without
// TPGS reads no RTPG and treats every path alike.
type host struct {
	w         *World
	name      string
	initiator string
	ht        alua.HostType
	paths     []uint16
	luns      []uint64
	sess      map[uint16]bool
	cut       map[uint16]bool
	// detect: ticks until the host's connection ping finds a silent port.
	detect int
	// states is the host's view: LUN -> target port -> access state.
	states map[uint64]map[uint16]alua.AccessState
	rr     map[uint64]int
	seen   map[seenKey]*nexusSeen
	// kind is its multipath stack (kinds.go).
	kind hostKind
	// last is the path each LUN's I/O last went through (the kinds that
	// stick to a path or group); groupBack: paths logged in to a node
	// the host had no session to (followover).
	last      map[uint64]uint16
	groupBack map[uint16]bool
	// rejoin: the paths a rebooting host has still to log in to, one a
	// tick, as open-iscsi logs in portal after portal.
	rejoin []uint16
	// since: when each path's session began (tick count); media: the
	// last tick media I/O completed GOOD through each node (for the MND
	// invariants).
	since map[uint16]int
	media map[string]int
	// used: per node, the evidence the core counts that the host's
	// driver uses it: an RTPG answered there, or media I/O completed in
	// mediaTicks distinct ticks (mediaAt is the last of them), since the
	// host's first session there began.
	rtpgOn       map[uint16]bool // the path is in use (evidence, below)
	mediaTicks   map[nodeLUN]run
	mediaPending map[nodeLUN]bool
	// left: the nodes the host logged out of (Logout of its last session
	// there), with the tick.
	left map[string]int
	// userOf: the LUNs the core knows the host uses (an RTPG for it, or
	// media I/O to it in MediaTicks ticks within the discovery window);
	// lunTicks and lunPending are that media evidence.
	userOf     map[uint64]bool
	lunTicks   map[uint64]run
	lunPending map[uint64]bool
	// away: no session, the last one ended by a Logout.
	away bool
	// lastUsed: per node, the last tick the core could see the host use
	// it (the MND invariant's window starts after it); cmdOn: the last
	// tick any command of the host's reached the node (a scan: traffic the
	// core counts as probing while it goes on).
	lastUsed map[string]int
	cmdOn    map[string]int
	// device: the path a host without multipath has its devices on.
	device    uint16
	hasDevice bool
	// claimed: the paths it read RTPG on in their current session, with
	// the tick it first did.
	claimed map[uint16]int
	// cutOff: per LUN (seenKey{lun}), since when every live path of the
	// host's has reported no usable state (host-io).
	cutOff map[seenKey]int
	// sent counts, per path, the checker's probes and RTPGs sent and the
	// media commands that completed GOOD (what a kind does, for tests).
	sent map[sentKey]int
}

type sentKey struct {
	port uint16
	what string // "tur", "rtpg", "media"
}

// run is a run of media I/O, as the core keeps it: first and last tick,
// distinct ticks; a gap of a discovery window starts a new one.
type run struct{ first, last, ticks int }

func (r run) add(now int) run {
	switch {
	case r.ticks == 0 || now-r.last >= evidenceGap():
		return run{now, now, 1}
	case now != r.last:
		r.last, r.ticks = now, r.ticks+1
	}
	return r
}

// proves: MediaTicks distinct ticks spanning a third of the discovery
// window, the last within it.
func (r run) proves(now int) bool {
	c := coreConfig()
	return r.ticks >= mediaTicks && r.last-r.first >= max(mediaTicks-1, c.DiscoveryWindow/3) &&
		now-r.last < evidenceGap()
}

// evidenceGap is the core's: a gap this long ends a run.
func evidenceGap() int { return max(coreConfig().DiscoveryWindow, 2*mediaTicks) }

// nodeLUN keys a run of media I/O, as the core does: through a node to
// a LUN (a scan that reads each LUN once in turn is no run).
type nodeLUN struct {
	node string
	lun  uint64
}

// tickMedia notes the nodes media I/O went through since the last tick
// (the core counts an interval's I/O at the tick that ends it).
func (h *host) tickMedia() {
	for k := range h.mediaPending {
		if n := k.node; h.reaches(h.w.arr.Node(n)) {
			h.mediaTicks[k] = h.mediaTicks[k].add(h.w.ticks)
			if h.runProves(n, h.mediaTicks[k]) {
				for _, p := range h.w.arr.Node(n).Ports {
					if h.sess[p.RelativeID] {
						h.markUsed(p.RelativeID)
					}
				}
			}
		}
	}
	clear(h.mediaPending)
	for lun := range h.lunPending {
		h.lunTicks[lun] = h.lunTicks[lun].add(h.w.ticks)
		if h.lunTicks[lun].proves(h.w.ticks) {
			h.userOf[lun] = true
		}
	}
	clear(h.lunPending)
}

// mediaTicks is the core's MediaTicks (the sim runs the default).
var mediaTicks = ownership.DefaultConfig().MediaTicks

// usesNode: the host gave the core evidence that it uses node n.
// usesNode: a session on n whose path the host has shown it uses. As the
// core counts it: an RTPG marks its path; media I/O in MediaTicks ticks
// within the discovery window marks every path to the node (an I/O
// interval names the node, not the path), and a path logged in while
// that evidence is fresh; a mark lasts as long as the session.
func (h *host) usesNode(n string) bool {
	for _, p := range h.paths {
		if _, silent := h.w.silent[p]; h.sess[p] && h.rtpgOn[p] && !silent && h.w.portUp[p] && h.w.arr.Port(p).Node.Name == n {
			return true
		}
	}
	return false
}

// markUsed: the core now sees the path in use (and the host back on
// its node, if it had left it).
func (h *host) markUsed(port uint16) {
	h.rtpgOn[port] = true
	delete(h.left, h.w.arr.Port(port).Node.Name)
}

// mediaProves: some run of media I/O through n proves use.
func (h *host) mediaProves(n string) bool {
	for k, r := range h.mediaTicks {
		if k.node == n && h.runProves(n, r) {
			return true
		}
	}
	return false
}

// runProves: the run proves use and goes on two thirds of a discovery
// window after the host's oldest session on n began (the scan is over).
func (h *host) runProves(n string, r run) bool {
	if !r.proves(h.w.ticks) {
		return false
	}
	since, any := h.w.ticks, false
	for _, p := range h.w.arr.Node(n).Ports {
		if h.sess[p.RelativeID] {
			since, any = min(since, h.since[p.RelativeID]), true
		}
	}
	return any && r.last >= since+2*coreConfig().DiscoveryWindow/3
}

type seenKey struct {
	port uint16
	lun  uint64
}

// nexusSeen is what the UA invariant remembers of one (nexus, LUN): the
// access state when its last media command completed, and whether a unit
// attention was reported on it since.
type nexusSeen struct {
	state alua.AccessState
	known bool
	ua    bool
}

// detectTicks is how many ticks (seconds) a host's connection ping takes
// to find a silent port: 2 to 12, fixed per host name (open-iscsi's
// 5 s + 5 s is 10; ESXi's 15 s + 10 s and a Windows disk timeout are
// longer, cut short here by the checkers that probe paths).
func detectTicks(name string) int {
	f := fnv.New32a()
	f.Write([]byte(name))
	return 2 + int(f.Sum32()%11)
}

func newHost(w *World, hs hostSpec) *host {
	return &host{w: w, name: hs.name, detect: detectTicks(hs.name), initiator: initiatorOf(hs.name, hs.kind), ht: alua.HostTypes[hs.typ],
		paths: hs.paths, luns: hs.luns, sess: map[uint16]bool{}, cut: map[uint16]bool{},
		states: map[uint64]map[uint16]alua.AccessState{}, rr: map[uint64]int{}, seen: map[seenKey]*nexusSeen{},
		kind: mustKind(hs.kind), last: map[uint64]uint16{}, groupBack: map[uint16]bool{}, since: map[uint16]int{}, media: map[string]int{},
		rtpgOn: map[uint16]bool{}, mediaTicks: map[nodeLUN]run{}, mediaPending: map[nodeLUN]bool{}, left: map[string]int{},
		userOf: map[uint64]bool{}, lunTicks: map[uint64]run{}, lunPending: map[uint64]bool{}, lastUsed: map[string]int{},
		cmdOn: map[string]int{}, claimed: map[uint16]int{}, cutOff: map[seenKey]int{}, sent: map[sentKey]int{}}
}

func mustKind(name string) hostKind {
	if name == "" {
		name = "auto"
	}
	k, ok := kindOf(name)
	if !ok {
		panic("sim: unknown host kind " + name)
	}
	return k
}

// readsRTPG: the host's kernel reads RTPG (as its paths attach): its kind
// has a handler and its type reports TPGS.
func (h *host) readsRTPG() bool { return h.kind.rtpgLogin && h.ht.TPGS }

// rtpgOnUA: it reads RTPG on a path where it meets a unit attention.
func (h *host) rtpgOnUA() bool { return h.kind.rtpgUA && h.ht.TPGS }

func (h *host) isid(port uint16) string { return fmt.Sprintf("00023d%06x", port) }

func (h *host) nexus(port uint16) scsi.Nexus {
	return scsi.Nexus{InitiatorName: h.initiator, InitiatorPort: h.initiator + ",i,0x" + h.isid(port), TargetPort: port}
}

func (h *host) coreNexus(port uint16) ownership.Nexus {
	nx, _ := h.w.coreNexus(h.nexus(port))
	return nx
}

// usable: the target port is up and not silent, its node is up, and the
// path is not cut.
func (h *host) usable(port uint16) bool {
	p := h.w.arr.Port(port)
	_, silent := h.w.silent[port]
	return p != nil && h.w.portUp[port] && !silent && p.Node.Up() && !h.cut[port]
}

// connect logs in on one path if it is usable and not logged in.
func (h *host) connect(port uint16) bool {
	if h.sess[port] || !h.usable(port) {
		return false
	}
	n0 := h.w.arr.Port(port).Node
	if h.kind.followover && !h.reaches(n0) {
		h.groupBack[port] = true // the first path of its group back
	}
	h.sess[port] = true
	h.away = false
	h.since[port] = h.w.ticks
	n := h.w.arr.Port(port).Node.Name
	delete(h.left, n)
	h.rtpgOn[port] = h.mediaProves(n)
	h.w.srv.NexusUp(h.nexus(port))
	for _, lun := range h.luns {
		delete(h.seen, seenKey{port, lun})
	}
	h.w.step(ownership.Login{Nexus: h.coreNexus(port)})
	return true
}

// drop ends a path's session as a fault would (connection lost).
func (h *host) drop(port uint16) { h.end(port, false) }

// leave ends a path's session with a Logout (an orderly departure).
func (h *host) leave(port uint16) { h.end(port, true) }

// leaveAll sends a Logout on every session. Those to silent ports are
// lost and go first: the daemon's silent port ended them as faults when
// it went quiet, so the array hears the host's last end as its orderly
// departure whatever the order of its paths.
func (h *host) leaveAll() {
	for _, silentFirst := range []bool{true, false} {
		for _, p := range h.paths {
			if _, silent := h.w.silent[p]; silent == silentFirst {
				h.leave(p)
			}
		}
	}
}

func (h *host) end(port uint16, orderly bool) {
	if !h.sess[port] {
		return
	}
	if _, silent := h.w.silent[port]; silent {
		// A Logout sent to a silent port never arrives: the array
		// learns of the end as a fault, as the daemon's silent port
		// drops the session without a word from the host.
		orderly = false
	}
	h.sess[port] = false
	h.away = orderly && h.sessions() == 0
	h.w.srv.NexusLost(h.nexus(port))
	delete(h.rtpgOn, port)
	delete(h.claimed, port)
	n := h.w.arr.Port(port).Node
	if orderly && !h.usesNode(n.Name) {
		h.left[n.Name] = h.w.ticks // no path it used there is left
	}
	h.forgetIfUnreached(n)
	h.w.step(ownership.Logout{Nexus: h.coreNexus(port), Orderly: orderly})
}

// forgetIfUnreached mirrors the core: media evidence for a node is
// dropped when the host has no working path there (all logged out, or
// only silent or down ports left).
func (h *host) forgetIfUnreached(n *array.Node) {
	if h.reaches(n) {
		return
	}
	for k := range h.mediaTicks {
		if k.node == n.Name {
			delete(h.mediaTicks, k)
		}
	}
}

// discover reads RTPG for every LUN on a new path (scsi_dh_alua's
// attach); a followover stack moves to the group that came back if it
// is AO there.
func (h *host) discover(port uint16) {
	back := h.groupBack[port]
	delete(h.groupBack, port)
	if !h.readsRTPG() {
		return
	}
	for _, lun := range h.luns {
		h.rtpg(port, lun)
		if back && h.states[lun][port] == alua.ActiveOptimized {
			h.last[lun] = port
		}
	}
}

// reconnect logs in again on every usable path that has no session.
func (h *host) reconnect() {
	h.rejoin = nil
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
		// A Logout on every session (a shutdown): an orderly departure.
		h.rejoin = nil
		h.leaveAll()
		return "0 sessions"
	case "reboot":
		// A Logout on every session, then, from the next tick, a login
		// on one path a tick with its RTPGs, as open-iscsi and
		// scsi_dh_alua bring the paths back.
		rejoin := append([]uint16(nil), h.paths...)
		h.rejoin = rejoin // mid-reboot from its first Logout on
		h.leaveAll()
		h.rejoin = rejoin
		return fmt.Sprintf("0 sessions, %d to log in", len(h.rejoin))
	case "scan":
		return h.scan()
	}
	lun := h.w.lunArg(e)
	l := h.w.arr.LUN(lun)
	if l == nil || !h.uses(lun) {
		return "refused: the host does not use that LUN"
	}
	if e.Verb == "rtpg" {
		if !h.kind.rtpgLogin {
			return "no device handler: it reads no RTPG"
		}
		p, ok := h.pick(lun, nil)
		if !ok {
			return "no path"
		}
		return h.rtpg(p, lun)
	}
	return h.w.m.io(h, l, e)
}

func (h *host) uses(lun uint64) bool { return slices.Contains(h.luns, lun) }

// rejoinOne logs in on the next path of a reboot (a tick passed).
func (h *host) rejoinOne() {
	for len(h.rejoin) > 0 {
		p := h.rejoin[0]
		h.rejoin = h.rejoin[1:]
		if h.connect(p) {
			h.discover(p)
			return
		}
	}
}

// check is the multipath stack's path checker (multipathd's TUR): a TEST
// UNIT READY on every logged-in usable path, for its first LUN; a unit
// attention it meets makes an ALUA host read RTPG there, as scsi_dh_alua
// does; prio alua reads RTPG for every LUN on every path each round. A
// host without multipath probes nothing; one whose stack ignores ALUA
// (legacy) probes too.
func (h *host) check() {
	if !h.kind.probeIdle || len(h.luns) == 0 {
		return
	}
	lun := h.luns[0]
	for _, p := range h.paths {
		if !h.sess[p] || !h.usable(p) {
			continue
		}
		r := h.execOn(p, lun, []byte{scsi.OpTestUnitReady, 0, 0, 0, 0, 0}, nil, 0, false)
		switch {
		case h.kind.rtpgPoll && h.ht.TPGS:
			for _, l := range h.luns {
				h.rtpg(p, l)
			}
		case r.Status == scsi.StatusCheckCondition && senseOf(r).Key == 6 && h.rtpgOnUA():
			h.rtpg(p, lun)
		}
	}
}

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
			if h.kind.rtpgScan && h.ht.TPGS {
				h.rtpg(p, lun) // scsi_dh_alua's rescan
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
	if _, ok := h.claimed[port]; !ok && r.Status == scsi.StatusGood {
		h.claimed[port] = h.w.ticks // the array answered it: it knows
	}
	if r.Status != scsi.StatusGood {
		return fmt.Sprintf("status 0x%02x %s", byte(r.Status), senseString(r))
	}
	groups, _, _, err := scsi.ParseRTPG(r.Data)
	if err != nil {
		h.w.fail("rtpg-parse", "RTPG for LUN %d on port %d: %v", lun, port, err)
		return "bad data"
	}
	if h.kind.multipath && h.w.coreMultipath(h.name) {
		// One RTPG is use only from a host known to run multipath (its
		// stack reads it as it adds the path); a host without multipath
		// reads it on every path and uses one, whatever the core thinks.
		h.markUsed(port)
	}
	h.userOf[lun] = true
	ao := 0
	st := h.states[lun]
	if st == nil {
		st = map[uint16]alua.AccessState{}
		h.states[lun] = st
	}
	var parts []string
	for _, g := range groups {
		if g.State == alua.ActiveOptimized {
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

func stateName(s alua.AccessState) string { return alua.AccessState(s).String() }

// pick chooses the path for a command as the host's kind does
// (kinds.go): logged in, usable, not avoided; the best known state first
// (AO, ANO, unknown, the rest), round robin among equals. A host without
// TPGS round-robins over every path; one without multipath uses the
// path its devices are on (devicePath); a sticky one keeps
// the path (or node) it used last while it is usable and active; one
// that spreads treats AO, ANO and unknown alike.
func (h *host) pick(lun uint64, avoid map[uint16]bool) (uint16, bool) {
	ok := func(p uint16) bool { return h.sess[p] && h.usable(p) && !avoid[p] }
	switch h.kind.io {
	case ioFirst:
		p, found := h.devicePath(avoid)
		if found {
			h.device, h.hasDevice = p, true
		}
		return p, found
	case ioStickPath:
		if p, had := h.last[lun]; had && ok(p) && stateRank(h.states[lun], p) <= 2 {
			return p, true
		}
	case ioStickGroup:
		if last, had := h.last[lun]; had {
			node := h.w.arr.Port(last).Node
			var group []uint16
			for _, p := range h.paths {
				if ok(p) && h.w.arr.Port(p).Node == node && stateRank(h.states[lun], p) <= 2 {
					group = append(group, p)
				}
			}
			if len(group) > 0 {
				h.rr[lun]++
				p := group[h.rr[lun]%len(group)]
				h.last[lun] = p
				return p, true
			}
		}
	}
	best, rank := []uint16(nil), 99
	for _, p := range h.paths {
		if !h.sess[p] || !h.usable(p) || avoid[p] {
			continue
		}
		r := 0
		if h.ht.TPGS {
			r = stateRank(h.states[lun], p)
		}
		if h.kind.io == ioAll && r <= 2 {
			r = 0 // AO, ANO and unknown alike
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
	p := best[h.rr[lun]%len(best)]
	h.last[lun] = p
	return p, true
}

// devicePath is the path a host without multipath sends I/O on: the one
// its devices are on, while that path works (its session, port and node
// up: nothing moves its I/O while the devices are there); when it fails,
// the first usable path (its application started on another device).
// One path for all its LUNs: a real host may have each LUN's device on a
// different node's path (udev's by-id links name whichever path came
// last), which the core cannot tell from a stack using two nodes at once
// (docs/simulation.md). It changes nothing (checkHostIO asks it too).
func (h *host) devicePath(avoid map[uint16]bool) (uint16, bool) {
	ok := func(p uint16) bool { return h.sess[p] && h.usable(p) && !avoid[p] }
	if h.hasDevice && ok(h.device) {
		return h.device, true
	}
	for _, p := range h.paths {
		if ok(p) {
			return p, true
		}
	}
	return 0, false
}

func stateRank(st map[uint16]alua.AccessState, p uint16) int {
	s, ok := st[p]
	switch {
	case !ok:
		return 2
	case s == alua.ActiveOptimized:
		return 0
	case s == alua.ActiveNonOptimized:
		return 1
	case s == alua.Transitioning:
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
	if h.readsRTPG() && len(h.states[lun]) == 0 {
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
			if h.rtpgOnUA() {
				h.rtpg(p, lun)
			}
		case s.Key == 2 && s.ASC == 4 && (s.ASCQ == 0x0b || s.ASCQ == 0x0c): // standby, unavailable
			if h.kind.io == ioFirst {
				return r, true // no multipath: the application gets the error
			}
			avoid[p] = true
			if h.rtpgOnUA() {
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
	h.cmdOn[w.arr.Port(port).Node.Name] = w.ticks
	switch {
	case cdb[0] == scsi.OpTestUnitReady:
		h.sent[sentKey{port, "tur"}]++
	case cdb[0] == scsi.OpMaintenanceIn:
		h.sent[sentKey{port, "rtpg"}]++
	case mediaCmd && r.Status == scsi.StatusGood:
		h.sent[sentKey{port, "media"}]++
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
		n := w.arr.Port(port).Node.Name
		h.media[n] = w.ticks
		h.mediaPending[nodeLUN{n, lun}] = true // the core hears of it at the next tick
		h.lunPending[lun] = true
		cur := alua.AccessState(w.arr.LUN(lun).State(h.initiator, w.arr.Port(port).Node))
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
