package kv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/clock"
)

var t0 = time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)

// newMem is a store on a fake clock whose expiry is checked only at
// calls (no ticker: the test moves time and reads).
func newMem(t *testing.T) (*Mem, *clock.Fake) {
	clk := clock.NewFake(t0)
	m := NewMem(clk, -1)
	t.Cleanup(m.Close)
	return m, clk
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func put(t *testing.T, m Backend, key, val string, lease LeaseID) int64 {
	t.Helper()
	r, err := m.Txn(ctxT(t), Txn{Then: []Op{Put(key, val, lease)}})
	require.NoError(t, err)
	return r.Rev
}

func get(t *testing.T, m Backend, key string) (KV, bool) {
	t.Helper()
	r, err := m.Get(ctxT(t), Range{Key: key})
	require.NoError(t, err)
	if len(r.KVs) == 0 {
		return KV{}, false
	}
	return r.KVs[0], true
}

// A lease's keys go when the clock reaches its grant (or last renewal)
// plus its TTL, not a moment before, all in one revision; a renewal
// starts the TTL again; a revoked or expired lease is not found.
func TestLeaseExpiry(t *testing.T) {
	m, clk := newMem(t)
	ctx := ctxT(t)
	l, err := m.Grant(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, int64(2), l.TTL)
	put(t, m, "a", "1", l.ID)
	rev := put(t, m, "b", "1", l.ID)
	put(t, m, "c", "1", NoLease)

	clk.Advance(1500 * time.Millisecond)
	ttl, err := m.KeepAliveOnce(ctx, l.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), ttl)
	clk.Advance(2*time.Second - time.Millisecond)
	_, ok := get(t, m, "a")
	require.True(t, ok, "1ms before the renewal's TTL is up")
	require.Equal(t, rev+1, m.Rev())
	clk.Advance(time.Millisecond)
	_, ok = get(t, m, "a")
	require.False(t, ok, "at the TTL")
	_, ok = get(t, m, "b")
	require.False(t, ok)
	_, ok = get(t, m, "c")
	require.True(t, ok, "a key under no lease stays")
	require.Equal(t, rev+2, m.Rev(), "both keys in one revision")
	_, err = m.KeepAliveOnce(ctx, l.ID)
	require.ErrorIs(t, err, ErrLeaseNotFound)
	_, err = m.Txn(ctx, Txn{Then: []Op{Put("d", "1", l.ID)}})
	require.ErrorIs(t, err, ErrLeaseNotFound, "a put under an expired lease")

	// Revoke: at once; a lease with no keys changes no revision.
	l2, err := m.Grant(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(MinTTL), l2.TTL, "raised to the minimum")
	before := m.Rev()
	require.NoError(t, m.Revoke(ctx, l2.ID))
	require.Equal(t, before, m.Rev())
	require.ErrorIs(t, m.Revoke(ctx, l2.ID), ErrLeaseNotFound)

	// A key put again under no lease leaves its lease.
	l3, err := m.Grant(ctx, 1)
	require.NoError(t, err)
	put(t, m, "e", "1", l3.ID)
	put(t, m, "e", "2", NoLease)
	clk.Advance(time.Second)
	kv, ok := get(t, m, "e")
	require.True(t, ok)
	require.Equal(t, NoLease, kv.Lease)
}

// The expiry ticker deletes a lease's keys without any call, so a
// watcher sees them go.
func TestLeaseExpiryTicker(t *testing.T) {
	clk := clock.NewFake(t0)
	m := NewMem(clk, 100*time.Millisecond)
	defer m.Close()
	ctx := ctxT(t)
	l, err := m.Grant(ctx, 1)
	require.NoError(t, err)
	rev := put(t, m, "k", "v", l.ID)
	w := m.Watch(ctx, WatchRequest{Key: "k", FromRev: rev + 1})
	clk.Advance(time.Second)
	select {
	case wr := <-w:
		require.Len(t, wr.Events, 1)
		require.Equal(t, EventDelete, wr.Events[0].Type)
		require.Equal(t, KV{Key: "k", ModRev: rev + 1}, wr.Events[0].KV)
	case <-ctx.Done():
		t.Fatal("the expiry was not seen")
	}
}

