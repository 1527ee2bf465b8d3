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

// Three members' connections to one store, member 1 frozen: with probes
// every call answers after the drop (a repeatable one waiting on the
// frozen member goes to the next; a transaction fails with
// ErrUnreachable, as etcd's client does not send one twice); without
// them (etcd's client as it was) a third of the calls wait out their
// deadlines.
func TestBalancedAroundAFrozenMember(t *testing.T) {
	for _, tc := range []struct {
		name  string
		probe bool
	}{{"probes", true}, {"no probes", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				mem := kv.NewMem(clock.Real, 100*time.Millisecond)
				defer mem.Close()
				conns := []*kv.Link{kv.NewLink(mem, nil), kv.NewLink(mem, nil), kv.NewLink(mem, nil)}
				b := NewBalanced([]kv.Backend{conns[0], conns[1], conns[2]}, nil, tc.probe)
				defer b.Close()
				_, err := b.Txn(context.Background(), kv.Txn{Then: []kv.Op{kv.Put("k", "v", 0)}})
				require.NoError(t, err)

				conns[1].Cut(true) // SIGSTOP of member 1
				slow, failed := 0, 0
				for range 9 {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					t0 := time.Now()
					r, err := b.Get(ctx, kv.Range{Key: "k"})
					cancel()
					if time.Since(t0) >= 5*time.Second {
						slow++
					}
					if err != nil {
						failed++
						continue
					}
					require.Equal(t, "v", r.KVs[0].Value)
				}
				// A transaction on its way to the frozen member when it is
				// dropped.
				time.Sleep(2 * time.Second)
				if tc.probe {
					require.Zero(t, slow, "no read waits out its deadline")
					require.Zero(t, failed)
					require.Equal(t, []string{"0", "2"}, b.Healthy(), "the frozen member dropped")
					conns[1].Heal()
					time.Sleep(time.Second)
					require.Len(t, b.Healthy(), 3, "and taken back once it answers")
					return
				}
				require.Equal(t, 3, slow, "a third of the reads wait out their deadlines")
				require.Equal(t, 3, failed)
				conns[1].Heal()
			})
		})
	}
}

// A transaction waiting on a member when the probes drop it fails at
// once (ErrUnreachable), not at its deadline, and is not sent again.
func TestBalancedTxnOnADroppedMember(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := kv.NewMem(clock.Real, 100*time.Millisecond)
		defer mem.Close()
		conns := []*kv.Link{kv.NewLink(mem, nil), kv.NewLink(mem, nil), kv.NewLink(mem, nil)}
		b := NewBalanced([]kv.Backend{conns[0], conns[1], conns[2]}, nil, true)
		defer b.Close()
		time.Sleep(100 * time.Millisecond)
		conns[0].Cut(true) // the next call's member
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t0 := time.Now()
		_, err := b.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("k", "v", 0)}})
		took := time.Since(t0)
		require.True(t, errors.Is(err, kv.ErrUnreachable), "%v", err)
		require.Less(t, took, ProbeEvery+ProbeWait+time.Millisecond, "ended by the drop")
		r, err := mem.Get(context.Background(), kv.Range{Key: "k"})
		require.NoError(t, err)
		require.Empty(t, r.KVs, "not sent to another member")
		conns[0].Heal()
	})
}
