package scsi

import (
	"slices"
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
// VERIFY) that arrived in the bucket, whatever their status; Done the
// media commands that completed in it, whatever their status; Good those
// of them that completed GOOD; Checks the commands of any kind that ended
// in CHECK CONDITION in it. The times are Unix nanoseconds (zero when the
// count is zero).
type TraceBucket struct {
	Nexus Nexus
	LUN   uint64
	// Start is the bucket's start, Unix nanoseconds.
	Start                     int64
	Arrived, Done, Good       uint32
	Checks, NonOptimized      uint32
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
// what the bounded logs dropped before it was read.
type TraceRead struct {
	Buckets    []TraceBucket
	Notes      []TraceNote
	NextBucket uint64
	NextNote   uint64
	Lost       uint64
	// Skipped counts the entries the cursors asked for that were no
	// longer kept (dropped unread, or taken by another reader).
	Skipped uint64
	Bucket  time.Duration
	// Delay is how long a bucket stays open after its time (a command
	// that completes within it still counts its arrival there): a read
	// sees the buckets older than this.
	Delay time.Duration
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

// ringLog is a bounded log read from cursors: seq numbers count every
// entry ever appended; a read acknowledges what is below its cursor, and
// entries past max unread are dropped from the front (counted as lost).
type ringLog[T any] struct {
	buf  []T
	head int    // buf[head:] are kept
	base uint64 // seq of buf[head]
	max  int
	lost uint64
}

func (l *ringLog[T]) add(v ...T) {
	l.buf = append(l.buf, v...)
	if over := len(l.buf) - l.head - l.max; over > 0 {
		l.head += over
		l.base += uint64(over)
		l.lost += uint64(over)
	}
	l.compact()
}

// ack drops what is below seq (the reader has it). A cursor past the end
// is not this log's (a reader of a trace since stopped and started): it
// acknowledges nothing.
func (l *ringLog[T]) ack(seq uint64) {
	if seq <= l.base || seq > l.base+uint64(len(l.buf)-l.head) {
		return
	}
	n := min(seq-l.base, uint64(len(l.buf)-l.head))
	l.head += int(n)
	l.base += n
	l.compact()
}

// compact moves the kept entries down once the dropped half is large, so
// each entry is copied O(1) times.
func (l *ringLog[T]) compact() {
	if l.head > 4096 && l.head > len(l.buf)/2 {
		l.buf = append(l.buf[:0], l.buf[l.head:]...)
		l.head = 0
	}
}

// since returns the entries from seq on and the next seq, and how many
// below the first kept one the cursor asked for (dropped unread, or taken
// by another reader's cursor).
func (l *ringLog[T]) since(seq uint64) ([]T, uint64, uint64) {
	var skipped uint64
	if seq < l.base {
		skipped, seq = l.base-seq, l.base
	}
	next := l.base + uint64(len(l.buf)-l.head)
	if seq >= next {
		return nil, next, skipped
	}
	return append([]T(nil), l.buf[l.head+int(seq-l.base):]...), next, skipped
}

// traceOpen is how many buckets stay open after their time: a command
// that completes within that long of its arrival counts both in one row.
const traceOpen = 20

// trace is the recorder; one per server while on.
type trace struct {
	mu     sync.Mutex
	bucket int64 // ns
	// cur holds the open buckets, byIdx their keys by bucket; every
	// bucket up to closedTo is closed.
	cur      map[traceKey]*TraceBucket
	byIdx    map[int64][]traceKey
	closedTo int64
	closed   ringLog[TraceBucket]
	notes    ringLog[TraceNote]
	lastRead atomic.Int64
	started  int64
}

// traceMax bounds each log: at 10 ms buckets this is minutes of a busy
// array that nobody reads.
const traceMax = 1 << 20

// StartTrace turns the command trace on with buckets of the given length
// (10 ms when zero or negative). It is a no-op when it is already on.
func (s *Server) StartTrace(bucket time.Duration) {
	if bucket <= 0 {
		bucket = 10 * time.Millisecond
	}
	now := s.now().UnixNano()
	t := &trace{bucket: int64(bucket), cur: map[traceKey]*TraceBucket{}, byIdx: map[int64][]traceKey{},
		closedTo: now/int64(bucket) - 1, started: now}
	t.closed.max, t.notes.max = traceMax, traceMax
	t.lastRead.Store(now)
	s.trace.CompareAndSwap(nil, t)
}

// StopTrace turns the command trace off and drops what it held.
func (s *Server) StopTrace() { s.trace.Store(nil) }

// StopTraceIfIdle turns the trace off if nobody has read it for d, and
// reports whether it is off now. A trace started again meanwhile is left
// on.
func (s *Server) StopTraceIfIdle(d time.Duration) bool {
	t := s.trace.Load()
	if t == nil {
		return true
	}
	if s.now().Sub(time.Unix(0, t.lastRead.Load())) < d {
		return false
	}
	return s.trace.CompareAndSwap(t, nil)
}

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
// notes since note cursor fromN (false: the trace is off). The cursors
// acknowledge what is below them: the trace keeps one reader's unread
// rows. Buckets older than the open window are closed first.
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
	t.closed.ack(fromB)
	t.notes.ack(fromN)
	r := TraceRead{Bucket: time.Duration(t.bucket), Delay: time.Duration(traceOpen * t.bucket), Started: t.started}
	var sb, sn uint64
	r.Buckets, r.NextBucket, sb = t.closed.since(fromB)
	r.Notes, r.NextNote, sn = t.notes.since(fromN)
	r.Skipped = sb + sn
	r.Lost = t.closed.lost + t.notes.lost
	return r, true
}

// advance closes the buckets that fell out of the open window at bucket
// idx. t.mu held.
func (t *trace) advance(idx int64) {
	to := idx - traceOpen
	if to <= t.closedTo {
		return
	}
	var rows []TraceBucket
	closeIdx := func(i int64) {
		for _, k := range t.byIdx[i] {
			rows = append(rows, *t.cur[k])
			delete(t.cur, k)
		}
		delete(t.byIdx, i)
	}
	if to-t.closedTo > int64(len(t.byIdx)) {
		// A long quiet: visit the open buckets, not every index.
		idxs := make([]int64, 0, len(t.byIdx))
		for i := range t.byIdx {
			if i <= to {
				idxs = append(idxs, i)
			}
		}
		slices.Sort(idxs)
		for _, i := range idxs {
			closeIdx(i)
		}
	} else {
		for i := t.closedTo + 1; i <= to; i++ {
			closeIdx(i)
		}
	}
	t.closedTo = to
	t.closed.add(rows...)
}

// row returns the bucket of (n, lun) at time ns: an open one, or, for a
// time already closed (a command that took longer than the open window),
// a fresh row appended to late. t.mu held.
func (t *trace) row(n Nexus, lun uint64, ns int64, late *[]TraceBucket) *TraceBucket {
	idx := ns / t.bucket
	if idx > t.closedTo {
		k := traceKey{n, lun, idx}
		b := t.cur[k]
		if b == nil {
			b = &TraceBucket{Nexus: n, LUN: lun, Start: idx * t.bucket}
			t.cur[k] = b
			t.byIdx[idx] = append(t.byIdx[idx], k)
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
		b = t.row(n, lun, d, &late)
		b.Done++
		if r.Status == StatusGood {
			b.Good++
			mark(&b.FirstGood, &b.LastGood, d)
		}
	}
	if check {
		b := t.row(n, lun, d, &late)
		b.Checks++
		key, asc, ascq := senseCodes(r.Sense)
		t.notes.add(TraceNote{Time: d, Nexus: n, LUN: lun, Check: true, Opcode: opcode, Key: key, ASC: asc, ASCQ: ascq})
	}
	t.closed.add(late...)
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
	t.notes.add(TraceNote{Time: now, Nexus: n, LUN: lun, TMF: fn})
}
