package hosts

import (
	"context"
	"time"
)

// logouter is a nexus that can log out (an orderly end of the session).
type logouter interface {
	Logout(ctx context.Context) error
}

// Reboot restarts the host the way open-iscsi does on a reboot: its I/O
// pauses (the applications are down), it sends a Logout on every session
// in path order, stays down for down, then logs in again on one path at
// a time, gap apart, reading RTPG for every LUN on each path as it is
// scanned (scsi_dh_alua's attach). Commands issued meanwhile wait and go
// out once the host is back.
func (h *Host) Reboot(ctx context.Context, down, gap time.Duration) error {
	h.rebootMu.Lock()
	defer h.rebootMu.Unlock()
	h.setRebooting(true)
	defer h.setRebooting(false)
	for _, p := range h.paths {
		p.mu.Lock()
		nx := p.nx
		p.nx, p.failed = nil, true
		p.nextCheck = time.Now().Add(time.Hour) // the checker leaves it to the reboot
		p.mu.Unlock()
		if nx == nil {
			continue
		}
		if lo, ok := nx.(logouter); ok {
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			lo.Logout(lctx)
			cancel()
		}
		nx.Close()
	}
	h.event(0, "reboot", "", "logged out of every path")
	sleep(ctx, down)
	for i, p := range h.paths {
		if i > 0 {
			sleep(ctx, gap)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		nx, err := p.login(ctx)
		if err != nil {
			h.schedule(p, true) // the checker retries it
			continue
		}
		h.attach(ctx, p, nx, true)
	}
	h.event(0, "reboot", "", "logged in again")
	return nil
}

// setRebooting pauses (or resumes) the host's I/O.
func (h *Host) setRebooting(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if on {
		h.resumed = make(chan struct{})
		return
	}
	if h.resumed != nil {
		close(h.resumed)
		h.resumed = nil
	}
}

// rebooting reports whether a reboot is under way.
func (h *Host) rebooting() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.resumed != nil
}

// waitUp blocks while the host is rebooting.
func (h *Host) waitUp(ctx context.Context) {
	h.mu.Lock()
	ch := h.resumed
	h.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	case <-h.done:
	}
}
