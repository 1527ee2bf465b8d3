package scsi

import (
	"sync"
	"sync/atomic"
	"time"
)

// The command trace is what a host's qualification is measured from at
// the array (aluad qualify): while it is on, every command's arrival and
// outcome is counted per (I_T nexus, LU) in short buckets, with the first
// and last arrival and GOOD completion inside each bucket, and every
// CHECK CONDITION and task management function is kept one by one. Off
// (the default) it costs one atomic load per command.

// TraceBucket is one nexus's commands to one LU in one bucket of time.
// Arrived counts the media commands (READ, WRITE, SYNCHRONIZE CACHE,
// VERIFY) that arrived in the bucket, whatever their status; Good the
// media commands that completed GOOD in it; Checks the commands of any
// kind that ended in CHECK CONDITION in it. The times are Unix
// nanoseconds (zero when the count is zero).
type TraceBucket struct {
	Nexus Nexus
	LUN   uint64
	// Start is the bucket's start, Unix nanoseconds.
	Start                     int64
	Arrived, Good, Checks     uint32
	NonOptimized              uint32
	FirstArrival, LastArrival int64
	FirstGood, LastGood       int64
}

// TraceNote is one notable command outcome or task management function.
type TraceNote struct {
	Time  int64 // Unix nanoseconds
	Nexus Nexus
	LUN   uint64
	// Check: a CHECK CONDITION for Opcode with its sense key and
	// additional sense code; otherwise TMF is the function.
	Check          bool
	Opcode         byte
	Key, ASC, ASCQ byte
	TMF            TMF
}

// TraceRead is what TraceSince returns: the buckets closed and the notes
// made since the cursors, and the cursors to ask from next; Lost counts
// what the bounded log dropped before it was read.
type TraceRead struct {
	Buckets    []TraceBucket
	Notes      []TraceNote
	NextBucket uint64
	NextNote   uint64
	Lost       uint64
	Bucket     time.Duration
	// Started is when this trace was turned on (Unix ns): a reader that
	// sees it change knows the trace was stopped and started again, and
	// that its cursors no longer apply.
	Started int64
}

type traceKey struct {
	n   Nexus
	lun uint64
	idx int64
}

// trace is the recorder; one per server while on.
type trace struct {
	mu     sync.Mutex
	bucket int64 // ns
	open   int64 // index of the open bucket
	cur    map[traceKey]*TraceBucket
	// closed and notes are bounded logs: seq of closed[0] is base.
	closed               []TraceBucket
	notes                []TraceNote
	closedBase, noteBase uint64
	lost                 uint64
	max                  int
	lastRead             atomic.Int64
	started              int64
}

// traceMax bounds each log: at 10 ms buckets this is minutes of a busy
// array between two reads.
const traceMax = 1 << 20

// StartTrace turns the command trace on with buckets of the given length
// (10 ms when zero or negative). It is a no-op when it is already on.
func (s *Server) StartTrace(bucket time.Duration) {
	if bucket <= 0 {
		bucket = 10 * time.Millisecond
	}
	t := &trace{bucket: int64(bucket), cur: map[traceKey]*TraceBucket{}, max: traceMax, started: s.now().UnixNano()}
	t.lastRead.Store(t.started)
	s.trace.CompareAndSwap(nil, t)
}

// StopTrace turns the command trace off and drops what it held.
func (s *Server) StopTrace() { s.trace.Store(nil) }

// TraceIdle returns how long ago the trace was last read (false: it is
// off), so an owner can stop a trace nobody reads.
func (s *Server) TraceIdle() (time.Duration, bool) {
	t := s.trace.Load()
	if t == nil {
		return 0, false
	}
	return s.now().Sub(time.Unix(0, t.lastRead.Load())), true
}

// TraceSince returns the buckets closed since bucket cursor fromB and the
// notes since note cursor fromN (false: the trace is off). Buckets whose
// time has passed are closed first, so a read sees everything up to the
// current bucket.
func (s *Server) TraceSince(fromB, fromN uint64) (TraceRead, bool) {
	t := s.trace.Load()
	if t == nil {
		return TraceRead{}, false
	}
	now := s.now().UnixNano()
	t.lastRead.Store(now)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(now / t.bucket)
	r := TraceRead{Bucket: time.Duration(t.bucket), Lost: t.lost, Started: t.started}
	if fromB < t.closedBase {
		fromB = t.closedBase
	}
	if i := fromB - t.closedBase; i < uint64(len(t.closed)) {
		r.Buckets = append([]TraceBucket(nil), t.closed[i:]...)
	}
	r.NextBucket = t.closedBase + uint64(len(t.closed))
	if fromN < t.noteBase {
		fromN = t.noteBase
	}
	if i := fromN - t.noteBase; i < uint64(len(t.notes)) {
		r.Notes = append([]TraceNote(nil), t.notes[i:]...)
	}
	r.NextNote = t.noteBase + uint64(len(t.notes))
	return r, true
}

