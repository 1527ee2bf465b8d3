package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/aluad/aluad/pkg/clock"
)

// Store is one array's state in an etcd cluster.
type Store struct {
	cli    *clientv3.Client
	prefix string
	clock  clock.Clock
}

// NewStore returns the state of array id in the cluster cli reaches.
func NewStore(cli *clientv3.Client, arrayID string, clk clock.Clock) *Store {
	if clk == nil {
		clk = clock.Real
	}
	return &Store{cli: cli, prefix: "/aluad/" + arrayID + "/", clock: clk}
}

// Client is the etcd client the store uses.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Info is what a controller publishes about itself under its lease.
type Info struct {
	Node string `json:"node"`
	// Interlink is the address its interlink listens on.
	Interlink string `json:"interlink"`
	// Since is when it joined.
	Since time.Time `json:"since"`
}

func (s *Store) memberKey(node string) string { return s.prefix + "members/" + node }

// ErrMember is a join refused because the node is held by a live member.
var ErrMember = errors.New("cluster: the node is already a member")

// Join grants a lease of ttl, publishes info under it and keeps it alive
// until Leave, or until etcd says the lease is gone. A node can be joined
// by one live process only.
func (s *Store) Join(ctx context.Context, info Info, ttl time.Duration) (*Membership, error) {
	return s.join(ctx, info, ttl, s.cli.Lease)
}

func (s *Store) join(ctx context.Context, info Info, ttl time.Duration, lease clientv3.Lease) (*Membership, error) {
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
	r, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		lease.Revoke(context.Background(), g.ID)
		return nil, fmt.Errorf("cluster: joining as node %s: %w", info.Node, err)
	}
	if !r.Succeeded {
		lease.Revoke(context.Background(), g.ID)
		return nil, fmt.Errorf("%w: node %s (another controller holds its lease)", ErrMember, info.Node)
	}
	m := &Membership{s: s, info: info, id: g.ID, ttl: time.Duration(g.TTL) * time.Second, lease: lease,
		lost: make(chan struct{}), stop: make(chan struct{})}
	m.validUntil = sent.Add(m.ttl)
	m.wg.Add(1)
	go m.keepalive()
	return m, nil
}

// Membership is a controller's live membership.
type Membership struct {
	s     *Store
	info  Info
	id    clientv3.LeaseID
	ttl   time.Duration
	lease clientv3.Lease

	mu         sync.Mutex
	validUntil time.Time
	lostOnce   sync.Once
	lost       chan struct{}
	stopOnce   sync.Once
	stop       chan struct{}
	wg         sync.WaitGroup
}

// Lease is the membership's lease.
func (m *Membership) Lease() clientv3.LeaseID { return m.id }

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
func (m *Membership) Valid() bool { return m.s.clock.Now().Before(m.ValidUntil()) }

// Lost is closed when etcd says the lease is gone (expired or revoked):
// the controller is down for everyone else and must join again.
func (m *Membership) Lost() <-chan struct{} { return m.lost }

// keepalive renews the lease every third of its TTL, each renewal bounded
// by a third of the TTL. A failed renewal leaves the deadline where it
// was: the controller keeps trying, and stops serving as owner when the
// deadline passes.
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
		sent := m.s.clock.Now()
		ctx, cancel := context.WithTimeout(context.Background(), m.ttl/3)
		r, err := m.lease.KeepAliveOnce(ctx, m.id)
		cancel()
		switch {
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			m.markLost()
			return
		case err != nil || r.TTL <= 0:
			continue
		}
		m.mu.Lock()
		if until := sent.Add(time.Duration(r.TTL) * time.Second); until.After(m.validUntil) {
			m.validUntil = until
		}
		m.mu.Unlock()
	}
}

func (m *Membership) markLost() {
	m.mu.Lock()
	m.validUntil = time.Time{}
	m.mu.Unlock()
	m.lostOnce.Do(func() { close(m.lost) })
}

// Leave revokes the lease: the node leaves the cluster at once.
func (m *Membership) Leave(ctx context.Context) error {
	m.halt()
	_, err := m.lease.Revoke(ctx, m.id)
	m.markLost()
	return err
}

