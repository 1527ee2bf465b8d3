package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/cluster/kv"
)

// The election is etcd's concurrency.Election, written over the store's
// backend so that it runs on the in-memory one too; on etcd it makes the
// calls concurrency.Election and concurrency.Session make, in the same
// order: a candidate puts prefix/<its lease in hex> under its lease if
// absent (one left by an earlier term of its own is deleted first, not
// taken over: see campaign), then waits until every key under the prefix
// created before its own is deleted; the leader is the key first
// created. The session ends when the membership's lease can no longer be
// kept; it is ended (Orphan) and never revoked.

// session is concurrency.Session on the membership's lease, kept alive by
// the membership's own renewals rather than by a keepalive stream of its
// own: etcd's client keeps a lease's stream on the member it opened it
// on, so a member that froze (SIGSTOP, a frozen VM) stalled it, and the
// session ended a TTL later though the lease lived (renewed by the
// membership, two calls at once, each bounded): every term ended, and
// every later one with it, while the member stayed frozen. The session
// ends, as etcd's does, when no renewal was answered for a TTL: once
// the membership's validity lapses, or it is lost.
type session struct {
	cancel context.CancelFunc
	done   <-chan struct{}
}

func (s *Store) newSession(m *Membership) *session {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := s.clock.NewTicker(sessionCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-m.Lost():
				return
			case <-t.C():
				if !m.Valid() {
					return
				}
			}
		}
	}()
	return &session{cancel: cancel, done: done}
}

// sessionCheck: how often a session looks at its membership's validity.
const sessionCheck = 50 * time.Millisecond

// Done is closed when the session ends.
func (ss *session) Done() <-chan struct{} { return ss.done }

// Orphan ends the session and leaves the lease to the membership.
func (ss *session) Orphan() {
	ss.cancel()
	<-ss.done
}

// campaign is concurrency.Election's Campaign under lease with value val
// and key prefix pfx (with its trailing "/"): it returns the key won
// with and its creation revision.
func (s *Store) campaign(ctx context.Context, pfx string, lease kv.LeaseID, val string) (string, int64, error) {
	k := fmt.Sprintf("%s%x", pfx, lease)
	var rev int64
	for {
		r, err := s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.CreateRev(k, "=", 0)}, Then: []kv.Op{kv.Put(k, val, lease)},
			Else: []kv.Op{kv.Get(k)}})
		if err != nil {
			return "", 0, err
		}
		if r.Succeeded {
			rev = r.Rev
			break
		}
		// A key of this lease left by an earlier term or campaign is not
		// taken over, as etcd's Campaign would: that term's resign (its
		// watch still retrying, or one sent to a member that froze and
		// applied when it thaws) compares on the key's creation revision
		// and would delete the new term's key, so another candidate
		// would be elected while this one still led. It is deleted and
		// made afresh, behind the candidates already waiting.
		old := r.Results[0].KVs[0].CreateRev
		if _, err := s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.CreateRev(k, "=", old)}, Then: []kv.Op{kv.Delete(k)}}); err != nil {
			return "", 0, err
		}
	}
	resign := func(ctx context.Context) {
		s.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.CreateRev(k, "=", rev)}, Then: []kv.Op{kv.Delete(k)}})
	}
	if err := s.waitDeletes(ctx, pfx, rev-1); err != nil {
		select {
		case <-ctx.Done():
			// etcd resigns on the client's own context, which ends only
			// when the client closes; bounded here, since a controller
			// closes its client only after its goroutines end, and a
			// resign sent to a member that froze would never end. A key
			// left behind is the lease's: it goes with the lease, or is
			// this candidate's own at its next campaign.
			rctx, cancel := context.WithTimeout(context.Background(), s.resignWithin())
			resign(rctx)
			cancel()
		default:
		}
		return "", 0, err
	}
	return k, rev, nil
}

// resignWithin bounds the wait of a resign after a failed campaign: a
// healthy member answers well within it (twice a probe's round).
func (s *Store) resignWithin() time.Duration { return 2 * (ProbeEvery + ProbeWait) }

// waitDeletes waits until every key under pfx created at maxCreateRev or
// before is deleted, the last created first.
func (s *Store) waitDeletes(ctx context.Context, pfx string, maxCreateRev int64) error {
	for {
		r, err := s.kv.Get(ctx, kv.Range{Key: pfx, Prefix: true, Sort: kv.LastCreate, MaxCreateRev: maxCreateRev})
		if err != nil {
			return err
		}
		if len(r.KVs) == 0 {
			return nil
		}
		if err := s.waitDelete(ctx, r.KVs[0].Key, r.Rev); err != nil {
			return err
		}
	}
}

