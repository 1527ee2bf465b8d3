// Package media owns the bottom of the I/O path: one sparse file per LUN,
// thin-provisioning (hole punching), durability (fdatasync) and optional
// latency profiles (ram, ssd, hdd) for the lab. It knows nothing of SCSI,
// nodes or ownership, and imports no other aluad package.
package media

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
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

// File is a Store on one sparse file. Reads copy from a shared read-only
// mapping of the file (no system call per read: the page cache is the
// mapping's memory); writes, punches and syncs are system calls on the
// descriptor. Both see the same page cache, so a read sees every write
// that completed before it. Where the file cannot be mapped, reads use
// pread.
type File struct {
	f    *os.File
	size int64
	path string
	// mu: reads hold it shared while they copy from mapped; Close holds
	// it to unmap.
	mu     sync.RWMutex
	mapped []byte
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
	m := &File{f: f, size: size, path: path}
	if int64(int(size)) == size { // a 32-bit build maps no LUN past 2 GiB
		if b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED); err == nil && int64(len(b)) == size {
			m.mapped = b
		}
	}
	return m, nil
}

// ErrRange is returned for an access outside the store.
var ErrRange = errors.New("media: access beyond end of store")

func (m *File) check(off int64, n int) error {
	if off < 0 || off+int64(n) > m.size {
		return ErrRange
	}
	return nil
}

func (m *File) ReadAt(p []byte, off int64) (err error) {
	if err := m.check(off, len(p)); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.mapped == nil {
		_, err := m.f.ReadAt(p, off)
		return err
	}
	return copyMapped(p, m.mapped[off:off+int64(len(p))])
}

// Referencer is a Store whose bytes a reader may use where they lie,
// without a copy: Ref returns them, and the caller calls Unref once it no
// longer reads them (the store cannot close meanwhile).
type Referencer interface {
	Ref(off int64, n int) ([]byte, bool)
	Unref()
}

// Ref returns the mapped bytes [off, off+n), valid until Unref. Reading
// them while a write or punch of the same range runs reads either, or a
// mix, as concurrent SCSI commands may. The kernel reads them for a
// socket write: a page it cannot bring in (an I/O error under the page
// cache) fails that write (EFAULT), it raises no signal.
func (m *File) Ref(off int64, n int) ([]byte, bool) {
	if m.check(off, n) != nil {
		return nil, false
	}
	m.mu.RLock()
	if m.mapped == nil {
		m.mu.RUnlock()
		return nil, false
	}
	return m.mapped[off : off+int64(n) : off+int64(n)], true
}

// Unref ends a Ref.
func (m *File) Unref() { m.mu.RUnlock() }

// copyMapped copies from a mapping, turning the fault a failed page-in
// raises (an I/O error under the page cache, the file cut short by
// another process) into an error instead of a crash.
func copyMapped(dst, src []byte) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("media: read fault: %v", r)
		}
	}()
	copy(dst, src)
	return nil
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
	m.mu.RLock()
	if m.mapped != nil {
		// The mapping's pages first: the kernel keeps mapped pages.
		if err := unix.Madvise(m.mapped, unix.MADV_DONTNEED); err != nil {
			m.mu.RUnlock()
			return err
		}
	}
	m.mu.RUnlock()
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
func (m *File) Size() int64 { return m.size }
func (m *File) Close() error {
	m.mu.Lock()
	if m.mapped != nil {
		unix.Munmap(m.mapped)
		m.mapped = nil
	}
	m.mu.Unlock()
	return m.f.Close()
}

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

// PreciseWait waits for d by the clock. Go's timers fire no sooner than
// ~1 ms on this machine (and the project's CI VMs), far coarser than an SSD
// access or an interlink hop: time.Sleep(50µs) waits 1 ms. Short waits are
// therefore woken by one clock thread blocked on a Linux timerfd (with
// 1 ns timer slack), armed for the earliest pending deadline less the
// wake-up's own latency; the waiter then yields until the deadline itself.
// No core spins while a few waits are pending. Under load (spinAbove
// waits pending), and where no timerfd can be made, one clock goroutine
// spins on the clock instead, yielding between checks. Only the part of
// a long wait beyond 2 ms sleeps.
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
	ch := waker.add(deadline)
	early := <-ch
	wakeups.Put(ch)
	if early >= 0 {
		// Woken by the timerfd, early before the deadline: how long
		// after that mark this waiter runs is the wake-up lag the next
		// timers are armed with (an average of the last few). A wait the
		// spinning goroutine met says nothing of it.
		lag := int64(time.Since(deadline)) + early
		avg := wakeLag.Load()
		avg += (lag - avg) / 8
		wakeLag.Store(avg)
		wakeEarly.Store(min(max(avg+avg/2, minEarly), maxEarly)) // most wake-ups are early, not late
	}
	for time.Now().Before(deadline) {
		runtime.Gosched() // the last few microseconds: woken early on purpose
	}
}

// wakeEarly is how long before a deadline the clock thread wakes its
// waiter, in nanoseconds: what the thread's and then the goroutine's
// wake-ups took of late, between minEarly and maxEarly. The waiter yields
// away the rest: on this machine a few tens of µs of each wait, where a
// spinning clock burnt all of every wait.
var wakeEarly atomic.Int64

