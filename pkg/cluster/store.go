package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/cluster/kv"
	"github.com/aluad/aluad/pkg/fence"
)

// Store is one array's state in an etcd cluster, or in a kv.Backend
// with etcd's semantics (the in-memory one of a simulation).
type Store struct {
	kv      kv.Backend
	cli     *clientv3.Client // nil on a backend of its own
	prefix  string
	clock   clock.Clock
	dropped func() <-chan struct{} // a member dropped: watches end (nil: never)
}

// NewStore returns the state of array id in the cluster cli reaches.
func NewStore(cli *clientv3.Client, arrayID string, clk clock.Clock) *Store {
	s := NewStoreKV(EtcdBackend(cli), arrayID, clk)
	s.cli = cli
	return s
}

// NewStoreKV returns the state of array id in the store b (an in-memory
// kv.Mem, behind a kv.Link for a client that can be partitioned).
func NewStoreKV(b kv.Backend, arrayID string, clk clock.Clock) *Store {
	if clk == nil {
		clk = clock.Real
	}
	s := &Store{kv: b, prefix: "/aluad/" + arrayID + "/", clock: clk}
	if d, ok := b.(interface{ Dropped() <-chan struct{} }); ok {
		s.dropped = d.Dropped // a backend over several members (Balanced)
	}
	return s
}

// NewStoreOn is NewStore on a client that keeps to the members that
// answer: a watch ends (ErrWatch) when a member is dropped, as its stream
// may be on the member that stopped answering.
func NewStoreOn(c *Client, arrayID string, clk clock.Clock) *Store {
	s := NewStore(c.Client, arrayID, clk)
	s.dropped = c.Dropped
	return s
}

// droppedNow is closed when a member is next dropped (nil: never).
func (s *Store) droppedNow() <-chan struct{} {
	if s.dropped == nil {
		return nil
	}
	return s.dropped()
}

// Bounded is a context for a round of calls: it ends after d, or (on a
// Client that drops members, NewStoreOn) as soon as a member is dropped,
// since a call already sent to it would wait out the whole d.
func (s *Store) Bounded(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, d)
	endOnDrop(ctx, cancel, s.droppedNow())
	return ctx, cancel
}

// endOnDrop calls cancel when dropped closes, unless ctx ends first (a
// call on a dropped member's connection would wait out its deadline).
func endOnDrop(ctx context.Context, cancel context.CancelFunc, dropped <-chan struct{}) {
	if dropped == nil {
		return
	}
	go func() {
		select {
		case <-dropped:
			cancel()
		case <-ctx.Done():
		}
	}()
}

// Client is the etcd client the store uses (nil on a backend of its
// own).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Backend is the store's backend.
func (s *Store) Backend() kv.Backend { return s.kv }

// Info is what a controller publishes about itself under its lease.
type Info struct {
	Node string `json:"node"`
	// Interlink is the address its interlink listens on.
	Interlink string `json:"interlink"`
	// Since is when it joined.
	Since time.Time `json:"since"`
	// Process is the controller's process, for a survivor to fence it.
	Process fence.Identity `json:"process"`
	// Joined is the revision that created the member key (its
	// membership's start; filled by Members, not stored).
	Joined int64 `json:"-"`
}

// Incarnation is a controller process that joined as a node and may
// still write: its record (incarnations/<node>, under no lease) is
// written with its membership and deleted only when it leaves cleanly or
// once it is fenced. A takeover of its LUNs and the node's next join
// both wait for that.
type Incarnation struct {
	Info
	// Rev is the record's revision.
	Rev int64
}

func (s *Store) incKey(node string) string { return s.prefix + "incarnations/" + node }

// ErrUnfenced is a join refused because the node's previous incarnation
// was neither fenced nor left cleanly.
var ErrUnfenced = errors.New("cluster: the node's previous incarnation is not fenced")