// Transactions: compares on each target, on a missing key as etcd's;
// one revision for all the writes; nothing written when one fails; a get
// sees the puts before it; versions count the writes since creation.
func TestTxn(t *testing.T) {
	m, _ := newMem(t)
	ctx := ctxT(t)
	l, err := m.Grant(ctx, 10)
	require.NoError(t, err)
	r1 := put(t, m, "k", "v1", NoLease)
	r2 := put(t, m, "k", "v2", l.ID)
	for _, tt := range []struct {
		name string
		cmp  Cmp
		want bool
	}{
		{"value =", ValueIs("k", "=", "v2"), true},
		{"value >", ValueIs("k", ">", "v1"), true},
		{"value of a missing key (never holds)", ValueIs("nope", "!=", "x"), false},
		{"create rev", CreateRev("k", "=", r1), true},
		{"create rev of a missing key is 0", CreateRev("nope", "=", 0), true},
		{"mod rev", ModRev("k", "=", r2), true},
		{"mod rev <", ModRev("k", "<", r2), false},
		{"version", Version("k", "=", 2), true},
		{"version of a missing key is 0", Version("nope", "=", 0), true},
		{"lease", LeaseIs("k", "=", l.ID), true},
		{"lease !=", LeaseIs("k", "!=", l.ID), false},
		{"lease of a missing key is none", LeaseIs("nope", "=", NoLease), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := m.Txn(ctx, Txn{If: []Cmp{tt.cmp}, Then: []Op{Get("k")}, Else: []Op{Get("k"), Get("k")}})
			require.NoError(t, err)
			require.Equal(t, tt.want, r.Succeeded)
			require.Len(t, r.Results, map[bool]int{true: 1, false: 2}[tt.want])
			require.Equal(t, r2, r.Rev, "a read changes no revision")
		})
	}

	// Two puts and a delete: one revision; the get in between sees the put.
	r, err := m.Txn(ctx, Txn{Then: []Op{Put("a", "1", NoLease), Get("a"), Put("b", "1", NoLease), Delete("k")}})
	require.NoError(t, err)
	require.Equal(t, r2+1, r.Rev)
	require.Equal(t, []KV{{Key: "a", Value: "1", CreateRev: r2 + 1, ModRev: r2 + 1, Version: 1}}, r.Results[1].KVs)
	require.Equal(t, int64(1), r.Results[3].Deleted)
	_, ok := get(t, m, "k")
	require.False(t, ok)

	// Refused as a whole: nothing written, no revision.
	for _, ops := range [][]Op{
		{Put("c", "1", NoLease), Put("d", "1", LeaseID(999))},
		{Put("c", "1", NoLease), Put("c", "2", NoLease)},
		{Put("c", "1", NoLease), DeletePrefix("")},
	} {
		_, err := m.Txn(ctx, Txn{Then: ops})
		require.Error(t, err)
		require.True(t, errors.Is(err, ErrLeaseNotFound) || errors.Is(err, ErrDuplicateKey), "%v", err)
		_, ok := get(t, m, "c")
		require.False(t, ok)
		require.Equal(t, r2+1, m.Rev())
	}
	// A delete of nothing changes nothing.
	r, err = m.Txn(ctx, Txn{Then: []Op{Delete("nope")}})
	require.NoError(t, err)
	require.Equal(t, r2+1, r.Rev)

	// Created again: a new create revision, version 1.
	r3 := put(t, m, "k", "v3", NoLease)
	kv, _ := get(t, m, "k")
	require.Equal(t, KV{Key: "k", Value: "v3", CreateRev: r3, ModRev: r3, Version: 1}, kv)
}

