package kv

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Cut (fail): every call fails at once with ErrUnreachable and a watch
// open across the cut ends; healed, calls go through.
func TestLinkCutFails(t *testing.T) {
	m, clk := newMem(t)
	l := NewLink(m, clk)
	ctx := ctxT(t)
	w := l.Watch(ctx, WatchRequest{Key: "k"})
	l.Cut(false)
	require.True(t, l.IsCut())
	_, err := l.Get(ctx, Range{Key: "k"})
	require.ErrorIs(t, err, ErrUnreachable)
	_, err = l.Txn(ctx, Txn{Then: []Op{Put("k", "v", NoLease)}})
	require.ErrorIs(t, err, ErrUnreachable)
	_, err = l.Grant(ctx, 1)
	require.ErrorIs(t, err, ErrUnreachable)
	_, err = l.KeepAliveOnce(ctx, 1)
	require.ErrorIs(t, err, ErrUnreachable)
	require.ErrorIs(t, l.Revoke(ctx, 1), ErrUnreachable)
	wr := <-w
	require.ErrorIs(t, wr.Err, ErrUnreachable)
	_, open := <-w
	require.False(t, open)
	wr = <-l.Watch(ctx, WatchRequest{Key: "k"})
	require.ErrorIs(t, wr.Err, ErrUnreachable, "a watch started while cut")
	_, ok := get(t, m, "k")
	require.False(t, ok, "nothing reached the store")

	l.Heal()
	put(t, l, "k", "v", NoLease)
	kv, ok := get(t, l, "k")
	require.True(t, ok)
	require.Equal(t, "v", kv.Value)
}

// Cut (block): a call waits for its context, or for the heal and then
// goes through; a watch holds its events until the heal and then
// delivers them in order.
func TestLinkCutBlocks(t *testing.T) {
	m, clk := newMem(t)
	l := NewLink(m, clk)
	ctx := ctxT(t)
	w := l.Watch(ctx, WatchRequest{Key: "k"})
	l.Cut(true)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := l.Get(short, Range{Key: "k"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrUnreachable)

	res := make(chan error, 1)
	go func() {
		_, err := l.Txn(ctx, Txn{Then: []Op{Put("k", "1", NoLease)}})
		res <- err
	}()
	r2 := put(t, m, "k", "2", NoLease) // another client's write
	r3 := put(t, m, "k", "3", NoLease)
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-res:
		t.Fatalf("a call went through a cut link: %v", err)
	case wr := <-w:
		t.Fatalf("a watch delivered across a cut: %+v", wr)
	default:
	}
	l.Heal()
	require.NoError(t, <-res)
	var revs []int64
	for len(revs) < 3 {
		wr, ok := <-w
		require.True(t, ok, "the watch ended")
		require.NoError(t, wr.Err)
		for _, ev := range wr.Events {
			revs = append(revs, ev.KV.ModRev)
		}
	}
	require.Equal(t, []int64{r2, r3, r3 + 1}, revs)
}