// Incarnation reads node's incarnation record (false: none; the node
// left cleanly, was fenced, or never joined), and, at the same revision,
// whether the node is a member: a member's incarnation is its live
// process, never one to fence.
func (s *Store) Incarnation(ctx context.Context, node string) (inc Incarnation, ok, member bool, err error) {
	r, err := s.kv.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Get(s.incKey(node)),
		kv.GetRange(kv.Range{Key: s.memberKey(node), CountOnly: true})}})
	if err != nil {
		return Incarnation{}, false, false, err
	}
	member = r.Results[1].Count > 0
	kvs := r.Results[0].KVs
	if len(kvs) == 0 {
		return Incarnation{}, false, member, nil
	}
	var in Info
	if err := json.Unmarshal([]byte(kvs[0].Value), &in); err != nil {
		return Incarnation{}, false, member, fmt.Errorf("cluster: incarnation record of node %s: %w", node, err)
	}
	return Incarnation{Info: in, Rev: kvs[0].ModRev}, true, member, nil
}

// MarkFenced deletes inc's record once the caller has fenced it (if the
// record is still inc's: another may have done it first).
func (s *Store) MarkFenced(ctx context.Context, inc Incarnation) error {
	key := s.incKey(inc.Node)
	_, err := s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.ModRev(key, "=", inc.Rev)}, Then: []kv.Op{kv.Delete(key)}})
	return err
}

// IsFenced holds while node has no incarnation record: its last process
// was fenced or left cleanly, so no byte of it reaches the media after a
// takeover written under this condition.
func (s *Store) IsFenced(node string) Cond {
	return Cond{cmp: kv.CreateRev(s.incKey(node), "=", 0),
		what: fmt.Sprintf("node %s's last process is not fenced", node)}
}

func (s *Store) memberKey(node string) string { return s.prefix + "members/" + node }

// ErrMember is a join refused because the node is held by a live member.
var ErrMember = errors.New("cluster: the node is already a member")

// Join grants a lease of ttl, publishes info under it and as the node's
// incarnation, and keeps the lease alive until Leave, or until etcd says
// the lease is gone. A node can be joined by one live process only
// (ErrMember), and only once its previous incarnation was fenced or left
// cleanly (ErrUnfenced).
func (s *Store) Join(ctx context.Context, info Info, ttl time.Duration) (*Membership, error) {
	return s.join(ctx, info, ttl, s.kv)
}

func (s *Store) join(ctx context.Context, info Info, ttl time.Duration, lease kv.Backend) (*Membership, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	if secs < 1 {
		return nil, fmt.Errorf("cluster: a lease needs a TTL of at least 1s, not %v", ttl)
	}
	sent := s.clock.Now()
	g, err := lease.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("cluster: lease for node %s: %w", info.Node, err)
	}
	if info.Since.IsZero() {
		info.Since = sent
	}
	val, _ := json.Marshal(info)
	key := s.memberKey(info.Node)
	r, err := s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.CreateRev(key, "=", 0), kv.CreateRev(s.incKey(info.Node), "=", 0)},
		Then: []kv.Op{kv.Put(key, string(val), g.ID), kv.Put(s.incKey(info.Node), string(val), kv.NoLease)},
		Else: []kv.Op{kv.GetRange(kv.Range{Key: key, CountOnly: true})}})
	if err != nil || !r.Succeeded {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lease.Revoke(rctx, g.ID)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("cluster: joining as node %s: %w", info.Node, err)
		}
		if r.Results[0].Count > 0 {
			return nil, fmt.Errorf("%w: node %s (another controller holds its lease)", ErrMember, info.Node)
		}
		return nil, fmt.Errorf("%w: node %s", ErrUnfenced, info.Node)
	}
	m := &Membership{s: s, info: info, id: g.ID, ttl: time.Duration(g.TTL) * time.Second, lease: lease,
		joinRev: r.Rev, lost: make(chan struct{}), stop: make(chan struct{})}
	m.validUntil = sent.Add(m.ttl)
	m.wg.Add(1)
	go m.keepalive()
	return m, nil
}

// Membership is a controller's live membership.
type Membership struct {
	s       *Store
	info    Info
	id      kv.LeaseID
	ttl     time.Duration
	lease   kv.Backend
	joinRev int64 // the revision of the join

	mu         sync.Mutex
	validUntil time.Time
	lostOnce   sync.Once
	lost       chan struct{}
	stopOnce   sync.Once
	stop       chan struct{}
	wg         sync.WaitGroup
}

