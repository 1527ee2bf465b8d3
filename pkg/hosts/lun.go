package hosts

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/scsi"
)

// lunState is what a host's stack knows of one LUN.
type lunState struct {
	id uint64
	mu sync.Mutex
	// state is the driver's view (scsi_dh_alua, the DSM, the SATP) of each
	// target port group, from the last RTPG; groupOf maps target ports to
	// their groups.
	state        map[uint16]alua.AccessState
	pref         map[uint16]bool // the group's PREF bit
	groupOf      map[uint16]uint16
	transSince   map[uint16]time.Time
	transTimeout time.Duration
	// prio is the multipath layer's priority of each path; failed the
	// paths it failed for this LUN.
	prio   map[*Path]int
	failed map[*Path]bool
	// cur is the priority of the group in use (GroupByPrio).
	cur              int
	mru, stick       *Path
	stickN           int
	node             string // node of the path last used
	rtpg             chan struct{}
	preferred        uint16
	hasPreferred     bool
	stpgMu           sync.Mutex
	stpgHold         time.Time
	rtpgErr, stpgErr error
	// activated: when the multipath layer last initialised a path group
	// for this LUN (activate).
	activated time.Time
}

func newLUN(id uint64) *lunState {
	return &lunState{id: id, state: map[uint16]alua.AccessState{}, pref: map[uint16]bool{}, groupOf: map[uint16]uint16{},
		transSince: map[uint16]time.Time{}, transTimeout: 60 * time.Second, prio: map[*Path]int{},
		failed: map[*Path]bool{}, cur: -1}
}

// prioOf is multipath-tools' prio alua: AO 50, ANO 10, STANDBY 1, else
// 0, and 80 more for a group with the PREF bit that is not optimized
// (libmultipath/prioritizers/alua.c; so a PREF ANO group, 90, outranks AO).
func prioOf(s alua.AccessState, pref bool) int {
	n := 0
	switch s {
	case alua.ActiveOptimized:
		n = 50
	case alua.ActiveNonOptimized:
		n = 10
	case alua.Standby:
		n = 1
	}
	if pref && s != alua.ActiveOptimized {
		n += 80
	}
	return n
}

