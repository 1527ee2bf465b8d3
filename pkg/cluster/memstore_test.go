package cluster

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/cluster/kv"
)

// memWorld is controllers on one in-memory store, each through its own
// link, on a fake clock, in a synctest bubble: advance moves the clock
// and lets every goroutine the ticks started finish before going on.
type memWorld struct {
	t      *testing.T
	clk    *clock.Fake
	mem    *kv.Mem
	links  map[string]*kv.Link
	stores map[string]*Store
}

func newMemWorld(t *testing.T, nodes ...string) *memWorld {
	clk := clock.NewFake(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
	w := &memWorld{t: t, clk: clk, mem: kv.NewMem(clk, 100*time.Millisecond), links: map[string]*kv.Link{},
		stores: map[string]*Store{}}
	for _, n := range nodes {
		w.links[n] = kv.NewLink(w.mem, clk)
		w.stores[n] = NewStoreKV(w.links[n], "arr1", clk)
	}
	return w
}

func (w *memWorld) advance(d time.Duration) {
	for step := 50 * time.Millisecond; d > 0; d -= step {
		w.clk.Advance(min(step, d))
		synctest.Wait()
	}
}

func (w *memWorld) join(ctx context.Context, node string) *Membership {
	m, err := w.stores[node].Join(ctx, Info{Node: node}, time.Second)
	require.NoError(w.t, err)
	return m
}

func (w *memWorld) leaderKeys(ctx context.Context) []kv.KV {
	r, err := w.mem.Get(ctx, kv.Range{Key: "/aluad/arr1/leader/", Prefix: true})
	require.NoError(w.t, err)
	return r.KVs
}

// The election on the in-memory store: candidates queue by the revision
// of their key, a resign elects the next in that order (not any
// waiting one), and a leader cut off from the store loses its lease at
// the TTL, its term with it, and the next candidate is elected; healed,
// it learns its lease is gone.
func TestElectionOnMem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, "a", "b", "c")
		defer w.mem.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ms := map[string]*Membership{}
		for _, n := range []string{"a", "b", "c"} {
			ms[n] = w.join(ctx, n)
		}
		la, err := w.stores["a"].Campaign(ctx, ms["a"])
		require.NoError(t, err)
		elected := map[string]chan *Leadership{}
		for _, n := range []string{"b", "c"} {
			elected[n] = make(chan *Leadership, 1)
			go func() {
				l, err := w.stores[n].Campaign(ctx, ms[n])
				if err == nil {
					elected[n] <- l
				}
			}()
			synctest.Wait() // its key is written: b's before c's
		}
		keys := w.leaderKeys(ctx)
		require.Len(t, keys, 3)
		byNode := map[string]kv.KV{}
		for _, k := range keys {
			byNode[k.Value] = k
		}
		require.Less(t, byNode["a"].CreateRev, byNode["b"].CreateRev)
		require.Less(t, byNode["b"].CreateRev, byNode["c"].CreateRev)
		require.Equal(t, byNode["b"].Lease, ms["b"].Lease(), "the candidate's key is under its membership's lease")
		leader, err := w.stores["c"].Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "a", leader)
		require.Empty(t, elected["b"])
		require.Empty(t, elected["c"])

		require.NoError(t, la.Resign(ctx))
		synctest.Wait()
		require.False(t, la.Leads())
		require.Empty(t, elected["c"], "c waits for b")
		lb := <-elected["b"]
		require.True(t, lb.Leads())
		leader, err = w.stores["a"].Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "b", leader)

		// b cut off: its renewals fail; at the TTL its lease, key and
		// term go, and c is elected.
		w.links["b"].Cut(false)
		w.advance(1500 * time.Millisecond) // the TTL, and the session's check after it
		<-lb.Done()
		require.False(t, lb.Leads())
		require.False(t, ms["b"].Valid())
		lc := <-elected["c"]
		require.True(t, lc.Leads())
		leader, err = w.stores["a"].Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "c", leader)
		require.Len(t, w.leaderKeys(ctx), 1)

		w.links["b"].Heal()
		w.advance(500 * time.Millisecond)
		<-ms["b"].Lost()

		require.NoError(t, lc.Resign(ctx))
		for _, n := range []string{"a", "c"} {
			require.NoError(t, ms[n].Leave(ctx))
		}
		require.NoError(t, lb.Resign(ctx))
		ms["b"].halt()
		synctest.Wait()
	})
}