// Lease is the membership's lease.
func (m *Membership) Lease() kv.LeaseID { return m.id }

// TTL is the lease's time to live, as etcd granted it.
func (m *Membership) TTL() time.Duration { return m.ttl }

// ValidUntil is the local deadline: before it, etcd cannot have expired
// the lease (it is the send time of the last renewal etcd granted, plus
// the TTL). A controller serves as owner only before it.
func (m *Membership) ValidUntil() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.validUntil
}

// Valid reports whether the lease is certainly alive now.
func (m *Membership) Valid() bool { return m.ValidFor(0) }

// ValidFor reports whether the lease is certainly alive for d more: what
// an owner checks before it starts an I/O that reaches the media within
// d, so none lands after etcd could have expired the lease.
func (m *Membership) ValidFor(d time.Duration) bool {
	return m.s.clock.Now().Add(d).Before(m.ValidUntil())
}

// Node is the member's node.
func (m *Membership) Node() string { return m.info.Node }

// JoinRevision is the etcd revision of the join: a view of the table read
// before it may be stale (the node was not a member when it was read).
func (m *Membership) JoinRevision() int64 { return m.joinRev }

// Lost is closed when etcd says the lease is gone (expired or revoked):
// the controller is down for everyone else and must join again.
func (m *Membership) Lost() <-chan struct{} { return m.lost }

// keepalive renews the lease every third of its TTL, each renewal tried
// for at most a third of the TTL. A failed renewal leaves the deadline
// where it was: the controller keeps trying, and stops serving as owner
// when the deadline passes.
func (m *Membership) keepalive() {
	defer m.wg.Done()
	t := m.s.clock.NewTicker(m.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C():
		}
		// Two renewals at once, each bounded by a third of the TTL, the
		// first answer taken: the client sends calls round robin, so one
		// that meets a frozen etcd member (before the client drops it)
		// does not leave the lease to run out while it waits there.
		sent := m.s.clock.Now()
		ttl, err := m.renew()
		switch {
		case errors.Is(err, kv.ErrLeaseNotFound):
			m.markLost()
			return
		case err != nil || ttl <= 0:
			continue
		}
		m.mu.Lock()
		if until := sent.Add(time.Duration(ttl) * time.Second); until.After(m.validUntil) {
			m.validUntil = until
		}
		m.mu.Unlock()
	}
}

// renew sends two keepalives of the lease at once and returns the first
// success, or the last failure.
func (m *Membership) renew() (int64, error) {
	type answer struct {
		ttl int64
		err error
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
	defer cancel()
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			ttl, err := m.lease.KeepAliveOnce(ctx, m.id)
			answers <- answer{ttl, err}
		}()
	}
	var a answer
	for range 2 {
		if a = <-answers; a.err == nil || errors.Is(a.err, kv.ErrLeaseNotFound) {
			break
		}
	}
	return a.ttl, a.err
}

func (m *Membership) markLost() {
	m.mu.Lock()
	m.validUntil = time.Time{}
	m.mu.Unlock()
	m.lostOnce.Do(func() { close(m.lost) })
}

// Leave revokes the lease: the node leaves the cluster at once. It stops
// counting itself a member first, so it never serves after others saw it
// go. Only the node itself may revoke its lease, once it has released its
// LUNs: a revoked member looks gone to everyone at once, while it may
// still believe its lease good until its deadline (an expiry cannot be
// seen before the deadline; a revocation can).
// Its incarnation record goes first: it has stopped writing, so a
// takeover needs no fence.
func (m *Membership) Leave(ctx context.Context) error {
	m.halt()
	m.markLost()
	key := m.s.incKey(m.info.Node)
	if _, err := m.s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.ModRev(key, "=", m.joinRev)},
		Then: []kv.Op{kv.Delete(key)}}); err != nil {
		return err
	}
	return m.lease.Revoke(ctx, m.id)
}

