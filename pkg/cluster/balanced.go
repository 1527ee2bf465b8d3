package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/cluster/kv"
)

// Balanced is a kv.Backend over one connection per etcd member, as
// etcd's client is over its endpoints: each call goes to the next member
// in turn among those that answer (members' probes, as Client's). A
// call waiting on a member that is dropped fails with ErrUnreachable, as
// gRPC fails the calls of a connection it closes, and a repeatable one (a
// read, a lease's grant, renewal or revoke, a compaction; not a
// transaction) goes to the next member, as etcd's client retries them.
// It is the simulation's client: each connection a kv.Link to kv.Mem,
// which a frozen member's cut blocks. Made without probes, it is etcd's
// client as it was before Client: round robin over every member,
// answering or not.
type Balanced struct {
	eps []kv.Backend
	clk clock.Clock
	*members
	next atomic.Uint64
}

// NewBalanced balances over eps (one connection per member), probing
// them if probe; Close stops the probes.
func NewBalanced(eps []kv.Backend, clk clock.Clock, probe bool) *Balanced {
	if clk == nil {
		clk = clock.Real
	}
	names := make([]string, len(eps))
	for i := range eps {
		names[i] = strconv.Itoa(i)
	}
	b := &Balanced{eps: eps, clk: clk, members: newMembers(names, func([]string) {})}
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

// pick is the next member calls go to, and the channel that a drop of a
// member closes from now.
func (b *Balanced) pick() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.healthy[int((b.next.Add(1)-1)%uint64(len(b.healthy)))], b.dropped
}

func (b *Balanced) answering(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.healthy, name)
}

// balancedCall runs f on the next member, until it answers, the
// member is dropped (then ErrUnreachable, or for a repeatable call the
// next member), or ctx ends.
func balancedCall[T any](b *Balanced, ctx context.Context, repeatable bool, f func(context.Context, kv.Backend) (T, error)) (T, error) {
	for {
		name, dropped := b.pick()
		i, _ := strconv.Atoi(name)
		cctx, cancel := context.WithCancel(ctx)
		var lost atomic.Bool
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-dropped:
					if !b.answering(name) {
						lost.Store(true)
						cancel()
						return
					}
					dropped = b.Dropped()
				case <-done:
					return
				}
			}
		}()
		v, err := f(cctx, b.eps[i])
		close(done)
		cancel()
		if err == nil || !lost.Load() || ctx.Err() != nil {
			return v, err
		}
		if !repeatable {
			return v, fmt.Errorf("%w: member %s was dropped while the call waited on it", kv.ErrUnreachable, name)
		}
	}
}

// Get implements kv.Backend.
func (b *Balanced) Get(ctx context.Context, r kv.Range) (kv.RangeResult, error) {
	return balancedCall(b, ctx, true, func(ctx context.Context, e kv.Backend) (kv.RangeResult, error) { return e.Get(ctx, r) })
}

// Txn implements kv.Backend.
func (b *Balanced) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	return balancedCall(b, ctx, false, func(ctx context.Context, e kv.Backend) (kv.TxnResult, error) { return e.Txn(ctx, t) })
}

// Grant implements kv.Backend.
func (b *Balanced) Grant(ctx context.Context, ttl int64) (kv.Lease, error) {
	return balancedCall(b, ctx, true, func(ctx context.Context, e kv.Backend) (kv.Lease, error) { return e.Grant(ctx, ttl) })
}

// KeepAliveOnce implements kv.Backend.
func (b *Balanced) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (int64, error) {
	return balancedCall(b, ctx, true, func(ctx context.Context, e kv.Backend) (int64, error) { return e.KeepAliveOnce(ctx, id) })
}

// KeepAlive implements kv.Backend: kv.KeepAliveLoop over the members.
func (b *Balanced) KeepAlive(ctx context.Context, id kv.LeaseID) (<-chan struct{}, error) {
	return kv.KeepAliveLoop(ctx, b, b.clk, id), nil
}

// Revoke implements kv.Backend.
func (b *Balanced) Revoke(ctx context.Context, id kv.LeaseID) error {
	_, err := balancedCall(b, ctx, true, func(ctx context.Context, e kv.Backend) (struct{}, error) { return struct{}{}, e.Revoke(ctx, id) })
	return err
}

// Compact implements kv.Backend.
func (b *Balanced) Compact(ctx context.Context, rev int64) error {
	_, err := balancedCall(b, ctx, true, func(ctx context.Context, e kv.Backend) (struct{}, error) { return struct{}{}, e.Compact(ctx, rev) })
	return err
}

// Watch implements kv.Backend: on the next member (a Store ends its
// watches when a member is dropped, and watches again).
func (b *Balanced) Watch(ctx context.Context, w kv.WatchRequest) <-chan kv.WatchResponse {
	name, _ := b.pick()
	i, _ := strconv.Atoi(name)
	return b.eps[i].Watch(ctx, w)
}
