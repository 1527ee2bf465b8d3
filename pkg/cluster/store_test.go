package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/cluster/kv"
	"github.com/aluad/aluad/pkg/fence"
)

// freePort is a loopback port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// etcdMembers starts n embedded members on loopback (fast Raft timings)
// and returns their configurations (to restart one) and the members.
func etcdMembers(t *testing.T, n int) ([]MemberConfig, []*Member) {
	t.Helper()
	cfgs := make([]MemberConfig, n)
	var peers []string
	for i := range cfgs {
		name := fmt.Sprintf("m%d", i)
		cfgs[i] = MemberConfig{Name: name, Dir: filepath.Join(t.TempDir(), name),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
			Heartbeat: 10 * time.Millisecond, Election: 100 * time.Millisecond, LogLevel: "fatal"}
		peers = append(peers, name+"="+cfgs[i].PeerURL)
	}
	members := make([]*Member, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cfgs {
		cfgs[i].Cluster = strings.Join(peers, ",")
		wg.Add(1)
		go func(i int) { // members of a new cluster wait for each other
			defer wg.Done()
			members[i], errs[i] = StartMember(cfgs[i], 20*time.Second)
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "member %d", i)
		m := members[i]
		t.Cleanup(m.Close)
	}
	return cfgs, members
}

// etcdCluster is etcdMembers with a client of all.
func etcdCluster(t *testing.T, n int) ([]*Member, *clientv3.Client) {
	t.Helper()
	cfgs, members := etcdMembers(t, n)
	var eps []string
	for _, c := range cfgs {
		eps = append(eps, c.ClientURL)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	return members, cli
}

// eachBackend runs test on a store backend of each kind: a one-member
// embedded etcd, and the in-memory store (on the real clock, as the
// tests that use it here wait for real leases).
func eachBackend(t *testing.T, test func(t *testing.T, b kv.Backend)) {
	for _, name := range []string{"etcd", "mem"} {
		t.Run(name, func(t *testing.T) {
			var b kv.Backend
			if name == "etcd" {
				_, cli := etcdCluster(t, 1)
				b = EtcdBackend(cli)
			} else {
				m := kv.NewMem(nil, 0)
				t.Cleanup(m.Close)
				b = m
			}
			test(t, b)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A node is joined by one live process; its key goes with its lease; a
// halted member (a controller that died) is gone once etcd expires the
// lease, and its own deadline passed before anyone could see it gone.
func TestMembership(t *testing.T) { eachBackend(t, testMembership) }

func testMembership(t *testing.T, be kv.Backend) {
	s := NewStoreKV(be, "arr1", nil)
	ctx := ctxT(t)
	a, err := s.Join(ctx, Info{Node: "a", Interlink: "127.0.0.1:7000"}, time.Second)
	require.NoError(t, err)
	require.True(t, a.Valid())
	_, err = s.Join(ctx, Info{Node: "a"}, time.Second)
	require.ErrorIs(t, err, ErrMember, "a second process for node a")
	b, err := s.Join(ctx, Info{Node: "b", Interlink: "127.0.0.1:7001"}, time.Second)
	require.NoError(t, err)
	ms, rev, err := s.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:7000", ms["a"].Interlink)
	require.Len(t, ms, 2)

	// Another array's members are its own.
	other, err := NewStoreKV(be, "arr2", nil).Join(ctx, Info{Node: "a"}, time.Second)
	require.NoError(t, err)
	defer other.Leave(ctx)

	// a renews for a while: its deadline moves on.
	first := a.ValidUntil()
	time.Sleep(1500 * time.Millisecond)
	require.True(t, a.ValidUntil().After(first), "renewed")
	require.True(t, a.Valid())

	// a dies (no more renewals): b sees it leave, after a's own deadline.
	events := s.WatchMembers(ctx, rev)
	a.halt()
	deadline := a.ValidUntil()
	select {
	case ev := <-events:
		require.Equal(t, MemberEvent{Node: "a", Up: false, Rev: ev.Rev}, ev)
		require.False(t, time.Now().Before(deadline), "etcd expired a's lease before a's deadline")
	case <-ctx.Done():
		t.Fatal("a's lease never expired")
	}
	require.False(t, a.Valid())
	select {
	case <-a.Lost():
		t.Fatal("a halted renewing: it has not heard that the lease is gone")
	default:
	}

	// b leaves: at once.
	require.NoError(t, b.Leave(ctx))
	<-b.Lost()
	ms, _, err = s.Members(ctx)
	require.NoError(t, err)
	require.Empty(t, ms)
	_, err = s.Join(ctx, Info{Node: "a"}, 0)
	require.ErrorContains(t, err, "at least 1s")
}

// A node's incarnation record outlives its lease: a process whose lease
// expired may still write (paused, or stuck in a slow write), so a
// takeover written under IsFenced and the node's next join both wait
// until it is fenced; a clean leave needs no fence.
func TestIncarnations(t *testing.T) { eachBackend(t, testIncarnations) }

func testIncarnations(t *testing.T, be kv.Backend) {
	s := NewStoreKV(be, "arr1", nil)
	ctx := ctxT(t)
	require.NoError(t, s.Init(ctx, []Record{{LUN: 0, Owner: "a", Fresh: true}}))
	id := fence.Identity{Host: "h1", PID: 4242, Instance: "first"}
	a, err := s.Join(ctx, Info{Node: "a", Process: id}, time.Second)
	require.NoError(t, err)
	inc, ok, member, err := s.Incarnation(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, member, "a live member's incarnation")
	require.Equal(t, id, inc.Process)
	require.Equal(t, a.JoinRevision(), inc.Rev)

	// a dies (its lease expires): the record stays, and blocks both.
	a.halt()
	events := s.WatchMembers(ctx, inc.Rev)
	<-events
	_, err = s.Join(ctx, Info{Node: "a", Process: fence.Identity{Instance: "second"}}, time.Second)
	require.ErrorIs(t, err, ErrUnfenced)
	_, ok, member, err = s.Incarnation(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok && !member, "a dead member's incarnation, to fence")
	owned, err := s.Owner(ctx, 0)
	require.NoError(t, err)
	_, err = s.Change(ctx, owned, Record{LUN: 0, Owner: "b"}, s.MemberGone("a"), s.IsFenced("a"))
	require.ErrorIs(t, err, ErrStale)
	require.ErrorContains(t, err, "not fenced")

	// Fenced from a stale read: nothing; from the record: gone.
	require.NoError(t, s.MarkFenced(ctx, Incarnation{Info: inc.Info, Rev: inc.Rev - 1}))
	_, ok, _, err = s.Incarnation(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok, "a stale fence deletes nothing")
	require.NoError(t, s.MarkFenced(ctx, inc))
	_, err = s.Change(ctx, owned, Record{LUN: 0, Owner: "b"}, s.MemberGone("a"), s.IsFenced("a"))
	require.NoError(t, err)
	a2, err := s.Join(ctx, Info{Node: "a", Process: fence.Identity{Instance: "second"}}, time.Second)
	require.NoError(t, err)

	// A clean leave takes the record with it.
	require.NoError(t, a2.Leave(ctx))
	_, ok, _, err = s.Incarnation(ctx, "a")
	require.NoError(t, err)
	require.False(t, ok)
	a3, err := s.Join(ctx, Info{Node: "a"}, time.Second)
	require.NoError(t, err)
	defer a3.Leave(ctx)
}

// Every owner change is a compare-and-swap on the record's revision,
// which is the fencing token: of two changes made from one read, one
// wins; the loser learns the record as it is; a member whose lease is
// gone changes nothing; a takeover from a node waits for its lease to be
// gone; the watch reports every change, and says so when it cannot go on.
func TestOwnershipTable(t *testing.T) { eachBackend(t, testOwnershipTable) }

func testOwnershipTable(t *testing.T, be kv.Backend) {
	s := NewStoreKV(be, "arr1", nil)
	ctx := ctxT(t)
	require.NoError(t, s.Init(ctx, []Record{{LUN: 0, Owner: "a"}, {LUN: 1, Owner: "b"}}))
	require.NoError(t, s.Init(ctx, []Record{{LUN: 0, Owner: "b"}}), "existing records are kept")
	t0, rev, err := s.Owners(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", t0[0].Owner)
	require.Equal(t, "b", t0[1].Owner)

	a, err := s.Join(ctx, Info{Node: "a"}, time.Second)
	require.NoError(t, err)
	watched := s.WatchOwners(ctx, rev)
	// A record written before a's membership began is not a's to serve
	// until the leader rewrites it (a may be a restarted controller whose
	// earlier incarnation's copies must be replayed first).
	pre := NewFence(a, 0)
	pre.See(t0[0])
	require.False(t, pre.Serves(0), "a record from before the join")
	t0[0], err = s.Change(ctx, t0[0], Record{LUN: 0, Owner: "a"})
	require.NoError(t, err)
	<-watched

	// Two leaders' changes from the same read: one wins.
	moving, err := s.Change(ctx, t0[0], Record{LUN: 0, Owner: "a", To: "b"}, s.MemberAlive(a))
	require.NoError(t, err)
	require.Greater(t, moving.Rev, t0[0].Rev)
	cur, err := s.Change(ctx, t0[0], Record{LUN: 0, Owner: "c"})
	require.ErrorIs(t, err, ErrStale)
	require.Equal(t, moving, cur, "the loser reads the record as it is")
	_, err = s.Change(ctx, moving, Record{LUN: 1, Owner: "b"})
	require.ErrorContains(t, err, "names LUN 1")

	// The fence: a serves LUN 0 only before and after the move, and only
	// with the token it holds.
	f := NewFence(a, 0)
	require.ErrorIs(t, f.Check(0, 0), ErrFenced, "no record read: nothing is accepted")
	f.See(t0[0])
	require.True(t, f.Serves(0))
	f.See(moving)
	f.See(t0[0]) // an older revision is ignored
	require.False(t, f.Serves(0), "not while the move runs")
	require.NoError(t, f.Check(0, moving.Rev))
	require.ErrorIs(t, f.Check(0, t0[0].Rev), ErrFenced)
	require.False(t, NewFence(a, 2*time.Second).Serves(0), "no view")
	done, err := s.Change(ctx, moving, Record{LUN: 0, Owner: "b"}, s.MemberAlive(a))
	require.NoError(t, err)

	for _, want := range []Owned{moving, done} {
		select {
		case got := <-watched:
			require.NoError(t, got.Err)
			require.Equal(t, want, got.Owned)
		case <-ctx.Done():
			t.Fatal("the watch missed a change")
		}
	}

	// A takeover from a node waits for its lease to be gone.
	back, err := s.Change(ctx, done, Record{LUN: 0, Owner: "a"}, s.MemberAlive(a))
	require.NoError(t, err)
	_, err = s.Change(ctx, back, Record{LUN: 0, Owner: "b"}, s.MemberGone("a"))
	require.ErrorIs(t, err, ErrStale)
	require.ErrorContains(t, err, "node a is a member")

	// a's lease gone: it serves nothing even with a view that names it, and
	// its changes are refused even from a fresh read.
	f.See(back)
	require.True(t, f.Serves(0))
	require.NoError(t, a.Leave(ctx))
	require.False(t, f.Serves(0), "the membership is lost")
	now, err := s.Owner(ctx, 0)
	require.NoError(t, err)
	_, err = s.Change(ctx, now, Record{LUN: 0, Owner: "a"}, s.MemberAlive(a))
	require.ErrorIs(t, err, ErrStale)
	require.ErrorContains(t, err, "no member")
	_, err = s.Change(ctx, now, Record{LUN: 0, Owner: "b"}, s.MemberGone("a"))
	require.NoError(t, err, "the takeover once a is gone")
	_, err = s.Owner(ctx, 7)
	require.ErrorContains(t, err, "no ownership record for LUN 7")

	// A watch from a compacted revision ends with an error, not silently.
	require.NoError(t, be.Compact(ctx, now.Rev))
	for ev := range s.WatchOwners(ctx, rev) {
		require.ErrorIs(t, ev.Err, ErrWatch)
		require.ErrorContains(t, ev.Err, "compacted")
	}
}

// An owner whose renewals stop serves until its deadline less the
// margin, and not after. The membership's clock is fake, so the test
// moves time itself and no timing decides it.
func TestServesUntilTheDeadline(t *testing.T) { eachBackend(t, testServesUntilTheDeadline) }

func testServesUntilTheDeadline(t *testing.T, be kv.Backend) {
	clk := clock.NewFake(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
	s := NewStoreKV(be, "arr1", clk)
	ctx := ctxT(t)
	require.NoError(t, s.Init(ctx, []Record{{LUN: 0, Owner: "a"}}))
	a, err := s.Join(ctx, Info{Node: "a"}, time.Second)
	require.NoError(t, err)
	a.halt() // no more renewals: a controller cut off from etcd
	deadline := a.ValidUntil()
	require.Equal(t, clk.Now().Add(a.TTL()), deadline, "the send time of the grant plus the TTL")
	o, err := s.Owner(ctx, 0)
	require.NoError(t, err)
	o, err = s.Change(ctx, o, Record{LUN: 0, Owner: "a"}) // the leader's rewrite after the join
	require.NoError(t, err)
	f := NewFence(a, 200*time.Millisecond)
	f.See(o)
	clk.Advance(a.TTL() - 201*time.Millisecond)
	require.True(t, f.Serves(0), "more than the margin before the deadline")
	clk.Advance(time.Millisecond)
	require.False(t, f.Serves(0), "the margin before the deadline")
	require.True(t, a.Valid(), "the lease itself is still good")
	clk.Advance(200 * time.Millisecond)
	require.False(t, a.Valid(), "the deadline")
}

// One leader at a time; its term ends with its lease, and another
// candidate is elected then.
func TestElection(t *testing.T) { eachBackend(t, testElection) }

func testElection(t *testing.T, be kv.Backend) {
	s := NewStoreKV(be, "arr1", nil)
	ctx := ctxT(t)
	a, err := s.Join(ctx, Info{Node: "a"}, time.Second)
	require.NoError(t, err)
	b, err := s.Join(ctx, Info{Node: "b"}, time.Second)
	require.NoError(t, err)
	defer b.Leave(ctx)
	la, err := s.Campaign(ctx, a)
	require.NoError(t, err)
	require.True(t, la.Leads())
	require.NoError(t, s.Init(ctx, []Record{{LUN: 0, Owner: "a"}}))
	o, err := s.Owner(ctx, 0)
	require.NoError(t, err)
	o, err = s.Change(ctx, o, Record{LUN: 0, Owner: "a", To: "b"}, la.StillLeader())
	require.NoError(t, err, "the leader changes records")
	leader, err := s.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", leader)

	elected := make(chan *Leadership, 1)
	go func() {
		lb, err := s.Campaign(ctx, b)
		if err == nil {
			elected <- lb
		}
	}()
	select {
	case <-elected:
		t.Fatal("two leaders")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, a.Leave(ctx)) // a's lease, and its term, end
	<-la.Done()
	require.False(t, la.Leads())
	select {
	case <-elected:
	case <-ctx.Done():
		t.Fatal("b was never elected")
	}
	leader, err = s.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "b", leader)
	_, err = s.Change(ctx, o, Record{LUN: 0, Owner: "a"}, la.StillLeader())
	require.ErrorIs(t, err, ErrStale, "a deposed leader changes nothing")
}

// Three members: losing one changes nothing; losing two stops every
// change (no quorum) until one returns.
func TestQuorum(t *testing.T) {
	members, cli := etcdCluster(t, 3)
	s := NewStore(cli, "arr1", nil)
	ctx := ctxT(t)
	require.NoError(t, s.Init(ctx, []Record{{LUN: 0, Owner: "a"}}))
	members[2].Close()
	// Two of three are a quorum: changes go on, after an election if the
	// closed member led (a change in flight then fails and is made again).
	var o Owned
	require.Eventually(t, func() bool {
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		cur, err := s.Owner(short, 0)
		if err != nil {
			return false
		}
		o, err = s.Change(short, cur, Record{LUN: 0, Owner: "b"})
		return err == nil
	}, 15*time.Second, 50*time.Millisecond, "two of three members are a quorum")
	members[1].Close()
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := s.Change(short, o, Record{LUN: 0, Owner: "a"})
	require.Error(t, err, "one member of three is no quorum")
	require.True(t, errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline") ||
		strings.Contains(err.Error(), "leader"), "%v", err)
}

// The quorum lost for longer than the TTL, then back: etcd's new leader
// extends every lease, so a's membership renews again, but its validity
// lapsed meanwhile (no renewal answered for a TTL), which ends the
// election's session. a's term ends and its election key is resigned, so
// b can be elected (it is not held by a term nobody runs).
func TestLeadershipAfterALostQuorum(t *testing.T) {
	cfgs, ms := etcdMembers(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{cfgs[0].ClientURL}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	s := NewStore(cli, "arr1", nil)
	ctx := ctxT(t)
	a, err := s.Join(ctx, Info{Node: "a"}, 2*time.Second)
	require.NoError(t, err)
	b, err := s.Join(ctx, Info{Node: "b"}, 2*time.Second)
	require.NoError(t, err)
	la, err := s.Campaign(ctx, a)
	require.NoError(t, err)

	ms[1].Close()
	ms[2].Close()
	select {
	case <-la.Done():
	case <-ctx.Done():
		t.Fatal("a's term outlived a lost quorum")
	}
	require.False(t, la.Leads())
	// The quorum stays lost for longer than a resign waits, so a's first
	// resign fails and the next must still delete the key.
	time.Sleep(2 * a.TTL())
	m1, err := StartMember(cfgs[1], 20*time.Second)
	require.NoError(t, err)
	defer m1.Close()
	require.Eventually(t, a.Valid, 10*time.Second, 50*time.Millisecond, "a renews once the quorum is back")
	// b's own renewal may come a little later than a's: Leads needs it.
	require.Eventually(t, b.Valid, 10*time.Second, 50*time.Millisecond, "b renews once the quorum is back")
	elected := make(chan *Leadership, 1)
	go func() {
		if l, err := s.Campaign(ctx, b); err == nil {
			elected <- l
		}
	}()
	select {
	case lb := <-elected:
		require.True(t, lb.Leads())
	case <-time.After(3 * a.TTL()):
		leader, _ := s.Leader(ctx)
		t.Fatalf("b not elected after 3 TTLs; the leader key names %q", leader)
	}
}

// Each mirror generation records the node the copies go to from it on;
// a takeover reads the holder of the incarnation it concerns: a gone
// node's newest, a restarted node's newest before the member's. A value
// from before holders were recorded (the node's own name) is unknown, and
// an incarnation that is no member records nothing more.
func TestMirrorHolders(t *testing.T) { eachBackend(t, testMirrorHolders) }

func testMirrorHolders(t *testing.T, be kv.Backend) {
	s := NewStoreKV(be, "arr1", nil)
	ctx := ctxT(t)
	holders := func() map[string]string {
		t.Helper()
		ms, _, err := s.Members(ctx)
		require.NoError(t, err)
		h, err := s.Holders(ctx, ms)
		require.NoError(t, err)
		return h
	}
	a, err := s.Join(ctx, Info{Node: "a"}, time.Second)
	require.NoError(t, err)
	g1, err := s.VoidMirror(ctx, a, "b", 0)
	require.NoError(t, err)
	g2, err := s.VoidMirror(ctx, a, "c", g1)
	require.NoError(t, err)
	require.Greater(t, g2, g1)
	// A void over an older generation (one that waited on a frozen member
	// and lands late) changes nothing, and names the generation found.
	_, err = s.VoidMirror(ctx, a, "b", g1)
	var moved *GenMoved
	require.ErrorAs(t, err, &moved)
	require.Equal(t, g2, moved.Found)
	gens, err := s.MirrorGens(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, map[int64]int64{a.JoinRevision(): g2}, gens, "the generation is the latest void's revision")
	require.Empty(t, holders(), "a member's own incarnation concerns no takeover")
	// Two voids at once over one generation (a controller sends two, to
	// two members): one applies.
	res := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := s.VoidMirror(ctx, a, "c", g2)
			res <- err
		}()
	}
	e1, e2 := <-res, <-res
	require.True(t, (e1 == nil) != (e2 == nil), "one of two voids over one generation applies: %v, %v", e1, e2)
	require.ErrorAs(t, errors.Join(e1, e2), &moved, "the other is refused: the generation moved")

	require.NoError(t, a.Leave(ctx))
	require.Equal(t, map[string]string{"a": "c"}, holders(), "gone: the holder of its newest generation")
	_, err = s.VoidMirror(ctx, a, "b", g2)
	require.ErrorIs(t, err, ErrStale, "no member records nothing")

	a2, err := s.Join(ctx, Info{Node: "a"}, time.Second)
	require.NoError(t, err)
	_, err = s.VoidMirror(ctx, a2, "", 0)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "c"}, holders(), "restarted: the earlier incarnation's holder")
	require.NoError(t, a2.Leave(ctx))
	require.Equal(t, map[string]string{"a": ""}, holders(), "a generation with no partner names none")

	// A generation written before holders were recorded: unknown.
	_, err = be.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put(fmt.Sprintf("%smirrorgen/b/%d", s.prefix, 7), "b", kv.NoLease)}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "", "b": ""}, holders())
}