// Abandon stops renewing without revoking: the lease runs out by itself,
// as it does when the controller dies.
func (m *Membership) Abandon() { m.halt() }

func (m *Membership) halt() {
	m.stopOnce.Do(func() { close(m.stop) })
	m.wg.Wait()
}

// Members lists the live members by node, and the revision read.
func (s *Store) Members(ctx context.Context) (map[string]Info, int64, error) {
	r, err := s.kv.Get(ctx, kv.Range{Key: s.prefix + "members/", Prefix: true})
	if err != nil {
		return nil, 0, err
	}
	out := map[string]Info{}
	for _, k := range r.KVs {
		var in Info
		if err := json.Unmarshal([]byte(k.Value), &in); err != nil {
			return nil, 0, fmt.Errorf("cluster: member record %s: %w", k.Key, err)
		}
		in.Joined = k.CreateRev
		out[in.Node] = in
	}
	return out, r.Rev, nil
}

// MemberEvent is a member joining (Up) or leaving, or the end of the
// watch (Err set; the channel closes after it).
type MemberEvent struct {
	Node string
	Up   bool
	Rev  int64
	Err  error
}

// ErrWatch ends a watch that cannot go on (its revision was compacted, the
// etcd member lost its leader, the connection failed): the caller must
// read afresh and watch from there.
var ErrWatch = errors.New("cluster: the watch ended")

// watchErr says why a watch response ends the watch ("" when it does not).
func watchErr(wr kv.WatchResponse) error {
	switch {
	case wr.CompactRev != 0:
		return fmt.Errorf("%w: revision %d was compacted", ErrWatch, wr.CompactRev)
	case wr.Err != nil:
		return fmt.Errorf("%w: %v", ErrWatch, wr.Err)
	case wr.Canceled:
		return fmt.Errorf("%w: canceled", ErrWatch)
	}
	return nil
}

// watch sends what conv makes of every event under prefix after revision
// rev until ctx ends; when the watch cannot go on, or conv refuses an
// event, it sends what fail makes of the error and closes.
func watch[T any](ctx context.Context, s *Store, prefix string, rev int64, buf int,
	conv func(*kv.Event) (T, error), fail func(error) T) <-chan T {
	out := make(chan T, buf)
	wctx, cancel := context.WithCancel(ctx)
	endOnDrop(wctx, cancel, s.droppedNow()) // its stream may be on the member dropped
	wc := s.kv.Watch(wctx, kv.WatchRequest{Key: prefix, Prefix: true, FromRev: rev + 1, RequireLeader: true})
	go func() {
		defer close(out)
		defer cancel()
		send := func(v T) bool {
			select {
			case out <- v:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for wr := range wc {
			if err := watchErr(wr); err != nil {
				send(fail(err))
				return
			}
			for i := range wr.Events {
				v, err := conv(&wr.Events[i])
				if err != nil {
					send(fail(err))
					return
				}
				if !send(v) {
					return
				}
			}
		}
		if ctx.Err() == nil {
			why := "the watch channel closed"
			if wctx.Err() != nil {
				why = "an etcd member stopped answering"
			}
			send(fail(fmt.Errorf("%w: %s", ErrWatch, why)))
		}
	}()
	return out
}

// WatchMembers sends member changes after revision rev until ctx ends, or
// an event with Err when the watch cannot go on.
func (s *Store) WatchMembers(ctx context.Context, rev int64) <-chan MemberEvent {
	pfx := s.prefix + "members/"
	return watch(ctx, s, pfx, rev, 16, func(ev *kv.Event) (MemberEvent, error) {
		return MemberEvent{Node: strings.TrimPrefix(ev.KV.Key, pfx), Up: ev.Type == kv.EventPut,
			Rev: ev.KV.ModRev}, nil
	}, func(err error) MemberEvent { return MemberEvent{Err: err} })
}

// Record is one LUN's ownership: its owner and, while a move runs, the
// node it moves to.
type Record struct {
	LUN   uint64 `json:"lun"`
	Owner string `json:"owner"`
	// To is the destination of a move in progress ("" when none).
	To string `json:"to,omitempty"`
	// Cause is why the record's writer changed it (failover, failback,
	// manual...): the controllers announce the change with it.
	Cause string `json:"cause,omitempty"`
	// Replay marks a takeover: the new owner replays the mirror copies
	// of the old owner's dirty pages it holds. After a planned hand-over
	// the old owner has destaged them all, and the copies are dropped.
	Replay bool `json:"replay,omitempty"`
	// Fresh marks a record no controller has served yet (the array's
	// first start): its owner may serve it whenever it joined.
	Fresh bool `json:"fresh,omitempty"`
}

// Owned is a record as read, with its revision: the fencing token.
type Owned struct {
	Record
	Rev int64
}

func (s *Store) ownerKey(lun uint64) string { return fmt.Sprintf("%sowners/%05d", s.prefix, lun) }

// ErrStale is a change refused because the record changed since it was
// read (its revision is not the one the change was based on).
var ErrStale = errors.New("cluster: the ownership record changed since it was read")

// Init creates the records that do not exist yet (the first start of the
// array); existing ones are kept. Each create-if-absent is idempotent, so
// one the cluster could not take now (no leader yet, a proposal dropped
// during an election: seen when controllers start together on a loaded
// machine) is tried again until ctx ends.
func (s *Store) Init(ctx context.Context, recs []Record) error {
	for _, r := range recs {
		key := s.ownerKey(r.LUN)
		val, _ := json.Marshal(r)
		for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			_, err := s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.CreateRev(key, "=", 0)},
				Then: []kv.Op{kv.Put(key, string(val), kv.NoLease)}})
			if err == nil {
				break
			}
			if !transient(err) {
				return fmt.Errorf("cluster: LUN %d's record: %w", r.LUN, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("cluster: LUN %d's record: %w (and then %w)", r.LUN, err, ctx.Err())
			case <-time.After(wait):
			}
		}
	}
	return nil
}

