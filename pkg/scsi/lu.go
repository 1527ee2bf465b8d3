package scsi

import (
	"sync"
	"sync/atomic"
)

// LU is one logical unit's device-server state: mode parameters, power
// state, reservations and unit attentions. Media lives behind Backend.
type LU struct {
	cfg LUConfig
	// rw orders COMPARE AND WRITE against other writes: ordinary writes take
	// the read side (they may run concurrently), CAW takes the write side.
	rw sync.RWMutex

	mu   sync.Mutex
	mode modeState
	// saved: the mode parameters MODE SELECT saved (SP=1).
	saved modeState
	// writeThrough mirrors !mode.wce for the write path (no lock there).
	writeThrough atomic.Bool
	stopped      bool
	prevent      map[Nexus]bool
	// SPC-2 RESERVE(6) holder.
	resv *Nexus
	pr   prState
	ua   uaQueues
	io   ioStats
	logs logCounters
	// aborts mirrors pr.aborts for the write path's lock-free check.
	aborts atomic.Uint64
}

func newLU(cfg LUConfig) *LU {
	lu := &LU{cfg: cfg, prevent: map[Nexus]bool{}}
	lu.saved = defaultModeState()
	lu.setMode(lu.saved)
	lu.ua.q = map[Nexus][]Reason{}
	lu.pr = newPRState()
	return lu
}

// Config returns the LU's configuration.
func (lu *LU) Config() LUConfig { return lu.cfg }

func (lu *LU) dsense() bool {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	return lu.mode.dsense
}

func (lu *LU) isStopped() bool {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	return lu.stopped
}

func (lu *LU) blockSize() int   { return lu.cfg.BlockSize }
func (lu *LU) blocks() uint64   { return lu.cfg.Blocks }
func (lu *LU) sizeBytes() int64 { return int64(lu.cfg.Blocks) * int64(lu.cfg.BlockSize) }

// nexusLost releases what SPC ties to an I_T nexus: an SPC-2 reservation
// and PREVENT ALLOW state. Registrations persist (SPC-4 5.13.2).
func (lu *LU) nexusLost(n Nexus) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	if lu.resv != nil && *lu.resv == n {
		lu.resv = nil
	}
	delete(lu.prevent, n)
	lu.ua.drop(n)
}

// reset applies a LUN reset: SPC-2 reservations are released, medium
// removal prevention cleared, and every I_T nexus, the one that issued
// it included, sees BUS DEVICE RESET FUNCTION OCCURRED (SAM-5 6.3.3).
func (lu *LU) reset(all []Nexus) {
	lu.mu.Lock()
	lu.resv = nil
	lu.prevent = map[Nexus]bool{}
	lu.mu.Unlock()
	for _, n := range all {
		lu.ua.add(n, ReasonUABusDeviceReset)
	}
}

// uaQueues holds pending unit attentions per I_T nexus (SPC-4 5.14).
type uaQueues struct {
	mu sync.Mutex
	q  map[Nexus][]Reason
	// n counts the nexuses with a pending UA: take reads it without the
	// lock, so a command on a LU with none pending takes no lock.
	n atomic.Int32
}

// setLocked stores n's queue and keeps the count. u.mu is held.
func (u *uaQueues) setLocked(n Nexus, q []Reason) {
	_, had := u.q[n]
	switch {
	case len(q) == 0 && had:
		delete(u.q, n)
		u.n.Add(-1)
	case len(q) > 0:
		u.q[n] = q
		if !had {
			u.n.Add(1)
		}
	}
}

// add queues r for n unless it is already pending. A POWER ON/RESET
// condition supersedes everything else that is pending (SAM-5 5.14.2).
func (u *uaQueues) add(n Nexus, r Reason) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, p := range u.q[n] {
		if p == r {
			return
		}
	}
	u.setLocked(n, append(u.q[n], r))
}

// reset replaces everything pending for n with r.
func (u *uaQueues) reset(n Nexus, r Reason) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.setLocked(n, []Reason{r})
}

// take removes and returns the oldest pending UA for n.
func (u *uaQueues) take(n Nexus) (Reason, bool) {
	if u.n.Load() == 0 {
		return 0, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	q := u.q[n]
	if len(q) == 0 {
		return 0, false
	}
	u.setLocked(n, q[1:])
	return q[0], true
}

// clear removes r from n's queue (REPORT LUNS clears 3F/0E, SPC-4 6.33).
func (u *uaQueues) clear(n Nexus, r Reason) {
	u.mu.Lock()
	defer u.mu.Unlock()
	q := u.q[n]
	for i, p := range q {
		if p == r {
			u.setLocked(n, append(q[:i:i], q[i+1:]...))
			return
		}
	}
}

func (u *uaQueues) drop(n Nexus) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.setLocked(n, nil)
}

// Pending returns the queued UAs for n (for tests and reports).
func (lu *LU) Pending(n Nexus) []Reason {
	lu.ua.mu.Lock()
	defer lu.ua.mu.Unlock()
	return append([]Reason(nil), lu.ua.q[n]...)
}