// Reads at a revision see the store as it was; before the compacted
// revision they fail, after the current one too; the create-order reads
// the election uses.
func TestGetAtRevision(t *testing.T) {
	m, _ := newMem(t)
	ctx := ctxT(t)
	r1 := put(t, m, "p/a", "1", NoLease)
	r2 := put(t, m, "p/b", "1", NoLease)
	r3 := put(t, m, "p/a", "2", NoLease)
	_, err := m.Txn(ctx, Txn{Then: []Op{Delete("p/b")}})
	require.NoError(t, err)
	put(t, m, "q", "1", NoLease)
	for _, tt := range []struct {
		rev  int64
		want []string
	}{
		{r1, []string{"p/a=1"}},
		{r2, []string{"p/a=1", "p/b=1"}},
		{r3, []string{"p/a=2", "p/b=1"}},
		{r3 + 1, []string{"p/a=2"}},
		{0, []string{"p/a=2"}},
	} {
		r, err := m.Get(ctx, Range{Key: "p/", Prefix: true, Rev: tt.rev})
		require.NoError(t, err)
		var got []string
		for _, kv := range r.KVs {
			got = append(got, kv.Key+"="+kv.Value)
		}
		require.Equal(t, tt.want, got, "at %d", tt.rev)
		require.Equal(t, m.Rev(), r.Rev)
	}
	_, err = m.Get(ctx, Range{Key: "p/", Rev: m.Rev() + 1})
	require.ErrorIs(t, err, ErrFutureRev)

	first, err := m.Get(ctx, Range{Key: "p/", Prefix: true, Rev: r2, Sort: FirstCreate})
	require.NoError(t, err)
	require.Equal(t, "p/a", first.KVs[0].Key)
	require.Equal(t, int64(2), first.Count, "the count is of the whole range")
	last, err := m.Get(ctx, Range{Key: "p/", Prefix: true, Rev: r2, Sort: LastCreate})
	require.NoError(t, err)
	require.Equal(t, "p/b", last.KVs[0].Key)
	below, err := m.Get(ctx, Range{Key: "p/", Prefix: true, Rev: r2, Sort: LastCreate, MaxCreateRev: r2 - 1})
	require.NoError(t, err)
	require.Equal(t, "p/a", below.KVs[0].Key)
	n, err := m.Get(ctx, Range{Key: "p/", Prefix: true, CountOnly: true})
	require.NoError(t, err)
	require.Empty(t, n.KVs)
	require.Equal(t, int64(1), n.Count)

	require.NoError(t, m.Compact(ctx, r3))
	_, err = m.Get(ctx, Range{Key: "p/", Prefix: true, Rev: r2})
	require.ErrorIs(t, err, ErrCompacted)
	r, err := m.Get(ctx, Range{Key: "p/", Prefix: true, Rev: r3})
	require.NoError(t, err)
	require.Len(t, r.KVs, 2, "the compacted revision itself is kept")
	require.ErrorIs(t, m.Compact(ctx, r3), ErrCompacted)
	require.ErrorIs(t, m.Compact(ctx, m.Rev()+1), ErrFutureRev)
}

// Watches: replayed from a revision, one response per revision, in
// order, with the previous value when asked; a watch from before the
// compaction ends with CompactRev; the context ends a watch.
func TestWatch(t *testing.T) {
	m, _ := newMem(t)
	ctx := ctxT(t)
	r1 := put(t, m, "p/a", "1", NoLease)
	_, err := m.Txn(ctx, Txn{Then: []Op{Put("p/a", "2", NoLease), Put("p/b", "1", NoLease), Put("q", "1", NoLease)}})
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	w := m.Watch(wctx, WatchRequest{Key: "p/", Prefix: true, FromRev: r1, PrevKV: true})
	put(t, m, "q", "2", NoLease) // not under the prefix
	_, err = m.Txn(ctx, Txn{Then: []Op{Delete("p/a")}})
	require.NoError(t, err)
	var got [][]string
	for range 3 {
		wr := <-w
		var evs []string
		for _, ev := range wr.Events {
			s := map[EventType]string{EventPut: "put ", EventDelete: "del "}[ev.Type] + ev.KV.Key + "=" + ev.KV.Value
			if ev.Prev != nil {
				s += " was " + ev.Prev.Value
			}
			evs = append(evs, s)
		}
		got = append(got, evs)
	}
	require.Equal(t, [][]string{{"put p/a=1"}, {"put p/a=2 was 1", "put p/b=1"}, {"del p/a= was 2"}}, got)
	cancel()
	_, open := <-w
	require.False(t, open, "closed when its context ends")

	require.NoError(t, m.Compact(ctx, m.Rev()))
	wr := <-m.Watch(ctx, WatchRequest{Key: "p/", Prefix: true, FromRev: r1})
	require.Equal(t, m.Rev(), wr.CompactRev)
	require.True(t, wr.Canceled)
	// From the next revision: only what comes.
	w = m.Watch(ctx, WatchRequest{Key: "p/", Prefix: true})
	rev := put(t, m, "p/c", "1", NoLease)
	wr = <-w
	require.Equal(t, rev, wr.Events[0].KV.ModRev)
	require.Nil(t, wr.Events[0].Prev, "no previous value unless asked")
}
