package media

import (
	"errors"
	"sync"
	"time"
)

// Op names a store operation, for fault injection.
type Op int

// The store operations.
const (
	OpRead Op = iota
	OpWrite
	OpPunch
	OpSync
	numOps
)

func (o Op) String() string {
	return [...]string{"read", "write", "punch", "sync"}[o]
}

// Injector decides the fault of one operation on [off, off+n): a delay
// before it and an error returned instead of doing it (CONVENTIONS 8:
// faults are injected by wrapping interfaces, as pebble's errorfs does).
type Injector interface {
	Inject(op Op, off, n int64) (time.Duration, error)
}

// InjectorFunc adapts a function to an Injector.
type InjectorFunc func(op Op, off, n int64) (time.Duration, error)

// Inject implements Injector.
func (f InjectorFunc) Inject(op Op, off, n int64) (time.Duration, error) { return f(op, off, n) }

// ErrInjected is the error an injected media fault returns.
var ErrInjected = errors.New("media: injected fault")

// WithFaults wraps s so every operation first asks inj: the delay is
// waited with sleep (nil: PreciseWait), and an error fails the operation
// without touching s.
func WithFaults(s Store, inj Injector, sleep Sleeper) Store {
	if sleep == nil {
		sleep = PreciseWait
	}
	return &faulty{Store: s, inj: inj, sleep: sleep}
}

type faulty struct {
	Store
	inj   Injector
	sleep Sleeper
}

func (f *faulty) fault(op Op, off, n int64) error {
	d, err := f.inj.Inject(op, off, n)
	if d > 0 {
		f.sleep(d)
	}
	return err
}

func (f *faulty) ReadAt(p []byte, off int64) error {
	if err := f.fault(OpRead, off, int64(len(p))); err != nil {
		return err
	}
	return f.Store.ReadAt(p, off)
}

func (f *faulty) WriteAt(p []byte, off int64) error {
	if err := f.fault(OpWrite, off, int64(len(p))); err != nil {
		return err
	}
	return f.Store.WriteAt(p, off)
}

func (f *faulty) Punch(off, length int64) error {
	if err := f.fault(OpPunch, off, length); err != nil {
		return err
	}
	return f.Store.Punch(off, length)
}

// Ref lends the wrapped store's bytes while no read fault is set (a
// delayed or failing read goes through ReadAt, which applies it).
func (f *faulty) Ref(off int64, n int) ([]byte, bool) {
	r, ok := f.Store.(Referencer)
	if !ok {
		return nil, false
	}
	if d, err := f.inj.Inject(OpRead, off, int64(n)); d > 0 || err != nil {
		return nil, false
	}
	return r.Ref(off, n)
}

// Unref ends a reference Ref lent.
func (f *faulty) Unref() { f.Store.(Referencer).Unref() }

func (f *faulty) Sync() error {
	if err := f.fault(OpSync, 0, 0); err != nil {
		return err
	}
	return f.Store.Sync()
}

// Switch is an Injector set at run time: per operation, fail or not, and
// one delay for every operation. Safe for concurrent use.
type Switch struct {
	mu    sync.Mutex
	fail  [numOps]bool
	delay time.Duration
}

// Fail makes op fail with ErrInjected (on) or succeed (off).
func (s *Switch) Fail(op Op, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[op] = on
}

// Delay sets the delay of every operation (0: none).
func (s *Switch) Delay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// Inject implements Injector.
func (s *Switch) Inject(op Op, _, _ int64) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail[op] {
		return s.delay, ErrInjected
	}
	return s.delay, nil
}