// A member cut off from the in-memory store: its calls fail, the others
// see it leave once its lease runs out on the clock (not before), and
// its own deadline passed first; healed, it learns the lease is gone,
// and joins again only once its incarnation is fenced.
func TestPartitionOnMem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, "a", "b")
		defer w.mem.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sa, sb := w.stores["a"], w.stores["b"]
		require.NoError(t, sa.Init(ctx, []Record{{LUN: 0, Owner: "a", Fresh: true}}))
		a := w.join(ctx, "a")
		b := w.join(ctx, "b")
		_, rev, err := sb.Members(ctx)
		require.NoError(t, err)
		events := sb.WatchMembers(ctx, rev)
		w.advance(2 * time.Second)
		require.True(t, a.Valid(), "renewed")

		w.links["a"].Cut(false)
		_, _, err = sa.Owners(ctx)
		require.ErrorIs(t, err, kv.ErrUnreachable)
		o, err := sb.Owner(ctx, 0)
		require.NoError(t, err)
		_, err = sa.Change(ctx, o, Record{LUN: 0, Owner: "a"}, sa.MemberAlive(a))
		require.ErrorIs(t, err, kv.ErrUnreachable)
		deadline := a.ValidUntil()
		w.advance(deadline.Sub(w.clk.Now()) - 50*time.Millisecond)
		require.True(t, a.Valid())
		require.Empty(t, events, "a is a member until its lease runs out")
		w.advance(time.Second)
		require.False(t, a.Valid())
		ev := <-events
		require.Equal(t, "a", ev.Node)
		require.False(t, ev.Up)
		require.NoError(t, ev.Err)
		_, err = sb.Change(ctx, o, Record{LUN: 0, Owner: "b"}, sb.MemberGone("a"))
		require.NoError(t, err, "the takeover once a is gone")

		w.links["a"].Heal()
		w.advance(500 * time.Millisecond)
		<-a.Lost()
		_, err = sa.Join(ctx, Info{Node: "a"}, time.Second)
		require.ErrorIs(t, err, ErrUnfenced)
		inc, ok, member, err := sb.Incarnation(ctx, "a")
		require.NoError(t, err)
		require.True(t, ok && !member)
		require.NoError(t, sb.MarkFenced(ctx, inc))
		a2 := w.join(ctx, "a")
		require.NoError(t, a2.Leave(ctx))
		require.NoError(t, b.Leave(ctx))
		a.halt()
		cancel()
		synctest.Wait()
	})
}

// A term whose resign is still on its way (its watch retrying after a
// lost quorum, or one a frozen member applies when it thaws) must not
// delete the next term's key: the next campaign makes its key afresh
// instead of taking the earlier one over, so that resign changes
// nothing, and no other candidate is elected while a leads.
func TestNoTermReusesAnEarlierKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newMemWorld(t, "a", "b")
		defer w.mem.Close()
		ctx := ctxT(t)
		a := w.join(ctx, "a")
		b := w.join(ctx, "b")
		l1, err := w.stores["a"].Campaign(ctx, a)
		require.NoError(t, err)
		// The first term ends with its key left behind (its resign did
		// not go through), and a campaigns again.
		l1.end()
		l2, err := w.stores["a"].Campaign(ctx, a)
		require.NoError(t, err)
		require.Equal(t, l1.key, l2.key)
		require.Greater(t, l2.rev, l1.rev, "a new key, not the earlier one taken over")
		// The first term's resign lands now.
		require.NoError(t, l1.resign(ctx))
		require.Len(t, w.leaderKeys(ctx), 1, "the second term's key stays")
		bctx, cancel := context.WithCancel(ctx)
		elected := make(chan error, 1)
		go func() {
			_, err := w.stores["b"].Campaign(bctx, b)
			elected <- err
		}()
		w.advance(2 * time.Second)
		select {
		case err := <-elected:
			t.Fatalf("b's campaign ended while a leads: %v", err)
		default:
		}
		require.True(t, l2.Leads())
		cancel()
		<-elected
		l1.sess.Orphan()
		require.NoError(t, l2.Resign(ctx))
		a.Abandon()
		b.Abandon()
	})
}