func (s *Store) waitDelete(ctx context.Context, key string, rev int64) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wr kv.WatchResponse
	for wr = range s.kv.Watch(cctx, kv.WatchRequest{Key: key, FromRev: rev}) {
		for _, ev := range wr.Events {
			if ev.Type == kv.EventDelete {
				return nil
			}
		}
	}
	switch {
	case wr.Err != nil:
		return wr.Err
	case wr.CompactRev != 0:
		return fmt.Errorf("%w (%d)", kv.ErrCompacted, wr.CompactRev)
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return errors.New("lost watcher waiting for delete")
}

// Campaign runs for the leadership of the ownership core under m's lease
// and returns once elected (or when ctx ends). The term ends with the
// membership; if the membership's validity lapses while it is not lost
// (no renewal answered for a TTL: etcd lost its quorum for that long),
// the term is resigned so another candidate can be elected.
func (s *Store) Campaign(ctx context.Context, m *Membership) (*Leadership, error) {
	sess := s.newSession(m)
	// The campaign waits on a watch for the earlier candidates' keys to
	// go: if an etcd member is dropped, that watch may be on it, so the
	// campaign ends and the caller campaigns again.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	endOnDrop(cctx, cancel, s.droppedNow())
	key, rev, err := s.campaign(cctx, s.prefix+"leader/", m.id, m.info.Node)
	if err != nil {
		sess.Orphan() // never revoke: that would end the membership's lease
		return nil, err
	}
	l := &Leadership{sess: sess, m: m, done: make(chan struct{}), kv: s.kv, key: key, rev: rev, resigning: make(chan struct{}, 1)}
	go l.watch()
	return l, nil
}

// Leadership is an elected leader's term.
type Leadership struct {
	sess *session
	m    *Membership
	once sync.Once
	done chan struct{}
	kv   kv.Backend
	key  string // the election key won with, and its creation revision
	rev  int64
	// resigning lets resigns run one at a time; a channel, not a mutex:
	// the one waiting gives up with its context, and inside a synctest
	// bubble it waits durably (a goroutine on a mutex stops fake time
	// while the resign it waits for waits on a store that is cut off).
	resigning chan struct{}
}

// resign deletes the election key the term was won with, if it is still
// that one. (concurrency.Election's Resign forgets the key even when its
// delete fails, so a resign tried again while the quorum was lost did
// nothing, and the key stayed under the live lease: nobody else could
// be elected.)
func (l *Leadership) resign(ctx context.Context) error {
	select {
	case l.resigning <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l.resigning }()
	_, err := l.kv.Txn(ctx, kv.Txn{If: []kv.Cmp{kv.CreateRev(l.key, "=", l.rev)}, Then: []kv.Op{kv.Delete(l.key)}})
	return err
}
func (l *Leadership) watch() {
	select {
	case <-l.m.Lost():
	case <-l.sess.Done():
		// Resign until it goes through (the quorum may still be lost) or
		// the membership is.
		l.end()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), l.m.ttl)
			err := l.resign(ctx)
			cancel()
			if err == nil {
				return
			}
			select {
			case <-l.m.Lost():
				return
			case <-l.m.stop: // killed or left: the lease goes by itself
				return
			case <-time.After(l.m.ttl / 3):
			}
		}
	case <-l.done:
	}
	l.end()
}

func (l *Leadership) end() { l.once.Do(func() { close(l.done) }) }

// Done is closed when the term ends.
func (l *Leadership) Done() <-chan struct{} { return l.done }

// Leads reports whether the leader may act now: its term has not ended
// and its membership is valid (a deposed leader's interlink actions are
// fenced by this, its etcd writes by StillLeader).
func (l *Leadership) Leads() bool {
	select {
	case <-l.done:
		return false
	default:
	}
	return l.m.Valid()
}

// Resign ends the term (another candidate is elected).
func (l *Leadership) Resign(ctx context.Context) error {
	err := l.resign(ctx)
	l.end()
	l.sess.Orphan()
	return err
}

// Leader names the current leader ("" when none).
func (s *Store) Leader(ctx context.Context) (string, error) {
	r, err := s.kv.Get(ctx, kv.Range{Key: s.prefix + "leader/", Prefix: true, Sort: kv.FirstCreate})
	if err != nil {
		return "", err
	}
	if len(r.KVs) == 0 {
		return "", nil
	}
	return r.KVs[0].Value, nil
}
