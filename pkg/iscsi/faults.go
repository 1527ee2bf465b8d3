package iscsi

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/fabric"
)

// pathFaults are the fabric faults injected on a running target
// (CONVENTIONS 8): a port's mode, one initiator's path to a port down,
// and added latency on a path. A down path refuses connections and drops
// the ones it has, as a cut link would (with a close rather than a
// timeout, so tests and the lab see it at once).
type pathFaults struct {
	mu sync.Mutex
	// delays is set while any delay is configured (the send path's
	// lock-free check).
	delays   atomic.Bool
	portMode map[uint16]fabric.PortMode
	pathDown map[pathKey]bool
	delay    map[pathKey]time.Duration
	// held: the connections a silent port keeps open and unanswered.
	held map[uint16][]net.Conn
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
	return f.portMode[port] != fabric.PortUp || (initiator != "" && f.pathDown[pathKey{strings.ToLower(initiator), port}])
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

// SetPortUp disables a target port (PortDown: its connections are closed
// and new ones closed at once) or brings it back.
func (t *Target) SetPortUp(port uint16, up bool) {
	m := fabric.PortDown
	if up {
		m = fabric.PortUp
	}
	t.SetPortMode(port, m) // only PortReset can fail (re-listening)
}

// ErrNoPort: no portal has the relative port id.
var ErrNoPort = errors.New("iscsi: no such target port")

// SetPortMode puts a target port in mode m (see PortMode). Leaving
// PortSilent resets the connections it held; leaving PortReset listens
// again on the same address, which can fail if another socket took it.
func (t *Target) SetPortMode(port uint16, m fabric.PortMode) error {
	idx := -1
	for i, p := range t.cfg.Portals {
		if p.RelativeID == port {
			idx = i
		}
	}
	if idx < 0 {
		return ErrNoPort
	}
	if m < fabric.PortUp || m > fabric.PortSilent {
		return fmt.Errorf("iscsi: unknown port mode %d", int(m))
	}
	// One mode change at a time: the mode and the listener change
	// together (a reset racing an up must not close the new listener).
	t.modeMu.Lock()
	defer t.modeMu.Unlock()
	if t.PortMode(port) == fabric.PortReset && m != fabric.PortReset {
		// Listen again first: if the address was taken, the port stays
		// refusing and a later change tries again.
		if err := t.reopenListener(idx); err != nil {
			return err
		}
	}
	t.faults.mu.Lock()
	if t.faults.portMode == nil {
		t.faults.portMode = map[uint16]fabric.PortMode{}
	}
	was := t.faults.portMode[port]
	if m == fabric.PortUp {
		delete(t.faults.portMode, port)
	} else {
		t.faults.portMode[port] = m
	}
	var held []net.Conn
	if was == fabric.PortSilent && m != fabric.PortSilent {
		held = t.faults.held[port]
		delete(t.faults.held, port)
	}
	t.faults.mu.Unlock()
	for _, nc := range held {
		resetConn(nc)
	}
	switch m {
	case fabric.PortDown:
		t.dropPaths("", port, fabric.PortDown)
	case fabric.PortReset:
		t.closeListener(idx)
		t.dropPaths("", port, fabric.PortReset)
	case fabric.PortSilent:
		t.dropPaths("", port, fabric.PortSilent)
	}
	return nil
}

// applyMode shapes a connection that a fault is ending as its port's
// mode says: silenced or reset rather than closed with a FIN.
func (t *Target) applyMode(c *conn) {
	w, ok := c.nc.(*wireConn)
	if !ok {
		return
	}
	switch t.PortMode(c.portal.RelativeID) {
	case fabric.PortSilent:
		w.silence()
	case fabric.PortReset:
		w.reset.Store(true)
	}
}

// resetConn closes a connection with a reset (RST), not a FIN.
func resetConn(nc net.Conn) {
	if w, ok := nc.(*wireConn); ok {
		nc = w.Conn
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	nc.Close()
}

// maxHeld bounds the connections a silent port holds.
const maxHeld = 256

// hold keeps a connection of a silent port open and unread.
func (t *Target) hold(port uint16, nc net.Conn) {
	t.faults.mu.Lock()
	if t.faults.portMode[port] == fabric.PortSilent {
		if t.faults.held == nil {
			t.faults.held = map[uint16][]net.Conn{}
		}
		held := append(t.faults.held[port], nc)
		nc = nil
		if len(held) > maxHeld {
			// Hosts retrying their logins every second for a long
			// outage: the oldest held sockets (their initiators gave up
			// on them long ago) are let go, so descriptors stay bounded.
			nc, held = held[0], held[1:]
		}
		t.faults.held[port] = held
	}
	t.faults.mu.Unlock()
	if nc != nil { // the port came back meanwhile: the controller forgot it
		resetConn(nc)
	}
}

// wireConn is an accepted connection as the port's mode shapes it: once
// silenced, it sends nothing, reads nothing, and closing it leaves the
// socket open (held by the target until the port comes back).
type wireConn struct {
	net.Conn
	t      *Target
	port   uint16
	silent atomic.Bool
	// reset: closing it sends a RST.
	reset atomic.Bool
}

// errSilenced is what a silenced connection's reads return.
var errSilenced = errors.New("iscsi: port silenced")

func (w *wireConn) Read(b []byte) (int, error) {
	if w.silent.Load() {
		return 0, errSilenced
	}
	n, err := w.Conn.Read(b)
	if w.silent.Load() {
		return 0, errSilenced // what arrived after the power went is lost
	}
	return n, err
}

func (w *wireConn) Write(b []byte) (int, error) {
	if w.silent.Load() {
		return len(b), nil // into the void
	}
	return w.Conn.Write(b)
}

// writeBuffers is Write for a vectored write (writev on a TCP socket).
func (w *wireConn) writeBuffers(b *net.Buffers) (int64, error) {
	if w.silent.Load() {
		var n int64
		for _, s := range *b {
			n += int64(len(s))
		}
		*b = nil
		return n, nil
	}
	return b.WriteTo(w.Conn)
}

func (w *wireConn) Close() error {
	if w.silent.Load() {
		return nil // held: see silence
	}
	if w.reset.Load() {
		resetConn(w.Conn)
		return nil
	}
	return w.Conn.Close()
}

// silence stops the connection on the wire without a word to the peer:
// its reader and writer are woken (deadlines, which send nothing) and the
// socket is handed to the target to hold.
func (w *wireConn) silence() {
	if w.silent.Swap(true) {
		return
	}
	w.Conn.SetDeadline(time.Now())
	w.t.hold(w.port, w.Conn)
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
		t.dropPaths(initiator, port, fabric.PortDown)
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

// ClearPathFaults restores every cut path and removes added latency;
// port modes stay as they are.
func (t *Target) ClearPathFaults() {
	t.faults.mu.Lock()
	defer t.faults.mu.Unlock()
	t.faults.pathDown, t.faults.delay = nil, nil
	t.faults.delays.Store(false)
}

// dropPaths ends the connections of initiator ("" for all) on port, on
// the wire as mode says: closed (PortDown, and a cut path), reset or
// silenced.
func (t *Target) dropPaths(initiator string, port uint16, mode fabric.PortMode) {
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
		if w, ok := c.nc.(*wireConn); ok {
			switch mode {
			case fabric.PortSilent:
				w.silence()
			case fabric.PortReset:
				w.reset.Store(true)
			}
		}
		c.close("path down")
	}

}

// PortUp reports whether a target port is up (in no fault mode).
func (t *Target) PortUp(port uint16) bool { return t.PortMode(port) == fabric.PortUp }

// PortMode reports a target port's mode.
func (t *Target) PortMode(port uint16) fabric.PortMode {
	t.faults.mu.Lock()
	defer t.faults.mu.Unlock()
	return t.faults.portMode[port]
}
