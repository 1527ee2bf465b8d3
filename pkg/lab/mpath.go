package lab

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/scsi"
)

// Host is an ALUA-following multipath host over the Go initiator: one
// session per target port, and per LUN the path group that RTPG reports
// active/optimized. It reads RTPG on every path at attach and after a
// path returns, and again on UA 2A/06, 2A/07 or 29/00; it retries 04/0A
// after RetryDelay and moves off a path whose node is STANDBY or
// UNAVAILABLE; a transport error marks the path failed and the command is
// retried on another path (it was never acknowledged). A background
// checker logs failed paths back in. This is the generic behaviour of an
// ALUA multipath stack; the per-OS personalities come with pkg/hosts.
type Host struct {
	Name      string
	Initiator string
	Target    string
	// RetryDelay is the wait before a command that got 04/0A is retried.
	RetryDelay time.Duration

	paths []*path
	mu    sync.Mutex
	// active is, per LUN, the target port ids of the AO group.
	active map[uint64]map[uint16]bool
	luns   []uint64
	done   chan struct{}
	wg     sync.WaitGroup
	stats  HostStats
}

// HostStats counts what the host saw.
type HostStats struct {
	UAs, Transitioning, PathErrors, Retries, Relogins, RTPGs int
}

type path struct {
	portal daemon.PortalInfo
	isid   [6]byte
	mu     sync.Mutex
	sess   *initiator.Session
}

func (p *path) session() *initiator.Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sess
}

// NewHost logs in on every portal and reads RTPG for each LUN on every path.
func NewHost(ctx context.Context, name, iqn, target string, portals []daemon.PortalInfo, luns []uint64) (*Host, error) {
	h := &Host{Name: name, Initiator: iqn, Target: target, RetryDelay: 10 * time.Millisecond,
		active: map[uint64]map[uint16]bool{}, luns: luns, done: make(chan struct{})}
	for i, pi := range portals {
		h.paths = append(h.paths, &path{portal: pi, isid: [6]byte{0x80, 0, 0, 0, byte(len(name)), byte(i + 1)}})
	}
	for _, p := range h.paths {
		if err := h.login(ctx, p); err != nil {
			h.Close()
			return nil, fmt.Errorf("host %s: login on %s: %w", name, p.portal.Addr, err)
		}
	}
	h.wg.Add(1)
	go h.checker()
	return h, nil
}

// login logs a path in, clears its unit attentions and reads RTPG for
// every LUN on it (what scsi_dh_alua does when a path is attached).
func (h *Host) login(ctx context.Context, p *path) error {
	s, err := initiator.Dial(ctx, initiator.Config{Addr: p.portal.Addr, Target: h.Target, InitiatorName: h.Initiator,
		ISID: p.isid, DialTimeout: time.Second})
	if err != nil {
		return err
	}
	for _, lun := range h.luns {
		if _, err := s.ClearUA(ctx, lun, 8); err != nil {
			s.Close()
			return err
		}
		if err := h.refresh(ctx, s, lun); err != nil {
			s.Close()
			return err
		}
	}
	p.mu.Lock()
	p.sess = s
	p.mu.Unlock()
	return nil
}

// refresh reads RTPG for lun on s and records the AO group's ports.
func (h *Host) refresh(ctx context.Context, s *initiator.Session, lun uint64) error {
	data, err := s.ReportTargetPortGroups(ctx, lun, true)
	if err != nil {
		return err
	}
	groups, _, _, err := scsi.ParseRTPG(data)
	if err != nil {
		return err
	}
	ao := map[uint16]bool{}
	for _, g := range groups {
		if g.State == scsi.StateActiveOptimized {
			for _, p := range g.Ports {
				ao[p] = true
			}
		}
	}
	h.mu.Lock()
	h.active[lun] = ao
	h.stats.RTPGs++
	h.mu.Unlock()
	return nil
}

// pick returns a live path for lun: one in the AO group if any is up,
// else any live path (forwarded I/O still works on ANO paths).
func (h *Host) pick(lun uint64) *path {
	h.mu.Lock()
	ao := h.active[lun]
	h.mu.Unlock()
	var any *path
	for _, p := range h.paths {
		if p.session() == nil {
			continue
		}
		if ao[p.portal.RelativeID] {
			return p
		}
		if any == nil {
			any = p
		}
	}
	return any
}

// ErrNoPath: every path of the host is down.
var ErrNoPath = errors.New("no path")

// Do runs one command on lun until it completes GOOD, fails with an error
// that is not a path or ALUA condition, or ctx ends.
func (h *Host) Do(ctx context.Context, lun uint64, op func(*initiator.Session) error) error {
	for {
		p := h.pick(lun)
		if p == nil {
			select {
			case <-ctx.Done():
				return ErrNoPath
			case <-time.After(h.RetryDelay):
				continue
			}
		}
		s := p.session()
		if s == nil {
			continue
		}
		err := op(s)
		if err == nil {
			return nil
		}
		var ce *initiator.CheckError
		if !errors.As(err, &ce) {
			h.pathFailed(p, s)
			h.count(func(st *HostStats) { st.PathErrors++ })
		} else if retry, rerr := h.react(ctx, s, lun, ce); !retry {
			return rerr
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		h.count(func(st *HostStats) { st.Retries++ })
	}
}

// react decides what a CHECK CONDITION means for the path.
func (h *Host) react(ctx context.Context, s *initiator.Session, lun uint64, ce *initiator.CheckError) (bool, error) {
	key, asc, ascq := ce.KeyASC()
	switch {
	case key == 0x6: // UNIT ATTENTION: re-read RTPG on 2A/06, 2A/07, 29/xx, 3F/0E
		h.count(func(st *HostStats) { st.UAs++ })
		if asc == 0x2a || asc == 0x29 || asc == 0x3f {
			h.refresh(ctx, s, lun)
		}
		return true, nil
	case key == 0x2 && asc == 0x04 && ascq == 0x0a: // transitioning
		h.count(func(st *HostStats) { st.Transitioning++ })
		select {
		case <-ctx.Done():
		case <-time.After(h.RetryDelay):
		}
		h.refresh(ctx, s, lun)
		return true, nil
	case key == 0x2 && asc == 0x04 && (ascq == 0x0b || ascq == 0x0c): // standby, unavailable
		h.refresh(ctx, s, lun)
		return true, nil
	}
	return false, ce
}

func (h *Host) count(f func(*HostStats)) {
	h.mu.Lock()
	f(&h.stats)
	h.mu.Unlock()
}

// Stats returns the host's counters.
func (h *Host) Stats() HostStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

func (h *Host) pathFailed(p *path, s *initiator.Session) {
	p.mu.Lock()
	if p.sess == s {
		p.sess = nil
	}
	p.mu.Unlock()
	s.Close()
}

// checker logs failed paths back in (a path checker).
func (h *Host) checker() {
	defer h.wg.Done()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		for _, p := range h.paths {
			if s := p.session(); s != nil {
				select {
				case <-s.Done():
					h.pathFailed(p, s)
				default:
					continue
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if h.login(ctx, p) == nil {
				h.count(func(st *HostStats) { st.Relogins++ })
			}
			cancel()
		}
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
		if s := p.session(); s != nil {
			s.Close()
		}
	}
}
