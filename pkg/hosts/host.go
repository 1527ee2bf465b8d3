package hosts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/alua"
)

// Host is one emulated server: its paths, its LUNs and its stack.
type Host struct {
	Name string
	P    Personality
	sel  Selector

	paths []*Path
	luns  map[uint64]*lunState
	order []uint64

	mu     sync.Mutex
	stats  Stats
	events []Event
	// resumed is closed when a reboot ends (nil: not rebooting);
	// rebootMu serialises reboots.
	resumed  chan struct{}
	rebootMu sync.Mutex

	done chan struct{}
	wg   sync.WaitGroup

	// tpgs is the array's INQUIRY TPGS field, read at the first attach
	// by stacks that activate path groups (0: not read yet).
	tpgs atomic.Uint32
}

// Stats counts what a host saw and did.
type Stats struct {
	IOs, IOErrors                   uint64
	UAs, Transitioning, NotAvail    uint64
	PathFailures, Relogins          uint64
	RTPGs, STPGs, STPGErrors        uint64
	Retries, GroupSwitches, NoPaths uint64
	// Aborts counts timed-out commands the host ended at the target
	// before retrying them; AbortsFailed those it could not (the nexus
	// was dropped).
	Aborts, AbortsFailed uint64
}

// Event is something a host did, with when.
type Event struct {
	Time   time.Time
	LUN    uint64
	Kind   string // switch, stpg, path-failed, reinstated
	Path   string
	Detail string
}

// ErrNoPath: no usable path for longer than the stack queues.
var ErrNoPath = errors.New("no usable path")

// New attaches a host: it logs in on every path it can (the checker
// retries the others) and reads RTPG for every LUN on every path.
func New(ctx context.Context, name string, p Personality, paths []PathSpec, luns []uint64) (*Host, error) {
	sel, err := NewSelector(p.Selector)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("host %s: no paths", name)
	}
	h := &Host{Name: name, P: p, sel: sel, luns: map[uint64]*lunState{}, done: make(chan struct{})}
	for _, l := range luns {
		h.luns[l] = newLUN(l)
		h.order = append(h.order, l)
	}
	now := time.Now()
	up := 0
	for _, ps := range paths {
		pa := &Path{Name: ps.Name, Node: ps.Node, RelID: ps.RelID, dial: ps.Dial, failed: true,
			checkInt: p.CheckEvery, nextCheck: now.Add(p.CheckEvery)}
		h.paths = append(h.paths, pa)
		if nx, err := pa.login(ctx); err == nil {
			pa.reinstate(nx)
			h.learnTPGS(ctx, nx)
			up++
		}
	}
	if up == 0 {
		return nil, fmt.Errorf("host %s: could not log in on any path", name)
	}
	for _, id := range h.order {
		l := h.luns[id]
		for _, pa := range h.paths {
			if nx := pa.nexus(); nx != nil && p.ReadsRTPG {
				h.readRTPG(ctx, l, pa, nx, true)
			}
		}
		l.mu.Lock()
		if p.Explicit {
			for g, st := range l.state {
				if st == alua.ActiveOptimized {
					l.preferred, l.hasPreferred = g, true
				}
			}
		}
		l.mu.Unlock()
	}
	h.wg.Add(1)
	go h.checker()
	return h, nil
}

// Paths returns the host's paths.
func (h *Host) Paths() []*Path { return h.paths }

// Stats returns the host's counters.
func (h *Host) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// Events returns what the host did, in order.
func (h *Host) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

func (h *Host) count(f func(*Stats)) {
	h.mu.Lock()
	f(&h.stats)
	h.mu.Unlock()
}

func (h *Host) event(lun uint64, kind, path, detail string) {
	h.mu.Lock()
	if len(h.events) < 100000 {
		h.events = append(h.events, Event{Time: time.Now(), LUN: lun, Kind: kind, Path: path, Detail: detail})
	}
	h.mu.Unlock()
}

// Read reads blocks at lba of lun through the stack.
func (h *Host) Read(ctx context.Context, lun, lba uint64, blocks uint32) ([]byte, error) {
	var out []byte
	err := h.do(ctx, lun, false, int(blocks)*BlockSize, func(ctx context.Context, nx Nexus) error {
		var err error
		out, err = nx.Read(ctx, lun, lba, blocks)
		return err
	})
	return out, err
}