// halt stops renewing without revoking: the lease runs out by itself, as
// it does when the controller dies.
func (m *Membership) halt() {
	m.stopOnce.Do(func() { close(m.stop) })
	m.wg.Wait()
}

// Members lists the live members by node, and the revision read.
func (s *Store) Members(ctx context.Context) (map[string]Info, int64, error) {
	r, err := s.cli.Get(ctx, s.prefix+"members/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := map[string]Info{}
	for _, kv := range r.Kvs {
		var in Info
		if err := json.Unmarshal(kv.Value, &in); err != nil {
			return nil, 0, fmt.Errorf("cluster: member record %s: %w", kv.Key, err)
		}
		out[in.Node] = in
	}
	return out, r.Header.Revision, nil
}

// MemberEvent is a member joining (Up) or leaving.
type MemberEvent struct {
	Node string
	Up   bool
	Rev  int64
}

// WatchMembers sends member changes after revision rev until ctx ends.
func (s *Store) WatchMembers(ctx context.Context, rev int64) <-chan MemberEvent {
	out := make(chan MemberEvent, 16)
	wc := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.prefix+"members/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	go func() {
		defer close(out)
		for wr := range wc {
			for _, ev := range wr.Events {
				node := strings.TrimPrefix(string(ev.Kv.Key), s.prefix+"members/")
				select {
				case out <- MemberEvent{Node: node, Up: ev.Type == clientv3.EventTypePut, Rev: ev.Kv.ModRevision}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// Record is one LUN's ownership: its owner and, while a move runs, the
// node it moves to.
type Record struct {
	LUN   uint64 `json:"lun"`
	Owner string `json:"owner"`
	// To is the destination of a move in progress ("" when none).
	To string `json:"to,omitempty"`
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
// array); existing ones are kept.
func (s *Store) Init(ctx context.Context, recs []Record) error {
	for _, r := range recs {
		key := s.ownerKey(r.LUN)
		val, _ := json.Marshal(r)
		if _, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val))).Commit(); err != nil {
			return fmt.Errorf("cluster: LUN %d's record: %w", r.LUN, err)
		}
	}
	return nil
}

// Owners reads the whole table, and the revision read.
func (s *Store) Owners(ctx context.Context) (map[uint64]Owned, int64, error) {
	r, err := s.cli.Get(ctx, s.prefix+"owners/", clientv3.WithPrefix())
	if err != nil {
		return nil, 0, err
	}
	out := map[uint64]Owned{}
	for _, kv := range r.Kvs {
		o, err := decodeOwned(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, 0, err
		}
		out[o.LUN] = o
	}
	return out, r.Header.Revision, nil
}

// Owner reads one LUN's record.
func (s *Store) Owner(ctx context.Context, lun uint64) (Owned, error) {
	r, err := s.cli.Get(ctx, s.ownerKey(lun))
	if err != nil {
		return Owned{}, err
	}
	if len(r.Kvs) == 0 {
		return Owned{}, fmt.Errorf("cluster: no ownership record for LUN %d", lun)
	}
	return decodeOwned(r.Kvs[0].Value, r.Kvs[0].ModRevision)
}

func decodeOwned(b []byte, rev int64) (Owned, error) {
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return Owned{}, fmt.Errorf("cluster: ownership record: %w", err)
	}
	return Owned{Record: rec, Rev: rev}, nil
}

// Change replaces prev with next if the record is still at prev's
// revision, and returns it with its new revision (the new fencing token).
// A record that moved on is refused with ErrStale and returned as it is
// now. With m set, the change is made only while m's lease is alive in
// etcd, so a controller that lost its membership cannot change anything.
func (s *Store) Change(ctx context.Context, prev Owned, next Record, m *Membership) (Owned, error) {
	if next.LUN != prev.LUN {
		return Owned{}, fmt.Errorf("cluster: a change of LUN %d's record names LUN %d", prev.LUN, next.LUN)
	}
	key := s.ownerKey(prev.LUN)
	val, _ := json.Marshal(next)
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", prev.Rev)}
	if m != nil {
		mk := s.memberKey(m.info.Node)
		conds = append(conds, clientv3.Compare(clientv3.LeaseValue(mk), "=", m.id))
	}
	r, err := s.cli.Txn(ctx).If(conds...).Then(clientv3.OpPut(key, string(val))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return Owned{}, err
	}
	if r.Succeeded {
		return Owned{Record: next, Rev: r.Header.Revision}, nil
	}
	kvs := r.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return Owned{}, fmt.Errorf("cluster: no ownership record for LUN %d", prev.LUN)
	}
	cur, err := decodeOwned(kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		return Owned{}, err
	}
	if cur.Rev == prev.Rev && m != nil {
		return cur, fmt.Errorf("cluster: node %s is no member (its lease is gone): %w", m.info.Node, ErrStale)
	}
	return cur, ErrStale
}

// WatchOwners sends every record written after revision rev until ctx
// ends.
func (s *Store) WatchOwners(ctx context.Context, rev int64) <-chan Owned {
	out := make(chan Owned, 64)
	wc := s.cli.Watch(clientv3.WithRequireLeader(ctx), s.prefix+"owners/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	go func() {
		defer close(out)
		for wr := range wc {
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				o, err := decodeOwned(ev.Kv.Value, ev.Kv.ModRevision)
				if err != nil {
					continue
				}
				select {
				case out <- o:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// Fence is a controller's view of the table: the token it last read for
// each LUN. It serves a LUN as owner only while the view names it and its
// membership is valid, and accepts forwarded I/O and mirror traffic only
// with the token it holds.
type Fence struct {
	mu   sync.Mutex
	node string
	view map[uint64]Owned
}

// NewFence is node's empty view.
func NewFence(node string) *Fence { return &Fence{node: node, view: map[uint64]Owned{}} }

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
// view names it owner with no move under way, and m is valid.
func (f *Fence) Serves(lun uint64, m *Membership) bool {
	f.mu.Lock()
	o, ok := f.view[lun]
	f.mu.Unlock()
	return ok && o.Owner == f.node && o.To == "" && m != nil && m.Valid()
}

// ErrFenced refuses traffic that carries a token other than the one held.
var ErrFenced = errors.New("cluster: stale fencing token")

// Check accepts traffic for a LUN stamped with token only if it is the
// token the view holds.
func (f *Fence) Check(lun uint64, token int64) error {
	if held := f.Token(lun); token != held {
		return fmt.Errorf("%w: LUN %d carries revision %d, the record is at %d", ErrFenced, lun, token, held)
	}
	return nil
}

// Campaign runs for the leadership of the ownership core under m's lease
// and returns once elected (or when ctx ends). The leadership ends with
// the lease.
func (s *Store) Campaign(ctx context.Context, m *Membership) (*Leadership, error) {
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(m.id))
	if err != nil {
		return nil, err
	}
	e := concurrency.NewElection(sess, s.prefix+"leader")
	if err := e.Campaign(ctx, m.info.Node); err != nil {
		return nil, err
	}
	return &Leadership{e: e, sess: sess}, nil
}

// Leadership is an elected leader's term.
type Leadership struct {
	e    *concurrency.Election
	sess *concurrency.Session
}

// Done is closed when the term ends with the lease.
func (l *Leadership) Done() <-chan struct{} { return l.sess.Done() }

// Resign ends the term (another candidate is elected).
func (l *Leadership) Resign(ctx context.Context) error { return l.e.Resign(ctx) }

// Leader names the current leader ("" when none).
func (s *Store) Leader(ctx context.Context) (string, error) {
	opts := append([]clientv3.OpOption{clientv3.WithPrefix()}, clientv3.WithFirstCreate()...)
	r, err := s.cli.Get(ctx, s.prefix+"leader", opts...)
	if err != nil {
		return "", err
	}
	if len(r.Kvs) == 0 {
		return "", nil
	}
	return string(r.Kvs[0].Value), nil
}