// wakeLag is the average time from the timer's mark to its waiter
// running, in nanoseconds.
var wakeLag atomic.Int64

const (
	minEarly = int64(5 * time.Microsecond)
	maxEarly = int64(50 * time.Microsecond)
)

func init() {
	wakeLag.Store(int64(20 * time.Microsecond))
	wakeEarly.Store(int64(30 * time.Microsecond))
}

// spinAbove is the number of pending waits from which a spinning
// goroutine wakes them, until none is left: waits that overlap are met
// on time by a goroutine checking the clock between the others (it
// yields to them, and its cost is shared by every pending wait), where a
// timerfd thread the kernel must wake on a saturated 2-core machine met
// mirrored writes' waits late enough to cost a third of their
// throughput. A lone wait (a forwarded read at queue depth 1) sleeps.
const spinAbove = 2

// waker is the clock's queue of pending waits.
var waker = newClock()

type clock struct {
	mu    sync.Mutex
	waits waitHeap
	// running: the spinning goroutine runs (no timerfd).
	running bool
	// fd is the timerfd (-1: none); armed is the deadline it is set
	// for (zero: disarmed); started: its thread runs.
	fd      int
	armed   time.Time
	started bool
}

func newClock() *clock {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		fd = -1
	}
	return &clock{fd: fd}
}

type wait struct {
	at time.Time
	ch chan int64
}

// waitHeap is a min-heap of waits by deadline (by hand: container/heap
// would box every wait it pushes and pops).
type waitHeap []wait

func (h waitHeap) Len() int { return len(h) }

func (h *waitHeap) push(w wait) {
	*h = append(*h, w)
	s := *h
	for i := len(s) - 1; i > 0; {
		up := (i - 1) / 2
		if !s[i].at.Before(s[up].at) {
			break
		}
		s[i], s[up] = s[up], s[i]
		i = up
	}
}

func (h *waitHeap) pop() wait {
	s := *h
	w := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = wait{}
	s = s[:n]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < n && s[l].at.Before(s[small].at) {
			small = l
		}
		if r := l + 1; r < n && s[r].at.Before(s[small].at) {
			small = r
		}
		if small == i {
			break
		}
		s[i], s[small] = s[small], s[i]
		i = small
	}
	*h = s
	return w
}

// wakeups are the waits' channels (one slot each: the clock sends one
// token, how early before the deadline the timerfd woke the wait, or -1
// from the spinning goroutine), reused once their wait has taken it.
var wakeups = sync.Pool{New: func() any { return make(chan int64, 1) }}

// add queues a wait and returns the channel that receives a token at its
// deadline (a little before it, with the timerfd).
func (c *clock) add(at time.Time) chan int64 {
	ch := wakeups.Get().(chan int64)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits.push(wait{at, ch})
	if c.fd < 0 || len(c.waits) >= spinAbove {
		// Without a timerfd, or under load: waits this dense are met
		// sooner by a goroutine checking the clock between the others
		// (it yields to them) than by a thread the kernel must wake on a
		// busy machine; its cost is shared by every pending wait.
		if !c.running {
			c.running = true
			go c.spin()
		}
		if c.fd < 0 {
			return ch
		}
	}
	if !c.started {
		c.started = true
		go c.sleeper()
	}
	if !c.running && (c.armed.IsZero() || at.Before(c.armed)) {
		c.arm(at)
	}
	return ch
}

// arm sets the timerfd to fire wakeEarly before at. c.mu is held.
func (c *clock) arm(at time.Time) {
	c.armed = at
	d := max(time.Until(at)-time.Duration(wakeEarly.Load()), time.Nanosecond)
	unix.TimerfdSettime(c.fd, 0, &unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}, nil)
}

// sleeper is the clock thread: blocked in a read of the timerfd until it
// fires, it wakes the waits then due and arms the timer for the next.
func (c *clock) sleeper() {
	runtime.LockOSThread() // the timer slack below is this thread's
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	var buf [8]byte
	for {
		if _, err := unix.Read(c.fd, buf[:]); err != nil && err != unix.EINTR && err != unix.EAGAIN {
			c.mu.Lock()
			c.fd = -1 // broken: the spinning goroutine takes over
			if !c.running && len(c.waits) > 0 {
				c.running = true
				go c.spin()
			}
			c.mu.Unlock()
			return
		}
		early := wakeEarly.Load()
		c.mu.Lock()
		c.armed = time.Time{}
		if !c.running { // else the spinning goroutine meets them, on time
			now := time.Now().Add(time.Duration(early))
			for len(c.waits) > 0 && !c.waits[0].at.After(now) {
				c.waits.pop().ch <- early
			}
			if len(c.waits) > 0 {
				c.arm(c.waits[0].at)
			}
		}
		c.mu.Unlock()
	}
}

// spin wakes waits as their deadlines pass and exits when none is left.
func (c *clock) spin() {
	for {
		now := time.Now()
		c.mu.Lock()
		for len(c.waits) > 0 && !c.waits[0].at.After(now) {
			c.waits.pop().ch <- -1
		}
		if len(c.waits) == 0 || c.fd >= 0 && len(c.waits) < spinAbove/2 {
			c.running = false
			if len(c.waits) > 0 {
				c.arm(c.waits[0].at) // the timerfd takes the rest
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		runtime.Gosched()
	}
}
