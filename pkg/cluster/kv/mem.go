package kv

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/clock"
)

// Mem is an in-memory Backend with etcd's semantics, its leases on an
// injected clock:
//
//   - One revision for the store (1 when empty, as etcd's), raised once by every transaction that
//     changes a key (a put, or a delete that deletes something; a
//     transaction that changes nothing leaves it), and once by every
//     lease that ends with keys attached (its keys go in one revision,
//     in key order, as etcd's lessor deletes them).
//   - History is kept until Compact: a read at an older revision, and a
//     watch from one, see it; before the compacted revision a read fails
//     with ErrCompacted and a watch ends with CompactRev, as etcd's do.
//   - A lease expires when the clock reaches its grant or last renewal
//     plus its TTL (not before). Expiry is checked at every call and on
//     a ticker of the clock (so a watcher sees the deletes without
//     calls); Expire checks it at once.
//   - Transactions are atomic: compares on one key each, the branch's
//     operations in order (a get sees the puts before it), one
//     revision for all its writes; a put under a missing lease (in the
//     branch that runs), or two writes of one key (in either branch),
//     fails the whole transaction with nothing written.
//   - Watches get one response per revision, in revision order, the
//     events of a transaction in the order of its operations.
type Mem struct {
	clk clock.Clock

	mu        sync.Mutex
	rev       int64
	compacted int64
	keys      map[string]KV
	hist      map[string][]KV // every version, oldest first; a delete is a KV with CreateRev 0
	log       []Event         // every event since the compacted revision, in order (with Prev)
	leases    map[LeaseID]*memLease
	lastLease LeaseID
	watchers  map[*memWatcher]struct{}

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

type memLease struct {
	ttl    int64
	expiry time.Time
	keys   map[string]struct{}
}

// MinTTL is the shortest lease Mem grants, in seconds (a shorter one is
// granted this, as etcd raises a TTL under its minimum).
const MinTTL = 1

// NewMem is an empty store on clk whose leases are checked for expiry
// every expiryEvery of clk's time (0: every 100ms; negative: only at
// calls and Expire). Close stops the checks.
func NewMem(clk clock.Clock, expiryEvery time.Duration) *Mem {
	if clk == nil {
		clk = clock.Real
	}
	m := &Mem{clk: clk, rev: 1, keys: map[string]KV{}, hist: map[string][]KV{}, leases: map[LeaseID]*memLease{},
		watchers: map[*memWatcher]struct{}{}, stop: make(chan struct{})}
	if expiryEvery == 0 {
		expiryEvery = 100 * time.Millisecond
	}
	if expiryEvery > 0 {
		t := clk.NewTicker(expiryEvery)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer t.Stop()
			for {
				select {
				case <-m.stop:
					return
				case <-t.C():
					m.Expire()
				}
			}
		}()
	}
	return m
}

// Close stops the expiry checks.
func (m *Mem) Close() {
	m.stopOnce.Do(func() { close(m.stop) })
	m.wg.Wait()
}

// Rev is the current revision.
func (m *Mem) Rev() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev
}

// Expire ends every lease whose time is up now.
func (m *Mem) Expire() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
}

func (m *Mem) expireLocked() {
	now := m.clk.Now()
	var due []LeaseID
	for id, l := range m.leases {
		if !now.Before(l.expiry) {
			due = append(due, id)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		a, b := m.leases[due[i]], m.leases[due[j]]
		if !a.expiry.Equal(b.expiry) {
			return a.expiry.Before(b.expiry)
		}
		return due[i] < due[j]
	})
	for _, id := range due {
		m.revokeLocked(id)
	}
}

