package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/faultnet"
)

// Three members, each behind a proxy; one freezes (a paused process:
// its connections stay open, nothing answers). The client drops it
// within a few probes, every call after that completes within a short
// deadline, a watch that may be on its stream ends so that it can be
// started again, and the member comes back once it thaws.
// freezableMembers is three etcd members, each behind a proxy that
// freezes it, and a Client of the proxies.
func freezableMembers(t *testing.T) ([]string, []*faultnet.Proxy, *Client) {
	cfgs, _ := etcdMembers(t, 3)
	var eps []string
	var px []*faultnet.Proxy
	for _, c := range cfgs {
		p, err := faultnet.Listen(c.ClientURL[len("http://"):])
		require.NoError(t, err)
		t.Cleanup(p.Close)
		px = append(px, p)
		eps = append(eps, "http://"+p.Addr())
	}
	cli, err := Dial(eps)
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return eps, px, cli
}

func TestClientSkipsAFrozenMember(t *testing.T) {
	eps, px, cli := freezableMembers(t)
	s := NewStoreOn(cli, "arr1", nil)
	ctx := ctxT(t)
	require.NoError(t, s.Init(ctx, []Record{{LUN: 0, Owner: "a", Fresh: true}}))
	_, rev, err := s.Owners(ctx)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(cli.Healthy()) == 3 }, 10*time.Second, 10*time.Millisecond)
	watch := s.WatchOwners(ctx, rev)
	round, endRound := s.Bounded(ctx, time.Minute)
	defer endRound()

	px[0].Freeze(true)
	require.Eventually(t, func() bool {
		h := cli.Healthy()
		return len(h) == 2 && h[0] == eps[1]
	}, 10*time.Second, 10*time.Millisecond, "the frozen member is dropped")
	select {
	case ev := <-watch:
		require.ErrorIs(t, ev.Err, ErrWatch)
		require.ErrorContains(t, ev.Err, "stopped answering")
	case <-ctx.Done():
		t.Fatal("the watch did not end when a member was dropped")
	}
	require.Eventually(t, func() bool { return round.Err() != nil }, 5*time.Second, 10*time.Millisecond,
		"a round of calls ends when a member is dropped, not after its minute")
	for i := 0; i < 30; i++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _, err := s.Owners(cctx)
		cancel()
		require.NoError(t, err, "call %d went to the frozen member", i)
	}
	px[0].Freeze(false)
	require.Eventually(t, func() bool { return len(cli.Healthy()) == 3 }, 10*time.Second, 10*time.Millisecond,
		"the member is back once it answers")

	// None answers (every member frozen): the client keeps them all.
	for _, p := range px {
		p.Freeze(true)
	}
	time.Sleep(3 * ProbeWait)
	require.Len(t, cli.Healthy(), 3)
	for _, p := range px {
		p.Freeze(false)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, _, err = s.Owners(cctx)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "thawed, the cluster answers: %v", err)
}

// A leader's term outlives a frozen etcd member, whichever it is. Its
// session used to be a keepalive stream of etcd's client, which stays on
// the member it was opened on: frozen, that member stalled it, and the
// term ended a TTL later though the membership's lease lived.
func TestLeadershipSurvivesAFrozenMember(t *testing.T) {
	_, px, cli := freezableMembers(t)
	s := NewStoreOn(cli, "arr1", nil)
	ctx := ctxT(t)
	ttl := 2 * time.Second
	m, err := s.Join(ctx, Info{Node: "a"}, ttl)
	require.NoError(t, err)
	defer m.Abandon()
	l, err := s.Campaign(ctx, m)
	require.NoError(t, err)
	for k, p := range px {
		require.Eventually(t, func() bool { return len(cli.Healthy()) == 3 }, 10*time.Second, 10*time.Millisecond)
		p.Freeze(true)
		time.Sleep(ttl + time.Second)
		select {
		case <-l.Done():
			t.Fatalf("member %d frozen: the term ended", k)
		default:
		}
		require.True(t, l.Leads(), "member %d frozen", k)
		p.Freeze(false)
	}
	// Every member frozen past the TTL (no renewal answered): the term
	// ends, as before.
	for _, p := range px {
		p.Freeze(true)
	}
	select {
	case <-l.Done():
	case <-time.After(3 * ttl):
		t.Fatal("the term outlived its lease's validity")
	}
	for _, p := range px {
		p.Freeze(false)
	}
}
