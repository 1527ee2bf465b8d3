package cluster

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/cluster/kv"
)

// members3 is a store of three members and a client's connections to
// each, in a synctest bubble.
func members3(t *testing.T) (*kv.Mem, []*kv.Link, []kv.Backend) {
	mem := kv.NewMem(clock.Real, 100*time.Millisecond)
	t.Cleanup(mem.Close)
	conns := []*kv.Link{kv.NewLink(mem, nil), kv.NewLink(mem, nil), kv.NewLink(mem, nil)}
	return mem, conns, []kv.Backend{conns[0], conns[1], conns[2]}
}

// slowReads sends n reads one after another, each with a 5 s deadline,
// and counts those that waited it out.
func slowReads(t *testing.T, b *Balanced, n int) (slow int) {
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := b.Get(ctx, kv.Range{Key: "k"})
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			slow++
			continue
		}
		require.NoError(t, err)
		require.Equal(t, "v", r.KVs[0].Value)
	}
	return slow
}

// Member 1 frozen (SIGSTOP: its connections stay open): with probes it is
// dropped within a probe's round and no call waits on it after that, and
// it is taken back once it answers; without them (etcd's client as it
// was) a third of the calls wait out their deadlines.
func TestBalancedAroundAFrozenMember(t *testing.T) {
	for _, tc := range []struct {
		name  string
		probe bool
		slow  int
	}{{"probes", true, 0}, {"no probes", false, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, conns, eps := members3(t)
				b := NewBalanced(eps, tc.probe)
				defer b.Close()
				_, err := b.Txn(context.Background(), kv.Txn{Then: []kv.Op{kv.Put("k", "v", 0)}})
				require.NoError(t, err)
				conns[1].Cut(true)
				time.Sleep(ProbeEvery + ProbeWait)
				synctest.Wait() // a probe ending at this very instant has been used
				require.Equal(t, tc.slow, slowReads(t, b, 9))
				if tc.probe {
					require.Equal(t, []string{"0", "2"}, b.Healthy(), "the frozen member dropped")
					conns[1].Heal()
					time.Sleep(ProbeEvery + ProbeWait)
					synctest.Wait()
					require.Len(t, b.Healthy(), 3, "and taken back once it answers")
				}
				conns[1].Heal()
			})
		})
	}
}

// A call already waiting on a member when it is dropped waits on, as
// gRPC drains a removed connection; a Store's Bounded context ends it at
// the drop.
func TestBalancedCallOnADroppedMember(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			_, conns, eps := members3(t)
			b := NewBalanced(eps, true)
			defer b.Close()
			s := NewStoreKV(b, "a", nil)
			conns[0].Cut(true) // the next call's member
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if bounded {
				cancel()
				ctx, cancel = s.Bounded(context.Background(), 5*time.Second)
			}
			defer cancel()
			t0 := time.Now()
			_, err := b.Get(ctx, kv.Range{Key: "k"})
			took := time.Since(t0)
			require.ErrorIs(t, err, kv.ErrUnreachable)
			if bounded {
				require.LessOrEqual(t, took, ProbeEvery+ProbeWait, "bounded: ended at the drop")
			} else {
				require.Equal(t, 5*time.Second, took, "unbounded: its own deadline")
			}
			conns[0].Heal()
		})
	}
}

// A client that connects while a member is frozen never sends it a call
// (its connection is never established) until the member answers.
func TestBalancedSkipsAMemberFrozenAtConnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, conns, eps := members3(t)
		_, err := mem.Txn(context.Background(), kv.Txn{Then: []kv.Op{kv.Put("k", "v", 0)}})
		require.NoError(t, err)
		conns[2].Cut(true)
		b := NewBalanced(eps, false)
		defer b.Close()
		require.Zero(t, slowReads(t, b, 6))
		conns[2].Heal()
		require.Zero(t, slowReads(t, b, 6))
		conns[2].Cut(true) // established now: a third of the calls wait there
		require.Equal(t, 2, slowReads(t, b, 6))
		conns[2].Heal()
	})
}
