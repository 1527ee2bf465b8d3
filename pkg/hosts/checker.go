package hosts

import (
	"context"
	"errors"
	"time"

	"github.com/aluad/aluad/pkg/alua"
)

// checker is the path checker: it logs failed paths back in, tests live
// ones with TEST UNIT READY and, for stacks that do, re-reads each path's
// ALUA priority (multipathd's prio refresh) and fails back. A path whose
// state is unchanged is checked less often, up to MaxCheckEvery.
func (h *Host) checker() {
	defer h.wg.Done()
	step := min(100*time.Millisecond, h.P.CheckEvery)
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		checked := false
		for _, p := range h.paths {
			p.mu.Lock()
			due := !time.Now().Before(p.nextCheck)
			p.mu.Unlock()
			if due {
				h.check(p)
				checked = true
			}
		}
		if checked && h.P.Explicit {
			for _, id := range h.order {
				h.hostFailback(h.luns[id])
			}
		}
	}
}

// check runs the checker on one path and schedules its next run.
func (h *Host) check(p *Path) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() {
		select {
		case <-h.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	changed := false
	nx := p.nexus()
	if nx == nil {
		nx, err := p.login(ctx)
		if err != nil {
			h.schedule(p, true)
			return
		}
		h.count(func(s *Stats) { s.Relogins++ })
		h.event(0, "reinstated", p.Name, "")
		h.attach(ctx, p, nx, false)
		return
	}
	select {
	case <-nx.Done():
		h.pathFailed(p, nx, errors.New("connection closed"))
		h.schedule(p, true)
		return
	default:
	}
	if err := nx.TestUnitReady(ctx, h.order[0]); err != nil {
		key, asc, ascq, sensed := senseOf(err)
		if !sensed {
			h.pathFailed(p, nx, err)
			h.schedule(p, true)
			return
		}
		if key == 0x6 {
			// The checker's TUR met the unit attention first: the
			// stack acts on it as on any command's (scsi_dh_alua).
			h.react(ctx, h.luns[h.order[0]], p, nx, key, asc, ascq)
		}
	}
	for _, id := range h.order {
		l := h.luns[id]
		l.unfail(p)
		if h.P.PrioAtCheck {
			h.readRTPG(ctx, l, p, nx, false)
			changed = h.refreshPrio(l, p) || changed
			h.failback(l, nil)
		}
	}
	h.schedule(p, changed)
}

// unfail reinstates p for the LUN (a checker that found it working).
func (l *lunState) unfail(p *Path) {
	l.mu.Lock()
	delete(l.failed, p)
	l.mu.Unlock()
}

// refreshPrio sets p's priority for l from the driver's state; it reports
// whether it changed.
func (h *Host) refreshPrio(l *lunState, p *Path) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	g, ok := l.groupOf[p.RelID]
	if !ok {
		return false
	}
	n := prioOf(l.state[g], l.pref[g])
	old, had := l.prio[p]
	l.prio[p] = n
	return !had || old != n
}

func (h *Host) schedule(p *Path, reset bool) {
	p.mu.Lock()
	if reset || p.checkInt <= 0 {
		p.checkInt = h.P.CheckEvery
	} else {
		p.checkInt = min(2*p.checkInt, h.P.MaxCheckEvery)
	}
	p.nextCheck = time.Now().Add(p.checkInt)
	p.mu.Unlock()
}

// learnTPGS reads the array's INQUIRY TPGS once, for the stacks that
// activate path groups (scsi_dh_alua reads it at attach).
func (h *Host) learnTPGS(ctx context.Context, nx Nexus) {
	if h.P.Grouping != GroupByPrio || !h.P.ReadsRTPG || h.tpgs.Load() != 0 || len(h.order) == 0 {
		return
	}
	if t, err := nx.TPGS(ctx, h.order[0]); err == nil {
		h.tpgs.Store(uint32(t) | 0x100) // 0x100: known, even when 0
	}
}

// checkSoon brings a path's next check to within CheckEvery, as
// multipathd does when the kernel fails a path ("if opportune, schedule
// the next check earlier"): a path that grew to MaxCheckEvery while
// healthy is not left failed for that long.
func (h *Host) checkSoon(p *Path) {
	p.mu.Lock()
	if soon := time.Now().Add(h.P.CheckEvery); p.nextCheck.After(soon) {
		p.nextCheck, p.checkInt = soon, h.P.CheckEvery
	}
	p.mu.Unlock()
}

// failback applies the failback policy after priorities changed (the
// reinstated path, if one came back).
func (h *Host) failback(l *lunState, reinstated *Path) {
	if h.P.Grouping != GroupByPrio {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	best := -1
	for _, p := range h.paths {
		if h.usable(l, p) {
			best = max(best, l.prio[p])
		}
	}
	switch h.P.Failback {
	case FailbackImmediate:
		l.cur = best
	case FailbackFollowover:
		if reinstated != nil && l.prio[reinstated] == best && best > l.cur {
			l.cur = best
		}
	}
}

// hostFailback: an explicit host moves a LUN back to its preferred group
// when it reaches that group and the LUN is elsewhere.
func (h *Host) hostFailback(l *lunState) {
	l.mu.Lock()
	var target *Path
	if l.hasPreferred && l.state[l.preferred] != alua.ActiveOptimized {
		for _, p := range h.paths {
			if g, ok := l.groupOf[p.RelID]; ok && g == l.preferred && p.Up() && !l.failed[p] {
				target = p
				break
			}
		}
	}
	l.mu.Unlock()
	if target == nil {
		return
	}
	l.stpgMu.Lock()
	defer l.stpgMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h.stpg(ctx, l, target)
}

// attach puts a freshly logged-in path in use: each LUN's state on it is
// read (RTPG, if the stack reads it; at boot, scsi_dh_alua's attach), the
// prioritizer refreshed, failback considered (not at boot), and its
// checker scheduled.
func (h *Host) attach(ctx context.Context, p *Path, nx Nexus, atBoot bool) {
	p.reinstate(nx)
	h.learnTPGS(ctx, nx)
	for _, id := range h.order {
		l := h.luns[id]
		l.unfail(p)
		if h.P.ReadsRTPG {
			h.readRTPG(ctx, l, p, nx, atBoot)
			h.refreshPrio(l, p)
		}
		if !atBoot {
			h.failback(l, p)
		}
	}
	h.schedule(p, true)
}
