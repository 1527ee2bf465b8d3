package iscsi

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pathFaults are the fabric faults injected on a running target
// (CONVENTIONS 8): a port down, one initiator's path to a port down, and
// added latency on a path. A down port or path refuses connections and
// drops the ones it has, as a cut link would (with a reset rather than a
// timeout, so tests and the lab see it at once).
type pathFaults struct {
	mu sync.Mutex
	// delays is set while any delay is configured (the send path's
	// lock-free check).
	delays   atomic.Bool
	portDown map[uint16]bool
	pathDown map[pathKey]bool
	delay    map[pathKey]time.Duration
}

// pathKey is one initiator (lower-cased; "" for every initiator) on one
// target port.
type pathKey struct {
	initiator string
	port      uint16
}

func (f *pathFaults) down(initiator string, port uint16) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.portDown[port] || (initiator != "" && f.pathDown[pathKey{strings.ToLower(initiator), port}])
}

func (f *pathFaults) delayOf(initiator string, port uint16) time.Duration {
	if !f.delays.Load() {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.delay) == 0 {
		return 0
	}
	if d, ok := f.delay[pathKey{strings.ToLower(initiator), port}]; ok {
		return d
	}
	return f.delay[pathKey{"", port}]
}

// SetPortUp takes a target port down (its connections are dropped and new
// ones refused) or brings it back.
func (t *Target) SetPortUp(port uint16, up bool) {
	t.faults.mu.Lock()
	if t.faults.portDown == nil {
		t.faults.portDown = map[uint16]bool{}
	}
	t.faults.portDown[port] = !up
	t.faults.mu.Unlock()
	if !up {
		t.dropPaths("", port)
	}
}

// SetPathUp cuts or restores one initiator's path to a target port.
func (t *Target) SetPathUp(initiator string, port uint16, up bool) {
	t.faults.mu.Lock()
	if t.faults.pathDown == nil {
		t.faults.pathDown = map[pathKey]bool{}
	}
	k := pathKey{strings.ToLower(initiator), port}
	if up {
		delete(t.faults.pathDown, k)
	} else {
		t.faults.pathDown[k] = true
	}
	t.faults.mu.Unlock()
	if !up {
		t.dropPaths(initiator, port)
	}
}

// SetPathDelay adds latency to every PDU the target sends on a path
// (initiator "" for every initiator on the port); 0 removes it. PDUs stay
// pipelined: each leaves d after it was queued.
func (t *Target) SetPathDelay(initiator string, port uint16, d time.Duration) {
	t.faults.mu.Lock()
	defer t.faults.mu.Unlock()
	if t.faults.delay == nil {
		t.faults.delay = map[pathKey]time.Duration{}
	}
	k := pathKey{strings.ToLower(initiator), port}
	if d <= 0 {
		delete(t.faults.delay, k)
	} else {
		t.faults.delay[k] = d
	}
	t.faults.delays.Store(len(t.faults.delay) > 0)
}

// ClearFaults restores every port and path and removes added latency.
func (t *Target) ClearFaults() {
	t.faults.mu.Lock()
	defer t.faults.mu.Unlock()
	t.faults.portDown, t.faults.pathDown, t.faults.delay = nil, nil, nil
	t.faults.delays.Store(false)
}

// dropPaths closes the connections of initiator ("" for all) on port.
func (t *Target) dropPaths(initiator string, port uint16) {
	t.mu.Lock()
	var victims []*conn
	for c := range t.conns {
		if c.portal.RelativeID != port {
			continue
		}
		if ini := c.ini.Load(); initiator == "" || (ini != nil && strings.EqualFold(*ini, initiator)) {
			victims = append(victims, c)
		}
	}
	t.mu.Unlock()
	for _, c := range victims {
		c.close("path down")
	}
}

// PortUp reports whether a target port is up (not taken down by a fault).
func (t *Target) PortUp(port uint16) bool {
	t.faults.mu.Lock()
	defer t.faults.mu.Unlock()
	return !t.faults.portDown[port]
}