func (m *Mem) revokeLocked(id LeaseID) {
	l := m.leases[id]
	delete(m.leases, id)
	keys := make([]string, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	w := m.begin()
	for _, k := range keys {
		w.del(k)
	}
	w.end()
}

// Get implements Backend.
func (m *Mem) Get(ctx context.Context, r Range) (RangeResult, error) {
	if err := ctx.Err(); err != nil {
		return RangeResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	return m.rangeLocked(r)
}

func (m *Mem) rangeLocked(r Range) (RangeResult, error) {
	var kvs []KV
	match := func(k string) bool { return k == r.Key || (r.Prefix && strings.HasPrefix(k, r.Key)) }
	switch {
	case r.Rev > m.rev:
		return RangeResult{}, fmt.Errorf("%w (%d; the store is at %d)", ErrFutureRev, r.Rev, m.rev)
	case r.Rev > 0 && r.Rev < m.compacted:
		return RangeResult{}, fmt.Errorf("%w (%d; compacted at %d)", ErrCompacted, r.Rev, m.compacted)
	case r.Rev > 0 && r.Rev < m.rev:
		for k, h := range m.hist {
			if !match(k) {
				continue
			}
			i := sort.Search(len(h), func(i int) bool { return h[i].ModRev > r.Rev }) - 1
			if i >= 0 && h[i].CreateRev != 0 {
				kvs = append(kvs, h[i])
			}
		}
	default:
		if !r.Prefix {
			if kv, ok := m.keys[r.Key]; ok {
				kvs = append(kvs, kv)
			}
			break
		}
		for k, kv := range m.keys {
			if match(k) {
				kvs = append(kvs, kv)
			}
		}
	}
	count := int64(len(kvs))
	if r.MaxCreateRev > 0 {
		kept := kvs[:0]
		for _, kv := range kvs {
			if kv.CreateRev <= r.MaxCreateRev {
				kept = append(kept, kv)
			}
		}
		kvs = kept
	}
	// As etcd: in key order, then (for a create order) sorted as its
	// range does, so keys created in one revision come in etcd's order.
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].Key < kvs[j].Key })
	switch r.Sort {
	case FirstCreate:
		sort.Sort(byCreate(kvs))
		kvs = kvs[:min(len(kvs), 1)]
	case LastCreate:
		sort.Sort(sort.Reverse(byCreate(kvs)))
		kvs = kvs[:min(len(kvs), 1)]
	}
	if r.CountOnly {
		kvs = nil
	}
	return RangeResult{Rev: m.rev, KVs: kvs, Count: count}, nil
}

type byCreate []KV

func (s byCreate) Len() int           { return len(s) }
func (s byCreate) Less(i, j int) bool { return s[i].CreateRev-s[j].CreateRev < 0 }
func (s byCreate) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }

