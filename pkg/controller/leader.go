package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/interlink"
)

// The leader's own decisions (ownership.DecideRecords: takeovers of a
// gone or restarted owner's records, a move left half done, the failback
// when the core does not run) are made from etcd's table and membership;
// the leader carries each out as a write conditioned on the term
// (StillLeader) and the record's revision, so a deposed leader changes
// nothing. A takeover from a gone owner waits for its fence (package
// fence). The core's own decisions are in plane.go.

// testHook, when set (tests), is called by the leader at the points of a
// move: "target-set" once the record names the target, "flushed" once the
// old owner acknowledged the flush.
var testHook atomic.Pointer[func(point string, c *Controller, lun uint64)]

// testHold, when set (tests), makes the leader decide nothing: a leader
// slow to act.
var testHold atomic.Bool

func hook(point string, c *Controller, lun uint64) {
	if f := testHook.Load(); f != nil {
		(*f)(point, c, lun)
	}
}

// leaderLoop campaigns while the controller runs and leads each term won.
func (c *Controller) leaderLoop() {
	defer c.wg.Done()
	for c.ctx.Err() == nil {
		l, err := c.store.Campaign(c.ctx, c.ms)
		if err != nil {
			c.sleep(200 * time.Millisecond)
			continue
		}
		c.log.Info("elected leader")
		c.lead(l)
		if c.ctx.Err() == nil {
			c.log.Warn("the leader's term ended")
		}
	}
}

