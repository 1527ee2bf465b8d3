package interlink

import (
	"net"
	"sync"
	"time"
)

// Faulty wraps one end of a connection so the fault API can cut or slow
// the link between two controllers as a real network fault would. Cut,
// what this end writes is held, not lost and not refused (a TCP sender's
// data waits in its send buffer), and goes out in order when the cut is
// repaired, unless the connection ended meanwhile (the peers learn of a
// cut by their heartbeats). Delayed, every write waits first. Wrap both
// ends to cut both directions.
type Faulty struct {
	net.Conn
	mu    sync.Mutex // held across a write, so writes stay in order
	cut   bool
	held  []byte
	delay time.Duration
	sleep func(time.Duration)
	// closed ends a delay's wait (a closed link sends nothing more).
	closed    chan struct{}
	closeOnce sync.Once
}

// NewFaulty wraps nc; sleep waits out a delay (nil: a timer, which Close
// ends).
func NewFaulty(nc net.Conn, sleep func(time.Duration)) *Faulty {
	return &Faulty{Conn: nc, sleep: sleep, closed: make(chan struct{})}
}

// Close closes the connection; a write waiting out a delay ends at once.
func (f *Faulty) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return f.Conn.Close()
}

// Cut stops (true) or restores (false) this end's traffic; a restore
// sends what was held.
func (f *Faulty) Cut(cut bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut = cut
	if cut || len(f.held) == 0 {
		return nil
	}
	held := f.held
	f.held = nil
	_, err := f.Conn.Write(held)
	return err
}

// Delay makes every write wait d first (0: none).
func (f *Faulty) Delay(d time.Duration) {
	f.mu.Lock()
	f.delay = d
	f.mu.Unlock()
}

// Write sends b, or holds it while the link is cut.
func (f *Faulty) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.delay > 0 {
		if f.sleep != nil {
			f.sleep(f.delay)
		} else {
			t := time.NewTimer(f.delay)
			select {
			case <-t.C:
			case <-f.closed:
				t.Stop()
				return 0, net.ErrClosed
			}
		}
	}
	if f.cut {
		f.held = append(f.held, b...)
		return len(b), nil
	}
	return f.Conn.Write(b)
}
