// Package kv owns the narrow key-value interface cluster mode's store
// runs on (Backend), with the project's own small types, and an
// in-memory implementation of it (Mem) that keeps etcd's semantics: one
// global revision, per-key create and mod revisions, versions and
// leases, atomic transactions, ordered watches, leases expiring on an
// injected clock. Mem is for a deterministic simulation of cluster mode
// without a real etcd; Link wraps any Backend to partition one client
// from it (CONVENTIONS: faults are injected by wrapping interfaces).
//
// The etcd implementation over a real client lives in pkg/cluster, so
// that this package imports no etcd and no gRPC: a simulation takes it
// alone. It imports pkg/clock only.
//
// What Mem does not model: several etcd members (quorum loss, a leader
// change that extends every lease, a frozen member), a request applied
// whose answer was lost, compares over a key range, the minimum lease
// TTL etcd derives from its election timeout (Mem's is 1s), and
// automatic compaction (history is kept until Compact is called).
package kv

import (
	"context"
	"errors"
)

// LeaseID names a lease (0: none).
type LeaseID int64

// NoLease is a key under no lease.
const NoLease LeaseID = 0

// KV is a key as stored: its value and its metadata.
type KV struct {
	Key   string
	Value string
	// CreateRev is the revision that created the key (since its last
	// delete), ModRev the one that last wrote it; Version counts its
	// writes since its creation (1 on creation).
	CreateRev, ModRev, Version int64
	Lease                      LeaseID
}

// Target is what a Cmp compares.
type Target int

// The targets of a compare.
const (
	TargetValue Target = iota
	TargetCreateRev
	TargetModRev
	TargetVersion
	TargetLease
)

// Cmp compares one key's target with a value. A missing key compares as
// a KV of zeroes, except that a compare of its value always fails (as in
// etcd).
type Cmp struct {
	Key    string
	Target Target
	// Op is "=", "!=", "<" or ">".
	Op string
	// Value is compared with TargetValue, Num with the others.
	Value string
	Num   int64
}

// CreateRev compares key's create revision (0: the key does not exist).
func CreateRev(key, op string, rev int64) Cmp {
	return Cmp{Key: key, Target: TargetCreateRev, Op: op, Num: rev}
}

// ModRev compares key's mod revision.
func ModRev(key, op string, rev int64) Cmp {
	return Cmp{Key: key, Target: TargetModRev, Op: op, Num: rev}
}

// Version compares key's version.
func Version(key, op string, v int64) Cmp {
	return Cmp{Key: key, Target: TargetVersion, Op: op, Num: v}
}

// LeaseIs compares key's lease.
func LeaseIs(key, op string, id LeaseID) Cmp {
	return Cmp{Key: key, Target: TargetLease, Op: op, Num: int64(id)}
}

// ValueIs compares key's value.
func ValueIs(key, op, v string) Cmp { return Cmp{Key: key, Target: TargetValue, Op: op, Value: v} }

// Sort is the order of a range's keys.
type Sort int

// The orders: by key (the default), or the one key first or last
// created (etcd's WithFirstCreate and WithLastCreate: a limit of 1).
const (
	ByKey Sort = iota
	FirstCreate
	LastCreate
)

// Range reads a key, or every key under a prefix.
type Range struct {
	Key    string
	Prefix bool
	// Rev reads at that revision (0: the current one).
	Rev int64
	// CountOnly returns the count and no key.
	CountOnly bool
	Sort      Sort
	// MaxCreateRev leaves out keys created after it (0: none).
	MaxCreateRev int64
}

// RangeResult is what a Range read: its keys and how many the range
// holds, and the store's revision at the read (Rev).
type RangeResult struct {
	Rev   int64
	KVs   []KV
	Count int64
}

// OpKind is what an Op does.
type OpKind int

// The operations of a transaction.
const (
	OpGet OpKind = iota
	OpPut
	OpDelete
)

