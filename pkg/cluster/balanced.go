package cluster

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/aluad/aluad/pkg/cluster/kv"
)

// Balanced is a kv.Backend over one connection per etcd member, as
// etcd's client is over its endpoints (gRPC's round robin): each call
// goes to the next member in turn among those that answer (members'
// probes, as Client's) and whose connection was ever established. A
// call already waiting on a member that is then dropped waits on, to its
// own deadline, as gRPC drains a connection that SetEndpoints removes;
// a Store's Bounded context is what ends such a call at the drop. A
// connection made while its member is frozen is never established (no
// server preface), so calls skip it until the member answers. It is the
// simulation's client: each connection a kv.Link to kv.Mem, which a
// frozen member's cut blocks. Made without probes, it is etcd's client
// as it was before Client: round robin over every established
// connection, answering or not.
type Balanced struct {
	eps   []kv.Backend
	ready []atomic.Bool // the connection was established
	*members
	next atomic.Uint64
}

// NewBalanced balances over eps (one connection per member), probing
// them if probe; Close stops the probes.
func NewBalanced(eps []kv.Backend, probe bool) *Balanced {
	names := make([]string, len(eps))
	for i := range eps {
		names[i] = strconv.Itoa(i)
	}
	b := &Balanced{eps: eps, ready: make([]atomic.Bool, len(eps)), members: newMembers(names, func([]string) {})}
	for i := range eps {
		b.established(i) // connect to each member
	}
	if probe && len(eps) > 1 {
		b.start(func(ctx context.Context, i int) error {
			_, err := eps[i].Get(ctx, kv.Range{Key: "health"})
			return err
		})
	}
	return b
}

// Close stops the probes.
func (b *Balanced) Close() { b.members.close() }

// established says whether the connection to member i is up: once its
// member answered (a kv.Link not cut), for good.
func (b *Balanced) established(i int) bool {
	if b.ready[i].Load() {
		return true
	}
	if c, ok := b.eps[i].(interface{ IsCut() bool }); ok && c.IsCut() {
		return false
	}
	b.ready[i].Store(true)
	return true
}

// pick is the member the next call goes to: the next answering one whose
// connection is established (any answering one, if none is).
func (b *Balanced) pick() kv.Backend {
	b.mu.Lock()
	up := b.healthy
	b.mu.Unlock()
	n := b.next.Add(1) - 1
	for k := range up {
		i, _ := strconv.Atoi(up[int((n+uint64(k))%uint64(len(up)))])
		if b.established(i) {
			if k > 0 {
				b.next.Add(uint64(k))
			}
			return b.eps[i]
		}
	}
	i, _ := strconv.Atoi(up[int(n%uint64(len(up)))])
	return b.eps[i]
}

// Get implements kv.Backend.
func (b *Balanced) Get(ctx context.Context, r kv.Range) (kv.RangeResult, error) {
	return b.pick().Get(ctx, r)
}

// Txn implements kv.Backend.
func (b *Balanced) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	return b.pick().Txn(ctx, t)
}

// Grant implements kv.Backend.
func (b *Balanced) Grant(ctx context.Context, ttl int64) (kv.Lease, error) {
	return b.pick().Grant(ctx, ttl)
}

// KeepAliveOnce implements kv.Backend.
func (b *Balanced) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (int64, error) {
	return b.pick().KeepAliveOnce(ctx, id)
}

// Revoke implements kv.Backend.
func (b *Balanced) Revoke(ctx context.Context, id kv.LeaseID) error {
	return b.pick().Revoke(ctx, id)
}

// Compact implements kv.Backend.
func (b *Balanced) Compact(ctx context.Context, rev int64) error {
	return b.pick().Compact(ctx, rev)
}

// Watch implements kv.Backend: on the next member (a Store ends its
// watches when a member is dropped, and watches again).
func (b *Balanced) Watch(ctx context.Context, w kv.WatchRequest) <-chan kv.WatchResponse {
	return b.pick().Watch(ctx, w)
}