func (c *Controller) lead(l *cluster.Leadership) {
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.Resign(ctx)
		cancel()
	}()
	c.term.Store(l)
	defer c.term.CompareAndSwap(l, nil)
	if c.coreOn() {
		if err := c.startCore(l); err != nil {
			c.log.Error("the ownership core did not start: membership's rules alone this term", "err", err)
		} else {
			defer c.stopCore()
		}
	}
	c.termStart = time.Now()
	since := map[string]time.Time{} // when the leader first saw each member, this time round
	t := time.NewTicker(c.cc.LeaseTTL / 4)
	defer t.Stop()
	for {
		if !l.Leads() {
			return
		}
		c.decide(l, since)
		select {
		case <-c.ctx.Done():
			return
		case <-l.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// decide makes one round of decisions.
func (c *Controller) decide(l *cluster.Leadership, since map[string]time.Time) {
	if testHold.Load() || c.stopping.Load() {
		return
	}
	// A member dropped mid-round ends the round: a read already sent to
	// it would hold every decision for the whole bound.
	ctx, cancel := c.store.Bounded(c.ctx, 2*c.cc.LeaseTTL)
	defer cancel()
	members, mrev, err := c.store.Members(ctx)
	if err != nil {
		return
	}
	owners, _, err := c.store.Owners(ctx)
	if err != nil {
		return
	}
	// After the members: a gone incarnation records no generation more.
	holders, err := c.store.Holders(ctx, members)
	if err != nil {
		return
	}
	now := time.Now()
	for n := range since {
		if _, ok := members[n]; !ok {
			delete(since, n)
		}
	}
	for n := range members {
		if _, ok := since[n]; !ok {
			since[n] = now
		}
	}
	c.nodeStates(members, mrev, owners)
	c.reconcileCore(owners)
	// Times as milliseconds since the term began, on the monotonic clock
	// (a wall clock stepped by NTP or a VM's resume must not cut the
	// start grace short or hold a failback).
	ms := func(t time.Time) int64 { return t.Sub(c.termStart).Milliseconds() }
	v := ownership.RecordsView{Members: map[string]int64{}, Now: ms(now), TermStart: 0,
		MemberSince: map[string]int64{}, StartGrace: c.startGrace().Milliseconds(),
		FailbackAfter: c.cc.FailbackAfter.Milliseconds(), BackoffUntil: map[uint64]int64{}, Core: c.core.Load() != nil,
		Reached: map[string]bool{}, Holders: holders}
	for _, n := range c.o.Config.Nodes {
		v.Nodes = append(v.Nodes, n.Name)
		v.Reached[n.Name] = n.Name == c.node || c.linkTo(n.Name) != nil
	}
	for n, m := range members {
		v.Members[n] = m.Joined
		v.MemberSince[n] = ms(since[n])
	}
	read := map[uint64]cluster.Owned{}
	for _, lc := range c.o.Config.LUNs {
		o, ok := owners[lc.ID]
		if !ok {
			continue
		}
		read[lc.ID] = o
		if b := c.backoffOf(lc.ID); !b.IsZero() {
			v.BackoffUntil[lc.ID] = ms(b)
		}
		v.Records = append(v.Records, ownership.RecordView{LUN: o.LUN, Owner: o.Owner, To: o.To, Cause: alua.Cause(o.Cause),
			Rev: o.Rev, Fresh: o.Fresh, Preferred: lc.Preferred, Moving: c.moving(lc.ID)})
	}
	fenced := map[string]error{} // this round's fences, by node
	for _, a := range ownership.DecideRecords(v) {
		o := read[a.Record.LUN]
		if !l.Leads() || c.moving(o.LUN) {
			continue
		}
		c.carryOut(ctx, l, a, o, fenced)
	}
}

// carryOut writes one of the leader's decisions about a record.
func (c *Controller) carryOut(ctx context.Context, l *cluster.Leadership, a ownership.RecordAction, o cluster.Owned,
	fenced map[string]error) {
	switch a.Kind {
	case ownership.RecordServe:
		c.change(ctx, o, cluster.Record{LUN: o.LUN, Owner: o.Owner, Cause: o.Cause}, l.StillLeader(),
			c.store.MemberSince(o.Owner, o.Rev))
	case ownership.RecordTakeover:
		rec := cluster.Record{LUN: o.LUN, Owner: a.To, Cause: string(alua.CauseFailover), Replay: a.Replay}
		if !a.OwnerGone {
			c.change(ctx, o, rec, l.StillLeader(), c.store.MemberSince(o.Owner, o.Rev))
			return
		}
		if a.FenceFirst {
			// Its lease ran out, but it may be paused or stuck with a
			// write it checked in time: fenced first (asked once per node
			// and round; the fence runs in the background).
			if _, done := fenced[o.Owner]; !done {
				fenced[o.Owner] = c.fenced(o.Owner)
			}
			if fenced[o.Owner] != nil {
				return // it waits for the fence
			}
		}
		c.change(ctx, o, rec, c.store.MemberGone(o.Owner), c.store.IsFenced(o.Owner), l.StillLeader())
	case ownership.RecordRollback:
		c.rollback(ctx, l, o, a.Joined)
	case ownership.RecordHandOver:
		c.handOver(ctx, l, o, a.Joined)
	case ownership.RecordFailback:
		moving, err := c.change(ctx, o, cluster.Record{LUN: o.LUN, Owner: o.Owner, To: a.To,
			Cause: string(alua.CauseFailback)}, l.StillLeader())
		if err == nil {
			hook("target-set", c, o.LUN)
			c.handOver(ctx, l, moving, a.Joined)
		}
	}
}

// backoffOf is when a LUN's membership failback may be tried again.
func (c *Controller) backoffOf(lun uint64) time.Time {
	c.busyMu.Lock()
	defer c.busyMu.Unlock()
	return c.backoff[lun]
}

// startGrace is how long a leader waits for a controller that never
// served before taking its LUNs over.
func (c *Controller) startGrace() time.Duration { return 2*c.cc.LeaseTTL + c.cc.FailbackAfter }

// rollback ends a move without its hand-over: the owner keeps the LUN,
// and no failback of it is tried for a while.
func (c *Controller) rollback(ctx context.Context, l *cluster.Leadership, o cluster.Owned, joined int64) {
	c.busyMu.Lock()
	c.backoff[o.LUN] = time.Now().Add(4 * c.cc.LeaseTTL)
	c.busyMu.Unlock()
	c.change(ctx, o, cluster.Record{LUN: o.LUN, Owner: o.Owner, Cause: string(alua.CauseRollback)}, l.StillLeader(),
		c.store.MemberIs(o.Owner, joined))
}

// handOver asks the owner of a record with a target to flush, then
// completes the move, or rolls it back without the acknowledgement. Both
// writes hold only while the owner is the member the leader read (joined):
// a restarted owner's record is the takeover's.
// It returns why the old owner did not hand the LUN over (nil: it did).
func (c *Controller) handOver(ctx context.Context, l *cluster.Leadership, o cluster.Owned, joined int64) error {
	cause := o.Cause
	if cause == "" {
		cause = string(alua.CauseManual)
	}
	err := c.askFlush(ctx, o)
	if err == nil {
		hook("flushed", c, o.LUN)
		c.change(ctx, o, cluster.Record{LUN: o.LUN, Owner: o.To, Cause: cause}, l.StillLeader(), c.store.MemberIs(o.Owner, joined))
		return nil
	}
	c.log.Warn("the old owner did not hand the LUN over: rolled back", "lun", o.LUN, "owner", o.Owner, "to", o.To, "err", err)
	c.rollback(ctx, l, o, joined)
	return err
}

// askFlush runs the old owner's hand-off step, here or over the link.
func (c *Controller) askFlush(ctx context.Context, o cluster.Owned) error {
	fctx, cancel := context.WithTimeout(ctx, 2*c.cc.LeaseTTL)
	defer cancel()
	if o.Owner == c.node {
		return c.handOff(fctx, o.LUN, o.Rev)
	}
	lk := c.linkTo(o.Owner)
	if lk == nil {
		return errors.New("no interlink to the owner")
	}
	return lk.conn.Flush(fctx, uint32(o.LUN), interlink.Flush{Token: o.Rev})
}

// change writes a record and logs the outcome.
func (c *Controller) change(ctx context.Context, prev cluster.Owned, next cluster.Record, conds ...cluster.Cond) (cluster.Owned, error) {
	o, err := c.store.Change(ctx, prev, next, conds...)
	if err != nil {
		if !errors.Is(err, cluster.ErrStale) {
			c.log.Warn("an ownership change failed", "lun", prev.LUN, "owner", next.Owner, "to", next.To, "err", err)
		}
		return o, err
	}
	c.log.Info("ownership record", "lun", o.LUN, "owner", o.Owner, "to", o.To, "cause", o.Cause, "rev", o.Rev)
	return o, nil
}