// Txn implements Backend.
func (m *Mem) Txn(ctx context.Context, t Txn) (TxnResult, error) {
	if err := ctx.Err(); err != nil {
		return TxnResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := checkDuplicates(t.Then); err != nil {
		return TxnResult{}, err
	}
	if err := checkDuplicates(t.Else); err != nil {
		return TxnResult{}, err
	}
	m.expireLocked()
	ok := true
	for _, c := range t.If {
		ok = ok && m.holds(c)
	}
	ops := t.Then
	if !ok {
		ops = t.Else
	}
	for _, op := range ops {
		if op.Kind == OpPut && op.Lease != NoLease && m.leases[op.Lease] == nil {
			return TxnResult{}, fmt.Errorf("%w (%x)", ErrLeaseNotFound, op.Lease)
		}
	}
	w := m.begin()
	res := TxnResult{Succeeded: ok, Results: make([]OpResult, len(ops))}
	for i, op := range ops {
		switch op.Kind {
		case OpGet:
			r, err := m.rangeLocked(op.Range)
			if err != nil { // a get at a bad revision: etcd fails the txn
				w.abort()
				return TxnResult{}, err
			}
			res.Results[i] = OpResult{KVs: r.KVs, Count: r.Count}
		case OpPut:
			w.put(op.Key, op.Value, op.Lease)
		case OpDelete:
			var keys []string
			for k := range m.keys {
				if k == op.Key || (op.Prefix && strings.HasPrefix(k, op.Key)) {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			for _, k := range keys {
				w.del(k)
			}
			res.Results[i] = OpResult{Deleted: int64(len(keys))}
		}
	}
	w.end()
	res.Rev = m.rev
	return res, nil
}

// checkDuplicates refuses, as etcd does, a branch (either, whichever
// runs) that writes one key twice.
func checkDuplicates(ops []Op) error {
	puts := map[string]bool{}
	var dels []Range
	for _, op := range ops {
		switch op.Kind {
		case OpPut:
			if puts[op.Key] {
				return fmt.Errorf("%w (%s)", ErrDuplicateKey, op.Key)
			}
			puts[op.Key] = true
		case OpDelete:
			dels = append(dels, op.Range)
		}
	}
	for _, d := range dels {
		for k := range puts {
			if k == d.Key || (d.Prefix && strings.HasPrefix(k, d.Key)) {
				return fmt.Errorf("%w (%s)", ErrDuplicateKey, k)
			}
		}
	}
	return nil
}

func (m *Mem) holds(c Cmp) bool {
	kv, ok := m.keys[c.Key]
	if c.Target == TargetValue {
		if !ok {
			return false // etcd: a missing key's value compares with nothing
		}
		return cmpOp(strings.Compare(kv.Value, c.Value), c.Op)
	}
	var n int64
	switch c.Target {
	case TargetCreateRev:
		n = kv.CreateRev
	case TargetModRev:
		n = kv.ModRev
	case TargetVersion:
		n = kv.Version
	case TargetLease:
		n = int64(kv.Lease)
	}
	switch {
	case n < c.Num:
		return cmpOp(-1, c.Op)
	case n > c.Num:
		return cmpOp(1, c.Op)
	}
	return cmpOp(0, c.Op)
}

func cmpOp(r int, op string) bool {
	switch op {
	case "=":
		return r == 0
	case "!=":
		return r != 0
	case "<":
		return r < 0
	case ">":
		return r > 0
	}
	return false
}

// memWrite is the changes of one revision.
type memWrite struct {
	m      *Mem
	rev    int64
	events []Event
}

func (m *Mem) begin() *memWrite { return &memWrite{m: m, rev: m.rev + 1} }

func (w *memWrite) put(key, value string, lease LeaseID) {
	m := w.m
	prev, had := m.keys[key]
	kv := KV{Key: key, Value: value, CreateRev: w.rev, ModRev: w.rev, Version: 1, Lease: lease}
	if had {
		kv.CreateRev, kv.Version = prev.CreateRev, prev.Version+1
		m.detach(prev)
	}
	if lease != NoLease {
		m.leases[lease].keys[key] = struct{}{}
	}
	m.keys[key] = kv
	m.hist[key] = append(m.hist[key], kv)
	ev := Event{Type: EventPut, KV: kv}
	if had {
		ev.Prev = &prev
	}
	w.events = append(w.events, ev)
}

func (w *memWrite) del(key string) {
	m := w.m
	prev, had := m.keys[key]
	if !had {
		return
	}
	m.detach(prev)
	delete(m.keys, key)
	gone := KV{Key: key, ModRev: w.rev}
	m.hist[key] = append(m.hist[key], gone)
	w.events = append(w.events, Event{Type: EventDelete, KV: gone, Prev: &prev})
}

func (m *Mem) detach(kv KV) {
	if l := m.leases[kv.Lease]; l != nil {
		delete(l.keys, kv.Key)
	}
}

// abort is only called before any write (a get comes first or fails
// alone), so nothing is to undo; it drops what was queued.
func (w *memWrite) abort() { w.events = nil }

// end commits the revision if anything changed, and tells the watchers.
func (w *memWrite) end() {
	if len(w.events) == 0 {
		return
	}
	m := w.m
	m.rev = w.rev
	m.log = append(m.log, w.events...)
	for wt := range m.watchers {
		wt.offer(w.events)
	}
}

// Grant implements Backend.
func (m *Mem) Grant(ctx context.Context, ttl int64) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	ttl = max(ttl, MinTTL)
	m.lastLease++
	id := m.lastLease
	m.leases[id] = &memLease{ttl: ttl, expiry: m.clk.Now().Add(time.Duration(ttl) * time.Second), keys: map[string]struct{}{}}
	return Lease{ID: id, TTL: ttl}, nil
}

// KeepAliveOnce implements Backend: the lease's time starts again from now.
func (m *Mem) KeepAliveOnce(ctx context.Context, id LeaseID) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	l := m.leases[id]
	if l == nil {
		return 0, fmt.Errorf("%w (%x)", ErrLeaseNotFound, id)
	}
	l.expiry = m.clk.Now().Add(time.Duration(l.ttl) * time.Second)
	return l.ttl, nil
}

// Revoke implements Backend.
func (m *Mem) Revoke(ctx context.Context, id LeaseID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	if m.leases[id] == nil {
		return fmt.Errorf("%w (%x)", ErrLeaseNotFound, id)
	}
	m.revokeLocked(id)
	return nil
}

// TimeToLive is the time the lease has left (false: it is gone).
func (m *Mem) TimeToLive(id LeaseID) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked()
	l := m.leases[id]
	if l == nil {
		return 0, false
	}
	return l.expiry.Sub(m.clk.Now()), true
}

// Compact implements Backend: reads before rev fail from now on, and
// watches from before it end with CompactRev.
func (m *Mem) Compact(ctx context.Context, rev int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case rev <= m.compacted:
		return fmt.Errorf("%w (%d; compacted at %d)", ErrCompacted, rev, m.compacted)
	case rev > m.rev:
		return fmt.Errorf("%w (%d; the store is at %d)", ErrFutureRev, rev, m.rev)
	}
	m.compacted = rev
	for k, h := range m.hist {
		// Keep the version current at rev and the later ones; a key
		// deleted by then keeps nothing before.
		i := sort.Search(len(h), func(i int) bool { return h[i].ModRev > rev }) - 1
		if i >= 0 && h[i].CreateRev == 0 {
			i++
		}
		if i > 0 {
			h = append([]KV(nil), h[i:]...)
		}
		if len(h) == 0 {
			delete(m.hist, k)
		} else {
			m.hist[k] = h
		}
	}
	i := sort.Search(len(m.log), func(i int) bool { return m.log[i].KV.ModRev >= rev })
	m.log = append([]Event(nil), m.log[i:]...)
	return nil
}