// Op is one operation of a transaction.
type Op struct {
	Kind OpKind
	// Range is what a get reads; Key and Prefix also name what a delete
	// deletes and a put writes.
	Range
	Value string
	Lease LeaseID
}

// Get reads key.
func Get(key string) Op { return Op{Kind: OpGet, Range: Range{Key: key}} }

// GetRange reads r.
func GetRange(r Range) Op { return Op{Kind: OpGet, Range: r} }

// Put writes key under lease (NoLease: none).
func Put(key, value string, lease LeaseID) Op {
	return Op{Kind: OpPut, Range: Range{Key: key}, Value: value, Lease: lease}
}

// Delete deletes key.
func Delete(key string) Op { return Op{Kind: OpDelete, Range: Range{Key: key}} }

// DeletePrefix deletes every key under prefix.
func DeletePrefix(prefix string) Op {
	return Op{Kind: OpDelete, Range: Range{Key: prefix, Prefix: true}}
}

// Txn runs Then if every compare of If holds, else Else, atomically.
type Txn struct {
	If   []Cmp
	Then []Op
	Else []Op
}

// OpResult is one operation's outcome: a get's keys and count, a
// delete's count (Deleted).
type OpResult struct {
	KVs     []KV
	Count   int64
	Deleted int64
}

// TxnResult is a transaction's outcome: which branch ran, each of its
// operations' results, and the revision after it (the one it wrote, if
// it wrote).
type TxnResult struct {
	Rev       int64
	Succeeded bool
	Results   []OpResult
}

// EventType is a put or a delete.
type EventType int

// The event types.
const (
	EventPut EventType = iota
	EventDelete
)

// Event is one key written or deleted. A delete's KV has the key and the
// delete's revision (ModRev) only. Prev is the key before, when the
// watch asked for it and the key existed.
type Event struct {
	Type EventType
	KV   KV
	Prev *KV
}

// WatchRequest watches a key or a prefix from a revision.
type WatchRequest struct {
	Key    string
	Prefix bool
	// FromRev is the first revision sent (0: from the next one).
	FromRev int64
	// PrevKV fills each event's Prev.
	PrevKV bool
	// RequireLeader ends the watch when the etcd member it runs on has
	// no leader (etcd's WithRequireLeader; Mem always has one).
	RequireLeader bool
}

// WatchResponse is a batch of events in revision order, or the end of
// the watch: CompactRev (the watch started before the compacted
// revision), Err, or Canceled. The channel closes after an end, and when
// the watch's context ends.
type WatchResponse struct {
	Events     []Event
	CompactRev int64
	Canceled   bool
	Err        error
}

// Lease is a granted lease.
type Lease struct {
	ID LeaseID
	// TTL is in seconds, as granted.
	TTL int64
}

// Backend is what the store needs of etcd.
type Backend interface {
	Get(ctx context.Context, r Range) (RangeResult, error)
	Txn(ctx context.Context, t Txn) (TxnResult, error)
	// Grant makes a lease of ttl seconds.
	Grant(ctx context.Context, ttl int64) (Lease, error)
	// KeepAliveOnce renews the lease and returns its TTL (ErrLeaseNotFound:
	// it expired or was revoked).
	KeepAliveOnce(ctx context.Context, id LeaseID) (int64, error)
	// Revoke ends the lease and deletes its keys.
	Revoke(ctx context.Context, id LeaseID) error
	Watch(ctx context.Context, w WatchRequest) <-chan WatchResponse
	// Compact drops the history before rev.
	Compact(ctx context.Context, rev int64) error
}

// Errors with etcd's meaning; the etcd backend wraps etcd's own in them.
var (
	ErrLeaseNotFound = errors.New("kv: requested lease not found")
	ErrCompacted     = errors.New("kv: required revision has been compacted")
	ErrFutureRev     = errors.New("kv: required revision is a future revision")
	ErrDuplicateKey  = errors.New("kv: duplicate key given in txn request")
	// ErrUnreachable is a call from a client cut off from the store
	// (Link).
	ErrUnreachable = errors.New("kv: the store is unreachable from this client")
)