// transient: etcd could not take a request now but may in a moment (no
// leader, a leader change, a proposal dropped during an election, a
// request timed out; a client cut off from the in-memory store).
func transient(err error) bool {
	if errors.Is(err, kv.ErrUnreachable) {
		return true
	}
	var ee rpctypes.EtcdError // what the client turns the server's known errors into
	if errors.As(err, &ee) && ee.Code() == codes.Unavailable {
		return true
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		return true
	}
	return strings.Contains(rpctypes.ErrorDesc(err), "proposal dropped")
}

// Owners reads the whole table, and the revision read.
func (s *Store) Owners(ctx context.Context) (map[uint64]Owned, int64, error) {
	r, err := s.kv.Get(ctx, kv.Range{Key: s.prefix + "owners/", Prefix: true})
	if err != nil {
		return nil, 0, err
	}
	out := map[uint64]Owned{}
	for _, k := range r.KVs {
		o, err := decodeOwned(k.Value, k.ModRev)
		if err != nil {
			return nil, 0, err
		}
		out[o.LUN] = o
	}
	return out, r.Rev, nil
}

// Owner reads one LUN's record.
func (s *Store) Owner(ctx context.Context, lun uint64) (Owned, error) {
	r, err := s.kv.Get(ctx, kv.Range{Key: s.ownerKey(lun)})
	if err != nil {
		return Owned{}, err
	}
	if len(r.KVs) == 0 {
		return Owned{}, fmt.Errorf("cluster: no ownership record for LUN %d", lun)
	}
	return decodeOwned(r.KVs[0].Value, r.KVs[0].ModRev)
}

func decodeOwned(b string, rev int64) (Owned, error) {
	var rec Record
	if err := json.Unmarshal([]byte(b), &rec); err != nil {
		return Owned{}, fmt.Errorf("cluster: ownership record: %w", err)
	}
	return Owned{Record: rec, Rev: rev}, nil
}

// Cond is an extra condition of a change.
type Cond struct {
	cmp  kv.Cmp
	what string
}

// MemberAlive holds while m's lease holds its member key: a controller
// whose lease is gone changes nothing, even from a fresh read.
func (s *Store) MemberAlive(m *Membership) Cond {
	return Cond{cmp: kv.LeaseIs(s.memberKey(m.info.Node), "=", m.id),
		what: fmt.Sprintf("node %s is no member (its lease is gone)", m.info.Node)}
}

