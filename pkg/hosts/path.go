package hosts

import (
	"context"
	"sync"
	"time"
)

// Alpha weighs the old value in the paths' rolling averages
// a*old + (1-a)*new (reference 000 4.2).
const Alpha = 0.9

// Counters are one path's counters (reference 000 4.1), [0] reads and
// [1] writes; the totals are the sums.
type Counters struct {
	BytesPending [2]int64
	IOsPending   [2]int64
	Bytes        [2]uint64
	IOs          [2]uint64
	// Latency is from the host's submission to completion (retries and
	// queueing included); Service the time of the command on this path.
	Latency [2]time.Duration
	Service [2]time.Duration
	// AvgLatency and AvgService are rolling averages in microseconds.
	AvgLatency, AvgService float64
	Errors                 uint64
	MaxPending             int64
}

// PendingBytes is the sum of bytes pending on the path.
func (c Counters) PendingBytes() int64 { return c.BytesPending[0] + c.BytesPending[1] }

// PendingIOs is the sum of commands pending on the path.
func (c Counters) PendingIOs() int64 { return c.IOsPending[0] + c.IOsPending[1] }

// Path is one I_T nexus of a host to a target port.
type Path struct {
	Name  string // e.g. h1:a1
	Node  string
	RelID uint16
	dial  Dialer

	mu     sync.Mutex
	nx     Nexus
	failed bool // the multipath layer failed it; the checker reinstates it
	c      Counters
	// checker state
	nextCheck time.Time
	checkInt  time.Duration
	lastOK    bool
	// recoverUntil: the transport gives up on the broken nexus then
	// (Personality.FastIOFail); commands that fail on it wait till then.
	recoverUntil time.Time
	recoverNx    Nexus
}

// recovery returns how long a command that failed on nx by a transport
// error waits before the path fails: until hold after the first such
// failure on that nexus.
func (p *Path) recovery(nx Nexus, hold time.Duration) time.Duration {
	if hold <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.recoverNx != nx {
		p.recoverNx, p.recoverUntil = nx, now.Add(hold)
	}
	return p.recoverUntil.Sub(now)
}

// PathSpec declares a path for New.
type PathSpec struct {
	Name  string
	Node  string
	RelID uint16
	Dial  Dialer
}

// nexus returns the path's nexus if it is usable.
func (p *Path) nexus() Nexus {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed {
		return nil
	}
	return p.nx
}

// Up reports whether the path carries I/O.
func (p *Path) Up() bool { return p.nexus() != nil }

// Counters returns a snapshot of the path's counters.
func (p *Path) Counters() Counters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c
}

// fail marks the path failed and drops nx if it is still the path's.
func (p *Path) fail(nx Nexus) bool {
	p.mu.Lock()
	was := !p.failed
	if nx == nil || p.nx == nx {
		p.failed = true
		if p.nx != nil {
			p.nx.Close()
		}
		p.nx = nil
	}
	p.mu.Unlock()
	return was
}

// reinstate installs a fresh nexus.
func (p *Path) reinstate(nx Nexus) {
	p.mu.Lock()
	if p.nx != nil && p.nx != nx {
		p.nx.Close()
	}
	p.nx, p.failed = nx, false
	p.mu.Unlock()
}

// begin counts a command sent on the path.
func (p *Path) begin(write bool, n int) {
	i := rw(write)
	p.mu.Lock()
	p.c.BytesPending[i] += int64(n)
	p.c.IOsPending[i]++
	p.c.MaxPending = max(p.c.MaxPending, p.c.PendingIOs())
	p.mu.Unlock()
}

// end counts its completion: service is its time on the path, latency
// its time since the host took it.
func (p *Path) end(write bool, n int, service, latency time.Duration, ok bool) {
	i := rw(write)
	p.mu.Lock()
	p.c.BytesPending[i] -= int64(n)
	p.c.IOsPending[i]--
	if ok {
		p.c.Bytes[i] += uint64(n)
		p.c.IOs[i]++
		p.c.Latency[i] += latency
		p.c.Service[i] += service
		p.c.AvgLatency = roll(p.c.AvgLatency, latency)
		p.c.AvgService = roll(p.c.AvgService, service)
	} else {
		p.c.Errors++
		// An error weighs on the path as a long latency would.
		p.c.AvgLatency = roll(p.c.AvgLatency, time.Second)
	}
	p.mu.Unlock()
}

func roll(avg float64, d time.Duration) float64 {
	v := float64(d) / float64(time.Microsecond)
	if avg == 0 {
		return v
	}
	return Alpha*avg + (1-Alpha)*v
}

func rw(write bool) int {
	if write {
		return 1
	}
	return 0
}

// login dials the path.
func (p *Path) login(ctx context.Context) (Nexus, error) { return p.dial(ctx) }
