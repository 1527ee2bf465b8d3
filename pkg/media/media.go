// Package media owns the bottom of the I/O path: one sparse file per LUN,
// thin-provisioning (hole punching), durability (fdatasync) and optional
// latency profiles (ram, ssd, hdd) for the lab. It knows nothing of SCSI,
// nodes or ownership, and imports no other aluad package.
package media

import (
	"container/heap"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Store is a block store addressed in bytes.
type Store interface {
	ReadAt(p []byte, off int64) error
	WriteAt(p []byte, off int64) error
	// Punch deallocates a range; later reads return zeros.
	Punch(off, length int64) error
	// Sync makes every completed write durable.
	Sync() error
	Size() int64
	Close() error
}

// File is a Store on one sparse file.
type File struct {
	f    *os.File
	size int64
	path string
}

// OpenFile opens or creates a sparse file of size bytes. An existing file
// of another size is refused rather than silently resized.
func OpenFile(path string, size int64) (*File, error) {
	if size <= 0 {
		return nil, fmt.Errorf("media: %s: size must be positive", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("media: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("media: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("media: %w", err)
	}
	switch {
	case st.Size() == 0:
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("media: %s: %w", path, err)
		}
	case st.Size() != size:
		f.Close()
		return nil, fmt.Errorf("media: %s holds %d bytes but the LUN is configured for %d; refusing to resize existing data",
			path, st.Size(), size)
	}
	return &File{f: f, size: size, path: path}, nil
}

// ErrRange is returned for an access outside the store.
var ErrRange = errors.New("media: access beyond end of store")

func (m *File) check(off int64, n int) error {
	if off < 0 || off+int64(n) > m.size {
		return ErrRange
	}
	return nil
}

func (m *File) ReadAt(p []byte, off int64) error {
	if err := m.check(off, len(p)); err != nil {
		return err
	}
	_, err := m.f.ReadAt(p, off)
	return err
}

func (m *File) WriteAt(p []byte, off int64) error {
	if err := m.check(off, len(p)); err != nil {
		return err
	}
	_, err := m.f.WriteAt(p, off)
	return err
}

const (
	fallocKeepSize  = 0x1
	fallocPunchHole = 0x2
)

// AllocUnit is the thin-provisioning allocation unit: only whole, aligned
// units are deallocated (hole-punched); the rest of a range is written with
// zeros, which reads the same. Punching small ranges would make ext4 write
// back dirty pages synchronously on every UNMAP.
const AllocUnit = 1 << 20

// Punch deallocates [off, off+length): later reads return zeros.
func (m *File) Punch(off, length int64) error {
	if err := m.check(off, int(length)); err != nil {
		return err
	}
	end := off + length
	lo := (off + AllocUnit - 1) / AllocUnit * AllocUnit
	hi := end / AllocUnit * AllocUnit
	if lo >= hi {
		return m.zero(off, length)
	}
	if err := m.zero(off, lo-off); err != nil {
		return err
	}
	if err := m.onFD(func(fd int) error { return syscall.Fallocate(fd, fallocPunchHole|fallocKeepSize, lo, hi-lo) }); err != nil {
		if err := m.zero(lo, hi-lo); err != nil {
			return err
		}
	}
	return m.zero(hi, end-hi)
}

var zeros = make([]byte, 1<<20)

func (m *File) zero(off, length int64) error {
	for done := int64(0); done < length; {
		n := min(int64(len(zeros)), length-done)
		if _, err := m.f.WriteAt(zeros[:n], off+done); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// CacheDropper is a store whose host may hold its data in memory: a new
// owner on another machine drops it before serving (shared storage).
type CacheDropper interface {
	DropCache() error
}

// DropCache makes the kernel forget the file's clean cached pages, so the
// next reads come from the storage: what another machine wrote to it
// (NFS, a shared block device) is read, not this machine's older copy.
func (m *File) DropCache() error {
	return m.onFD(func(fd int) error { return unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED) })
}

func (m *File) Sync() error { return m.onFD(syscall.Fdatasync) }

// onFD runs a system call on the file's descriptor, held open for it: a
// Close meanwhile waits, and one before makes it an error (os.File.Fd
// races a Close).
func (m *File) onFD(f func(fd int) error) error {
	rc, err := m.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
func (m *File) Size() int64  { return m.size }
func (m *File) Close() error { return m.f.Close() }

// Path returns the backing file.
func (m *File) Path() string { return m.path }

// Profile is a latency model for a class of media.
type Profile struct {
	Name       string
	Read       time.Duration // per command
	Write      time.Duration
	PerMiB     time.Duration // transfer time per MiB
	Rotational bool
}

// Profiles are the built-in media classes.
var Profiles = map[string]Profile{
	"ram": {Name: "ram"},
	"ssd": {Name: "ssd", Read: 80 * time.Microsecond, Write: 30 * time.Microsecond, PerMiB: 400 * time.Microsecond},
	"hdd": {Name: "hdd", Read: 4 * time.Millisecond, Write: 4 * time.Millisecond, PerMiB: 5 * time.Millisecond, Rotational: true},
}

// Sleeper waits; injected so tests and the lab control time.
type Sleeper func(time.Duration)

// WithProfile wraps s so each access takes at least the profile's time.
// A "ram" (zero) profile returns s unchanged.
func WithProfile(s Store, p Profile, sleep Sleeper) Store {
	if p.Read == 0 && p.Write == 0 && p.PerMiB == 0 {
		return s
	}
	if sleep == nil {
		sleep = PreciseWait
	}
	return &profiled{Store: s, p: p, sleep: sleep}
}

type profiled struct {
	Store
	p     Profile
	sleep Sleeper
}

func (s *profiled) cost(base time.Duration, n int) time.Duration {
	return base + time.Duration(int64(s.p.PerMiB)*int64(n)/(1<<20))
}

func (s *profiled) ReadAt(p []byte, off int64) error {
	s.sleep(s.cost(s.p.Read, len(p)))
	return s.Store.ReadAt(p, off)
}

func (s *profiled) WriteAt(p []byte, off int64) error {
	s.sleep(s.cost(s.p.Write, len(p)))
	return s.Store.WriteAt(p, off)
}

// PreciseWait waits for d by the clock. OS timers on some machines (this
// one and the project's CI VMs among them) fire no sooner than ~1 ms, far
// coarser than an SSD access or an interlink hop, so time.Sleep(50µs)
// would wait 1 ms. Short waits are therefore woken by one clock goroutine
// that spins on the clock, yielding between checks, while any wait is
// pending; only the part of a long wait beyond 2 ms sleeps. One spinner
// for all waiters (not one per waiter) keeps dozens of concurrent waits
// from starving the goroutines that serve I/O on a machine with few cores.
func PreciseWait(d time.Duration) {
	if d <= 0 {
		return
	}
	deadline := time.Now().Add(d)
	if d > 2*time.Millisecond {
		time.Sleep(d - 2*time.Millisecond)
	}
	if !time.Now().Before(deadline) {
		return
	}
	<-waker.add(deadline)
}

// waker is the clock goroutine's queue of pending waits.
var waker = &clock{}

type clock struct {
	mu      sync.Mutex
	waits   waitHeap
	running bool
}

type wait struct {
	at time.Time
	ch chan struct{}
}

type waitHeap []wait

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h waitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waitHeap) Push(x any)        { *h = append(*h, x.(wait)) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

// add queues a wait and returns the channel closed at its deadline.
func (c *clock) add(at time.Time) chan struct{} {
	ch := make(chan struct{})
	c.mu.Lock()
	heap.Push(&c.waits, wait{at, ch})
	if !c.running {
		c.running = true
		go c.spin()
	}
	c.mu.Unlock()
	return ch
}

// spin wakes waits as their deadlines pass and exits when none is left.
func (c *clock) spin() {
	for {
		now := time.Now()
		c.mu.Lock()
		for len(c.waits) > 0 && !c.waits[0].at.After(now) {
			close(heap.Pop(&c.waits).(wait).ch)
		}
		if len(c.waits) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		runtime.Gosched()
	}
}