// MemberGone holds while node has no member key: an unplanned takeover
// of its LUNs is made only once its lease has expired (not while it may
// have joined again and read its own record).
func (s *Store) MemberGone(node string) Cond {
	return Cond{cmp: kv.CreateRev(s.memberKey(node), "=", 0),
		what: fmt.Sprintf("node %s is a member", node)}
}

// MemberSince holds while node is a member whose membership began after
// revision rev: a controller restarted since the record was written
// (its cache, and what its partner mirrored of it, are of an earlier
// incarnation).
func (s *Store) MemberSince(node string, rev int64) Cond {
	return Cond{cmp: kv.CreateRev(s.memberKey(node), ">", rev),
		what: fmt.Sprintf("node %s is not a member that joined after revision %d", node, rev)}
}

// MemberIs holds while node's membership is the one that began at
// revision joined: a decision about a member's LUNs made from a read of
// the membership is void if it restarted since.
func (s *Store) MemberIs(node string, joined int64) Cond {
	return Cond{cmp: kv.CreateRev(s.memberKey(node), "=", joined),
		what: fmt.Sprintf("node %s is not the member that joined at revision %d", node, joined)}
}

// MirrorGens are node's mirror generations, one per incarnation (by the
// revision its membership began at): the revision at which that
// incarnation last voided the copies its partner holds. A copy sent by an
// incarnation under an older generation than its own latest is never
// replayed; the copies of an earlier incarnation are not voided by a
// later one (they may be the only copies of its acknowledged writes).
func (s *Store) MirrorGens(ctx context.Context, node string) (map[int64]int64, error) {
	prefix := s.prefix + "mirrorgen/" + node + "/"
	r, err := s.kv.Get(ctx, kv.Range{Key: prefix, Prefix: true})
	if err != nil {
		return nil, err
	}
	out := map[int64]int64{}
	for _, k := range r.KVs {
		inc, err := strconv.ParseInt(strings.TrimPrefix(k.Key, prefix), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cluster: mirror generation key %s: %w", k.Key, err)
		}
		out[inc] = k.ModRev
	}
	return out, nil
}

// VoidMirror starts a new mirror generation for m's incarnation (while
// it is a member), recording holder as the node its copies go to from it
// on ("" for none): every copy its partner holds from it before is void.
// A controller that lost its partner link while serving does this before
// it acknowledges a write the partner did not see, and before it sends a
// copy to a partner no generation of its names (a new one, or its
// first).
//
// The void applies only over generation over, the incarnation's latest
// that the caller knows (0: none yet). A void that waited on an etcd
// member that froze may be applied when the member thaws, long after the
// caller gave it up and voided again: unconditional, it would start a
// generation over the newer one and void the copies sent under that (a
// takeover replays none older than the latest), losing acknowledged
// writes. So at most one void over a generation applies, and two may be
// sent at once. When the incarnation's generation is not over (such a
// late void of the caller's applied), the error is a *GenMoved with the
// generation found.
func (s *Store) VoidMirror(ctx context.Context, m *Membership, holder string, over int64) (int64, error) {
	key := fmt.Sprintf("%smirrorgen/%s/%d", s.prefix, m.info.Node, m.joinRev)
	r, err := s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{s.MemberAlive(m).cmp, kv.ModRev(key, "=", over)},
		Then: []kv.Op{kv.Put(key, holderPrefix+holder, kv.NoLease)},
		Else: []kv.Op{kv.Get(s.memberKey(m.info.Node)), kv.Get(key)}})
	if err != nil {
		return 0, err
	}
	if !r.Succeeded {
		if mk := r.Results[0].KVs; len(mk) == 0 || mk[0].Lease != m.id {
			return 0, fmt.Errorf("%w: node %s is no member", ErrStale, m.info.Node)
		}
		var found int64
		if g := r.Results[1].KVs; len(g) > 0 {
			found = g[0].ModRev
		}
		return 0, &GenMoved{Node: m.info.Node, Over: over, Found: found}
	}
	return r.Rev, nil
}