// Write writes data at lba of lun through the stack.
func (h *Host) Write(ctx context.Context, lun, lba uint64, data []byte, fua bool) error {
	return h.do(ctx, lun, true, len(data), func(ctx context.Context, nx Nexus) error {
		return nx.Write(ctx, lun, lba, data, fua)
	})
}

// do runs one command until it completes, fails with an error the stack
// passes up, or ctx ends. A command that failed on a path or got a UA or
// an ALUA sense was not executed and is retried, as the SCSI midlayer and
// the multipath layer do.
func (h *Host) do(ctx context.Context, lun uint64, write bool, size int, fn func(context.Context, Nexus) error) error {
	l := h.luns[lun]
	if l == nil {
		return fmt.Errorf("host %s: no LUN %d", h.Name, lun)
	}
	h.waitUp(ctx)
	start := time.Now()
	var noPath time.Time
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := h.choose(ctx, l, size)
		if p == nil && h.rebooting() {
			h.waitUp(ctx) // a command caught by the reboot goes out after it
			continue
		}
		if p == nil && h.activate(ctx, l) {
			continue
		}
		if p == nil {
			if noPath.IsZero() {
				noPath = time.Now()
				h.count(func(s *Stats) { s.NoPaths++ })
			}
			if n := h.P.NoPathRetry; n != QueueForever && time.Since(noPath) >= time.Duration(n)*h.P.CheckEvery {
				h.count(func(s *Stats) { s.IOErrors++ })
				return ErrNoPath
			}
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		noPath = time.Time{}
		nx := p.nexus()
		if nx == nil {
			continue
		}
		p.begin(write, size)
		t0 := time.Now()
		err := h.timed(ctx, nx, fn)
		p.end(write, size, time.Since(t0), time.Since(start), err == nil)
		if err == nil {
			h.count(func(s *Stats) { s.IOs++ })
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errCmdTimeout) {
			h.endTask(ctx, l, p, nx, err)
		}
		key, asc, ascq, sensed := senseOf(err)
		if !sensed {
			sleep(ctx, p.recovery(nx, h.P.FastIOFail))
			h.pathFailed(p, nx, err)
		} else if !h.react(ctx, l, p, nx, key, asc, ascq) {
			h.count(func(s *Stats) { s.IOErrors++ })
			return err
		}
		h.count(func(s *Stats) { s.Retries++ })
	}
}

// activate is dm-multipath's path group initialisation: when the group
// in use has no usable path, it switches to the next group and has the
// device handler activate it (scsi_dh_alua reads RTPG on it), so a group
// the driver last saw STANDBY or UNAVAILABLE is used as soon as the array
// has made it active. It runs at most once per RetryEvery per LUN and
// reports whether a path became usable.
func (h *Host) activate(ctx context.Context, l *lunState) bool {
	if h.P.Grouping != GroupByPrio || !h.P.ReadsRTPG {
		return false
	}
	l.mu.Lock()
	if time.Since(l.activated) < h.P.RetryEvery {
		l.mu.Unlock()
		return false
	}
	l.activated = time.Now()
	explicit := h.tpgs.Load()&2 != 0
	var idle []*Path
	for _, p := range h.paths {
		if p.Up() && !l.failed[p] && !h.usable(l, p) {
			idle = append(idle, p)
		}
	}
	l.mu.Unlock()
	for _, p := range idle {
		nx := p.nexus()
		if nx == nil {
			continue
		}
		h.readRTPG(ctx, l, p, nx, false)
		l.mu.Lock()
		ok := h.usable(l, p)
		st := l.stateOf(p)
		l.mu.Unlock()
		if !ok && explicit && (st == alua.Standby || st == alua.Unavailable) {
			// scsi_dh_alua on an array that allows explicit ALUA: the
			// activation asks for the group with SET TARGET PORT GROUPS.
			l.stpgMu.Lock()
			h.stpg(ctx, l, p)
			l.stpgMu.Unlock()
			l.mu.Lock()
			ok = h.usable(l, p)
			l.mu.Unlock()
		}
		if ok {
			h.event(l.id, "activated", p.Name, "")
			return true
		}
	}
	return false
}

// errCmdTimeout: a command outlived the stack's command timeout; it is
// ended at the target (endTask) and the path is failed as after a
// transport error (the disk class driver's timeout, then MPIO fails the
// path over).
var errCmdTimeout = errors.New("command timed out")