// advance closes the open buckets when idx has moved past them. t.mu held.
func (t *trace) advance(idx int64) {
	if idx <= t.open {
		return
	}
	for _, b := range t.cur {
		t.closed = append(t.closed, *b)
	}
	clear(t.cur)
	t.open = idx
	if over := len(t.closed) - t.max; over > 0 {
		t.closed = append(t.closed[:0], t.closed[over:]...)
		t.closedBase += uint64(over)
		t.lost += uint64(over)
	}
}

func (t *trace) note(n TraceNote) {
	t.notes = append(t.notes, n)
	if over := len(t.notes) - t.max; over > 0 {
		t.notes = append(t.notes[:0], t.notes[over:]...)
		t.noteBase += uint64(over)
		t.lost += uint64(over)
	}
}

// row returns the bucket of (n, lun) at time ns: the open one, or, for a
// time already closed (a command that arrived buckets ago), a fresh row
// appended to the closed log. t.mu held.
func (t *trace) row(n Nexus, lun uint64, ns int64, late *[]TraceBucket) *TraceBucket {
	idx := ns / t.bucket
	if idx >= t.open {
		k := traceKey{n, lun, idx}
		b := t.cur[k]
		if b == nil {
			b = &TraceBucket{Nexus: n, LUN: lun, Start: idx * t.bucket}
			t.cur[k] = b
		}
		return b
	}
	*late = append(*late, TraceBucket{Nexus: n, LUN: lun, Start: idx * t.bucket})
	return &(*late)[len(*late)-1]
}

func mark(first, last *int64, ns int64) {
	if *first == 0 || ns < *first {
		*first = ns
	}
	if ns > *last {
		*last = ns
	}
}

// command records one command: it arrived at arrived and ended with r at
// done.
func (t *trace) command(n Nexus, lun uint64, class ioClass, opcode byte, r *Response, nonOpt bool, arrived, done time.Time) {
	a, d := arrived.UnixNano(), done.UnixNano()
	media := class != ioOther
	check := r.Status == StatusCheckCondition
	if !media && !check {
		return
	}
	var late []TraceBucket
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(d / t.bucket)
	if media {
		b := t.row(n, lun, a, &late)
		b.Arrived++
		if nonOpt {
			b.NonOptimized++
		}
		mark(&b.FirstArrival, &b.LastArrival, a)
	}
	if media && r.Status == StatusGood {
		b := t.row(n, lun, d, &late)
		b.Good++
		mark(&b.FirstGood, &b.LastGood, d)
	}
	if check {
		b := t.row(n, lun, d, &late)
		b.Checks++
		key, asc, ascq := senseCodes(r.Sense)
		t.note(TraceNote{Time: d, Nexus: n, LUN: lun, Check: true, Opcode: opcode, Key: key, ASC: asc, ASCQ: ascq})
	}
	t.closed = append(t.closed, late...)
}

// senseCodes reads the sense key, ASC and ASCQ of fixed or descriptor
// sense data (zeros if it is too short).
func senseCodes(b []byte) (key, asc, ascq byte) {
	switch {
	case len(b) >= 4 && b[0]&0x7e == 0x72:
		return b[1] & 0x0f, b[2], b[3]
	case len(b) >= 14:
		return b[2] & 0x0f, b[12], b[13]
	}
	return 0, 0, 0
}

// TaskManagement records a task management function a fabric received
// on n (lun is the initiator's LUN for the LU-level functions).
func (s *Server) TaskManagement(n Nexus, fn TMF, lun uint64) {
	t := s.trace.Load()
	if t == nil {
		return
	}
	if fn != TMFTargetWarmReset && fn != TMFTargetColdReset {
		lun = s.resolve(n, lun)
	}
	now := s.now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.note(TraceNote{Time: now, Nexus: n, LUN: lun, TMF: fn})
}