// GenMoved is a void refused because the incarnation's generation is
// not the one it was to apply over.
type GenMoved struct {
	Node        string
	Over, Found int64
}

func (e *GenMoved) Error() string {
	return fmt.Sprintf("cluster: node %s's mirror generation is %d, not %d", e.Node, e.Found, e.Over)
}

// holderPrefix starts a generation's value that names its holder; a value
// without it (the node's own name, written before holders were recorded)
// names none: the holder is unknown.
const holderPrefix = "holder="

// Holders reads, for every node with a mirror generation, the holder
// recorded with the latest generation of the incarnation a takeover of
// its records concerns: for a node in members, its newest incarnation
// before the member's (the one whose records it restarted over); for any
// other, its newest. "" is unknown (none recorded, or a generation with
// no partner). Read after members: a gone incarnation records nothing
// more (VoidMirror holds only while it is a member).
func (s *Store) Holders(ctx context.Context, members map[string]Info) (map[string]string, error) {
	prefix := s.prefix + "mirrorgen/"
	r, err := s.kv.Get(ctx, kv.Range{Key: prefix, Prefix: true})
	if err != nil {
		return nil, err
	}
	newest := map[string]int64{}
	out := map[string]string{}
	for _, k := range r.KVs {
		node, incs, ok := strings.Cut(strings.TrimPrefix(k.Key, prefix), "/")
		inc, err := strconv.ParseInt(incs, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("cluster: mirror generation key %s: not <node>/<incarnation>", k.Key)
		}
		if m, up := members[node]; up && inc >= m.Joined {
			continue // the member's own: no takeover concerns it
		}
		if at, seen := newest[node]; seen && at > inc {
			continue
		}
		newest[node] = inc
		h, named := strings.CutPrefix(k.Value, holderPrefix)
		if !named {
			h = ""
		}
		out[node] = h
	}
	return out, nil
}

// StillLeader holds while l's election key is the one it won with: a
// deposed leader changes nothing.
func (l *Leadership) StillLeader() Cond {
	return Cond{cmp: kv.CreateRev(l.key, "=", l.rev),
		what: "the leader's term is over"}
}

// Change replaces prev with next if the record is still at prev's
// revision and every condition holds, and returns it with its new
// revision (the new fencing token). A record that moved on is refused
// with ErrStale and returned as it is now; a condition that failed, with
// ErrStale saying which.
func (s *Store) Change(ctx context.Context, prev Owned, next Record, conds ...Cond) (Owned, error) {
	if next.LUN != prev.LUN {
		return Owned{}, fmt.Errorf("cluster: a change of LUN %d's record names LUN %d", prev.LUN, next.LUN)
	}
	key := s.ownerKey(prev.LUN)
	val, _ := json.Marshal(next)
	cmps := []kv.Cmp{kv.ModRev(key, "=", prev.Rev)}
	for _, c := range conds {
		cmps = append(cmps, c.cmp)
	}
	r, err := s.kv.Txn(ctx, kv.Txn{If: cmps, Then: []kv.Op{kv.Put(key, string(val), kv.NoLease)}, Else: []kv.Op{kv.Get(key)}})
	if err != nil {
		return Owned{}, err
	}
	if r.Succeeded {
		return Owned{Record: next, Rev: r.Rev}, nil
	}
	kvs := r.Results[0].KVs
	if len(kvs) == 0 {
		return Owned{}, fmt.Errorf("cluster: no ownership record for LUN %d", prev.LUN)
	}
	cur, err := decodeOwned(kvs[0].Value, kvs[0].ModRev)
	if err != nil {
		return Owned{}, err
	}
	if cur.Rev != prev.Rev {
		return cur, ErrStale
	}
	var why []string
	for _, c := range conds {
		why = append(why, c.what)
	}
	return cur, fmt.Errorf("%w: a condition failed (one of: %s)", ErrStale, strings.Join(why, "; "))
}

// OwnerEvent is a record written, or the end of the watch (Err set; the
// channel closes after it).
type OwnerEvent struct {
	Owned
	Err error
}