// timed runs fn under the personality's command timeout. A timed-out
// command's error wraps errCmdTimeout and the nexus's own error.
func (h *Host) timed(ctx context.Context, nx Nexus, fn func(context.Context, Nexus) error) error {
	if h.P.CmdTimeout <= 0 {
		return fn(ctx, nx)
	}
	cctx, cancel := context.WithTimeout(ctx, h.P.CmdTimeout)
	defer cancel()
	err := fn(cctx, nx)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return fmt.Errorf("%w: %w", errCmdTimeout, err)
	}
	return err
}

// endTask is the SCSI error handler on a timed-out command: before the
// command may be retried on any path, the target must have confirmed it
// will not complete (ABORT TASK, then LOGICAL UNIT RESET), or the nexus
// is dropped. Without it the late command could land after its retry,
// and after a newer write, acknowledged on another path.
func (h *Host) endTask(ctx context.Context, l *lunState, p *Path, nx Nexus, err error) {
	step := h.P.TMFTimeout
	if step <= 0 {
		step = DefaultTMFTimeout
	}
	h.count(func(s *Stats) { s.Aborts++ })
	if e := nx.EndTask(ctx, err, step); e != nil {
		h.count(func(s *Stats) { s.AbortsFailed++ })
		h.event(l.id, "abort-failed", p.Name, e.Error())
		return
	}
	h.event(l.id, "aborted", p.Name, "")
}

// react handles a CHECK CONDITION on p; it reports whether the command
// is retried.
func (h *Host) react(ctx context.Context, l *lunState, p *Path, nx Nexus, key, asc, ascq byte) bool {
	code := uint16(asc)<<8 | uint16(ascq)
	switch {
	case key == 0x6:
		h.count(func(s *Stats) { s.UAs++ })
		if h.P.ReadsRTPG && slices.Contains(h.P.RTPGOn, code) {
			h.readRTPG(ctx, l, p, nx, false)
		}
		return true
	case key == 0x2 && code == 0x040a:
		h.count(func(s *Stats) { s.Transitioning++ })
		h.transitioning(ctx, l, p, nx)
		return true
	case key == 0x2 && (code == 0x040b || code == 0x040c):
		h.count(func(s *Stats) { s.NotAvail++ })
		if h.P.ReadsRTPG {
			h.readRTPG(ctx, l, p, nx, false)
		}
		if !h.P.ReadsRTPG || h.P.Grouping == GroupByPrio {
			// scsi_dh_alua fails the path for this LUN; the checker
			// reinstates it (into a lower group) at its next run.
			l.mu.Lock()
			l.failed[p] = true
			l.mu.Unlock()
			h.checkSoon(p)
		}
		if h.P.OtherGroup || !h.P.ReadsRTPG {
			sleep(ctx, h.P.RetryEvery)
		}
		return true
	}
	return false
}

// transitioning handles 04/0A: the group is marked transitioning, the
// command waits RetryEvery and is retried; past the transition timeout
// the group counts as STANDBY and the path fails for the LUN.
func (h *Host) transitioning(ctx context.Context, l *lunState, p *Path, nx Nexus) {
	l.mu.Lock()
	g, known := l.groupOf[p.RelID]
	if known {
		if _, ok := l.transSince[g]; !ok {
			l.transSince[g] = time.Now()
		}
		l.state[g] = alua.Transitioning
		if h.P.TransitionTimeout && time.Since(l.transSince[g]) >= l.transTimeout {
			l.state[g] = alua.Standby
			l.failed[p] = true
			l.mu.Unlock()
			h.checkSoon(p)
			h.event(l.id, "transition-timeout", p.Name, fmt.Sprintf("group %d", g))
			return
		}
	}
	l.mu.Unlock()
	sleep(ctx, h.P.RetryEvery)
	if h.P.ReadsRTPG {
		h.readRTPG(ctx, l, p, nx, false)
	}
}

// pathFailed: the nexus broke; the multipath layer fails the path and
// the checker logs it in again.
func (h *Host) pathFailed(p *Path, nx Nexus, err error) {
	if p.fail(nx) {
		h.checkSoon(p)
		h.count(func(s *Stats) { s.PathFailures++ })
		h.event(0, "path-failed", p.Name, err.Error())
	}
}

// Close logs every path out.
func (h *Host) Close() {
	select {
	case <-h.done:
	default:
		close(h.done)
	}
	h.wg.Wait()
	for _, p := range h.paths {
		p.fail(nil)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
