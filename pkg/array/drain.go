package array

import "sync"

// drainLock is the LUN's I/O lock: shared by every media operation,
// exclusive for a move, which thereby drains the commands in flight and
// holds later ones until it ends (a waiting writer blocks new readers, as
// sync.RWMutex does). Every wait is on a sync.Cond, never on the mutex
// for longer than a counter update: a command may wait on a timer while
// it holds the lock shared (a mirror copy's acknowledgement, a slow
// medium), and inside a testing/synctest bubble a goroutine blocked on a
// mutex would stop the bubble's time for good, while one on a Cond waits
// durably (the cluster seeds run whole controllers there).
type drainLock struct {
	mu      sync.Mutex
	cond    sync.Cond
	readers int
	writer  bool // held, or waiting for the readers to drain
}

func (l *drainLock) init() {
	if l.cond.L == nil {
		l.cond.L = &l.mu
	}
}

// RLock takes the lock shared; it waits while a move holds or waits for it.
func (l *drainLock) RLock() {
	l.mu.Lock()
	l.init()
	for l.writer {
		l.cond.Wait()
	}
	l.readers++
	l.mu.Unlock()
}

// RUnlock releases a shared hold.
func (l *drainLock) RUnlock() {
	l.mu.Lock()
	if l.readers--; l.readers < 0 {
		l.mu.Unlock()
		panic("array: RUnlock of an I/O lock not held shared")
	}
	if l.readers == 0 && l.writer {
		l.cond.Broadcast()
	}
	l.mu.Unlock()
}

// Lock takes the lock exclusively: later readers wait from now, then the
// ones in flight drain.
func (l *drainLock) Lock() {
	l.mu.Lock()
	l.init()
	for l.writer {
		l.cond.Wait()
	}
	l.writer = true
	for l.readers > 0 {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

// Unlock releases the exclusive hold.
func (l *drainLock) Unlock() {
	l.mu.Lock()
	if !l.writer {
		l.mu.Unlock()
		panic("array: Unlock of an I/O lock not held")
	}
	l.writer = false
	l.cond.Broadcast()
	l.mu.Unlock()
}

// ChanMutex is a mutex whose waiters wait on a channel (durably, in a
// synctest bubble), for locks held over timed waits (a move's flush, a
// controller's install of a record). The zero value is unlocked.
type ChanMutex struct {
	once sync.Once
	ch   chan struct{}
}

func (m *ChanMutex) c() chan struct{} {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	return m.ch
}

func (m *ChanMutex) Lock() { m.c() <- struct{}{} }
func (m *ChanMutex) Unlock() {
	select {
	case <-m.c():
	default:
		panic("array: Unlock of an unlocked ChanMutex")
	}
}

// TryLock takes the mutex if it is free.
func (m *ChanMutex) TryLock() bool {
	select {
	case m.c() <- struct{}{}:
		return true
	default:
		return false
	}
}

// TryRLock takes the lock shared if no move holds or waits for it.
func (l *drainLock) TryRLock() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.writer {
		return false
	}
	l.readers++
	return true
}