// WatchOwners sends every record written after revision rev until ctx
// ends, or an event with Err when the watch cannot go on (a record that
// does not decode or is deleted ends it too: the view would be wrong).
func (s *Store) WatchOwners(ctx context.Context, rev int64) <-chan OwnerEvent {
	return watch(ctx, s, s.prefix+"owners/", rev, 64, func(ev *kv.Event) (OwnerEvent, error) {
		if ev.Type != kv.EventPut {
			return OwnerEvent{}, fmt.Errorf("%w: record %s deleted", ErrWatch, ev.KV.Key)
		}
		o, err := decodeOwned(ev.KV.Value, ev.KV.ModRev)
		if err != nil {
			return OwnerEvent{}, fmt.Errorf("%w: %v", ErrWatch, err)
		}
		return OwnerEvent{Owned: o}, nil
	}, func(err error) OwnerEvent { return OwnerEvent{Err: err} })
}

// Fence is a controller's view of the table under one membership: the
// record it last read for each LUN. It serves a LUN as owner only while
// the view names it owner with no move under way and its membership is
// valid for the margin, and accepts forwarded I/O and mirror traffic only
// with the token it holds. A new membership (a join after a lost lease)
// needs a new Fence, filled by reads made after the join: a view read
// before it may name this node owner of a LUN that moved meanwhile.
type Fence struct {
	mu     sync.Mutex
	m      *Membership
	margin time.Duration
	view   map[uint64]Owned
}

// NewFence is m's empty view; margin is the longest an I/O admitted as
// owner may take to reach the media.
func NewFence(m *Membership, margin time.Duration) *Fence {
	return &Fence{m: m, margin: margin, view: map[uint64]Owned{}}
}

// See records a record read or watched; an older revision than the one
// held is ignored (watch events may repeat what a read already gave).
func (f *Fence) See(o Owned) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.view[o.LUN]; !ok || o.Rev > cur.Rev {
		f.view[o.LUN] = o
	}
}

// Token is the revision of the LUN's record in the view (0: none).
func (f *Fence) Token(lun uint64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.view[lun].Rev
}

// Serves reports whether the node may serve the LUN as owner now: the
// view names it owner with no move under way, and the membership is
// valid for the margin and not lost.
func (f *Fence) Serves(lun uint64) bool {
	o, ok := f.mine(lun)
	return ok && o.To == ""
}

// Holds reports whether the node may still write the LUN's data to the
// media: the view names it owner (a hand-over under way included: the
// old owner destages before it lets go) and the membership is valid for
// the margin. A node that no longer holds a LUN never destages it again.
func (f *Fence) Holds(lun uint64) bool {
	_, ok := f.mine(lun)
	return ok
}

// mine reads the view's record of the LUN and whether it names this node
// owner under a membership valid for the margin.
func (f *Fence) mine(lun uint64) (Owned, bool) {
	f.mu.Lock()
	o, ok := f.view[lun]
	f.mu.Unlock()
	select {
	case <-f.m.Lost():
		return o, false
	default:
	}
	// A record written before this membership began may name the node
	// for an earlier incarnation (restarted before the leader took its
	// LUNs over): only the leader's rewrite makes it this one's.
	return o, ok && o.Owner == f.m.info.Node && o.Rev > f.m.joinRev && f.m.ValidFor(f.margin)
}

// View is the record the view holds for the LUN.
func (f *Fence) View(lun uint64) (Owned, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.view[lun]
	return o, ok
}

// ErrFenced refuses traffic that carries a token other than the one held.
var ErrFenced = errors.New("cluster: stale fencing token")

// Check accepts traffic for a LUN stamped with token only if it is the
// token the view holds (never when the view holds no record).
func (f *Fence) Check(lun uint64, token int64) error {
	held := f.Token(lun)
	if held == 0 {
		return fmt.Errorf("%w: no record of LUN %d has been read", ErrFenced, lun)
	}
	if token != held {
		return fmt.Errorf("%w: LUN %d carries revision %d, the record is at %d", ErrFenced, lun, token, held)
	}
	return nil
}