// readRTPG reads RTPG for l on p, one at a time per LUN (a concurrent
// caller waits for the read in flight), and takes the states. At attach,
// and for stacks whose group follows the states at once, the paths'
// priorities follow too.
func (h *Host) readRTPG(ctx context.Context, l *lunState, p *Path, nx Nexus, attach bool) {
	l.mu.Lock()
	if ch := l.rtpg; ch != nil {
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	ch := make(chan struct{})
	l.rtpg = ch
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.rtpg = nil
		l.mu.Unlock()
		close(ch)
	}()
	var data []byte
	var err error
	for try := 0; try < 4; try++ {
		data, err = nx.ReportTargetPortGroups(ctx, l.id)
		if key, _, _, ok := senseOf(err); !ok || key != 0x6 {
			break
		}
	}
	h.count(func(s *Stats) { s.RTPGs++ })
	if err != nil {
		if _, _, _, sensed := senseOf(err); !sensed && ctx.Err() == nil {
			h.pathFailed(p, nx, err)
		}
		l.mu.Lock()
		l.rtpgErr = err
		l.mu.Unlock()
		return
	}
	groups, _, tt, err := scsi.ParseRTPG(data)
	if err != nil {
		l.mu.Lock()
		l.rtpgErr = fmt.Errorf("path %s: %w", p.Name, err)
		l.mu.Unlock()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.transTimeout = 60 * time.Second
	if tt > 0 {
		l.transTimeout = time.Duration(tt) * time.Second
	}
	for _, g := range groups {
		l.state[g.ID] = g.State
		l.pref[g.ID] = g.Pref
		if g.State != alua.Transitioning {
			delete(l.transSince, g.ID)
		}
		for _, port := range g.Ports {
			l.groupOf[port] = g.ID
		}
	}
	if attach || !h.P.PrioAtCheck {
		for _, q := range h.paths {
			if g, ok := l.groupOf[q.RelID]; ok {
				l.prio[q] = prioOf(l.state[g], l.pref[g])
			}
		}
	}
}

// usable: p carries l's I/O as far as the stack knows (l.mu held).
func (h *Host) usable(l *lunState, p *Path) bool {
	if !p.Up() || l.failed[p] {
		return false
	}
	if !h.P.ReadsRTPG {
		return true
	}
	g, ok := l.groupOf[p.RelID]
	if !ok {
		return true
	}
	switch l.state[g] {
	case alua.Standby, alua.Unavailable, alua.Offline:
		return false
	}
	return true
}

// stateOf is the state of p's group (l.mu held); unknown counts as AO.
func (l *lunState) stateOf(p *Path) alua.AccessState {
	if g, ok := l.groupOf[p.RelID]; ok {
		return l.state[g]
	}
	return alua.ActiveOptimized
}

func filter(ps []*Path, keep func(*Path) bool) []*Path {
	var out []*Path
	for _, p := range ps {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// bestUsable returns the usable paths, or those in the first non-empty
// class: AO, then ANO, then any.
func (l *lunState) bestUsable(usable []*Path) []*Path {
	for _, st := range []alua.AccessState{alua.ActiveOptimized, alua.ActiveNonOptimized} {
		if c := filter(usable, func(p *Path) bool { return l.stateOf(p) == st }); len(c) > 0 {
			return c
		}
	}
	return usable
}

// choose picks the path for one command, or nil when none is usable.
func (h *Host) choose(ctx context.Context, l *lunState, size int) *Path {
	if h.P.Explicit {
		h.ensureAO(ctx, l)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	usable := filter(h.paths, func(p *Path) bool { return h.usable(l, p) })
	if len(usable) == 0 {
		return nil
	}
	var cands []*Path
	switch h.P.Grouping {
	case GroupByPrio:
		best := -1
		for _, p := range usable {
			best = max(best, l.prio[p])
		}
		if len(filter(usable, func(p *Path) bool { return l.prio[p] == l.cur })) == 0 {
			l.cur = best // the group in use has no usable path: the next one
		}
		cands = filter(usable, func(p *Path) bool { return l.prio[p] == l.cur })
	case AOSubset:
		cands = l.bestUsable(usable)
	case MostRecentlyUsed:
		if l.mru != nil && h.usable(l, l.mru) && l.stateOf(l.mru) == alua.ActiveOptimized {
			cands = []*Path{l.mru}
		} else {
			cands = l.bestUsable(usable)[:1]
			l.mru = cands[0]
		}
	default:
		cands = usable
	}
	var p *Path
	if h.P.SwitchEvery > 0 && l.stick != nil && l.stickN < h.P.SwitchEvery && contains(cands, l.stick) {
		p = l.stick
		l.stickN++
	} else {
		p = h.sel.Pick(cands, size)
		l.stick, l.stickN = p, 1
	}
	if p.Node != l.node && h.P.Grouping != AllPaths {
		// The first choice is logged too ("->a"), so that the host's
		// node is known from its events at any time.
		h.event(l.id, "switch", p.Name, l.node+"->"+p.Node)
		if l.node != "" {
			h.count(func(s *Stats) { s.GroupSwitches++ })
		}
		l.node = p.Node
	}
	return p
}

func contains(ps []*Path, p *Path) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// ensureAO is the explicit host's activation: with no usable AO path it
// asks, with SET TARGET PORT GROUPS, for a group it reaches (its
// preferred one if it can) to become active/optimized.
func (h *Host) ensureAO(ctx context.Context, l *lunState) {
	hasAO := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if time.Now().Before(l.stpgHold) {
			return true // a refused STPG: use what there is for a while
		}
		for _, p := range h.paths {
			if h.usable(l, p) && l.stateOf(p) == alua.ActiveOptimized {
				return true
			}
		}
		return false
	}
	if hasAO() {
		return
	}
	l.stpgMu.Lock()
	defer l.stpgMu.Unlock()
	if hasAO() {
		return
	}
	l.mu.Lock()
	var target *Path
	for _, p := range h.paths {
		if !p.Up() {
			continue
		}
		if g, ok := l.groupOf[p.RelID]; ok && l.hasPreferred && g == l.preferred {
			target = p
			break
		}
		if target == nil {
			target = p
		}
	}
	l.mu.Unlock()
	if target != nil {
		h.stpg(ctx, l, target)
	}
}

// stpg asks for p's group to become active/optimized (l.stpgMu held).
func (h *Host) stpg(ctx context.Context, l *lunState, p *Path) {
	nx := p.nexus()
	l.mu.Lock()
	g, ok := l.groupOf[p.RelID]
	l.mu.Unlock()
	if nx == nil || !ok {
		return
	}
	var err error
	for try := 0; try < 4; try++ {
		err = nx.SetTargetPortGroups(ctx, l.id, []alua.GroupRequest{{State: alua.ActiveOptimized, Group: g}})
		if key, _, _, ok := senseOf(err); !ok || key != 0x6 {
			break
		}
	}
	if err != nil {
		h.count(func(s *Stats) { s.STPGErrors++ })
		l.mu.Lock()
		l.stpgErr, l.stpgHold = err, time.Now().Add(h.P.CheckEvery)
		l.mu.Unlock()
		if _, _, _, sensed := senseOf(err); !sensed && ctx.Err() == nil {
			h.pathFailed(p, nx, err) // not when the caller gave up
		}
		return
	}
	h.count(func(s *Stats) { s.STPGs++ })
	h.event(l.id, "stpg", p.Name, fmt.Sprintf("group %d (node %s) to active/optimized", g, p.Node))
	h.readRTPG(ctx, l, p, nx, false)
}
