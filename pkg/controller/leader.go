package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/interlink"
)

// The leader's own decisions, made from etcd's table and membership (the
// core's, when it runs, are in plane.go):
//
//   - a LUN whose owner is no member is taken over by the member that
//     holds the owner's mirror copies (the next one after it in
//     configuration order), once the owner's last process is fenced
//     (package fence), written under MemberGone(owner) and
//     IsFenced(owner): the new owner
//     replays the copies of the owner's current mirror generation; at the
//     array's first start (a record nobody served) only after a grace of
//     two lease TTLs and failback_after, for the owner's controller to
//     start, as a real array waits for its partner at power-on;
//   - a LUN whose owner restarted since its record was written is taken
//     over the same way (under MemberSince: the restarted owner never
//     serves a record of its earlier incarnation), unless nobody ever
//     served it (the array's first start: the record is rewritten);
//   - without the core: a LUN away from its preferred owner (not by an
//     operator's move), which has been a member for failback_after,
//     moves back in three steps: the record names the
//     preferred owner as the target (the old owner stops serving), the
//     old owner flushes and acknowledges, the record names the new owner;
//     without the acknowledgement the move is rolled back, and that LUN's
//     failback waits four lease TTLs; it is not tried without a link to
//     the owner;
//   - a move a previous leader left half done (the target set) is retried
//     from the flush, or taken over if its owner is gone.
//
// Every write is conditioned on the term (StillLeader) and the record's
// revision, so a deposed leader changes nothing.

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
	ctx, cancel := c.cli.Bounded(c.ctx, 2*c.cc.LeaseTTL)
	defer cancel()
	members, mrev, err := c.store.Members(ctx)
	if err != nil {
		return
	}
	owners, _, err := c.store.Owners(ctx)
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
	core := c.core.Load() != nil
	fenced := map[string]error{} // this round's fences, by node
	for _, lc := range c.o.Config.LUNs {
		o, ok := owners[lc.ID]
		if !ok || !l.Leads() || c.moving(lc.ID) {
			continue
		}
		m, alive := members[o.Owner]
		_, prefUp := members[lc.Preferred]
		switch {
		case alive && m.Joined > o.Rev && o.Fresh:
			// The array's first start: nobody has served it, nothing to replay.
			c.change(ctx, o, cluster.Record{LUN: o.LUN, Owner: o.Owner, Cause: o.Cause}, l.StillLeader(),
				c.store.MemberSince(o.Owner, o.Rev))
		case alive && m.Joined > o.Rev:
			// The owner restarted since the record was written: its cache
			// is gone, its partner holds the copies. The partner takes the
			// LUN over (and fails it back later); with no partner left the
			// owner serves it as it is on the media.
			to := c.holder(o.Owner, members)
			rec := cluster.Record{LUN: o.LUN, Owner: to, Cause: string(alua.CauseFailover), Replay: true}
			if to == "" {
				rec = cluster.Record{LUN: o.LUN, Owner: o.Owner, Cause: string(alua.CauseFailover)}
			}
			c.change(ctx, o, rec, l.StillLeader(), c.store.MemberSince(o.Owner, o.Rev))
		case !alive && o.Fresh && now.Sub(c.termStart) < c.startGrace():
			// The array's first start: the owner's controller may still be
			// starting (a real array waits for its partner at power-on).
			continue
		case !alive:
			// Taken over by the node that holds the mirror copies: the
			// next member after the owner, as the owner chose its partner.
			to := c.holder(o.Owner, members)
			if to == "" {
				continue // nobody to take it: it waits
			}
			// Its lease ran out, but it may be paused or stuck with a
			// write it checked in time: fenced first (asked once per node
			// and round; the fence runs in the background).
			if _, done := fenced[o.Owner]; !done {
				fenced[o.Owner] = c.fenced(o.Owner)
			}
			if fenced[o.Owner] != nil {
				continue // it waits for the fence
			}
			c.change(ctx, o, cluster.Record{LUN: o.LUN, Owner: to, Cause: string(alua.CauseFailover), Replay: true},
				c.store.MemberGone(o.Owner), c.store.IsFenced(o.Owner), l.StillLeader())
		case o.To != "":
			if _, up := members[o.To]; !up {
				c.rollback(ctx, l, o, m.Joined)
				continue
			}
			c.handOver(ctx, l, o, m.Joined)
		case !core && o.Cause != string(alua.CauseManual) && o.Owner != lc.Preferred && prefUp &&
			now.Sub(since[lc.Preferred]) >= c.cc.FailbackAfter &&
			now.After(c.backoffOf(o.LUN)) && (o.Owner == c.node || c.linkTo(o.Owner) != nil):
			moving, err := c.change(ctx, o, cluster.Record{LUN: o.LUN, Owner: o.Owner, To: lc.Preferred,
				Cause: string(alua.CauseFailback)}, l.StillLeader())
			if err == nil {
				hook("target-set", c, o.LUN)
				c.handOver(ctx, l, moving, m.Joined)
			}
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

// holder is the member that holds owner's mirror copies: the first
// member after it in configuration order ("" when none).
func (c *Controller) holder(owner string, members map[string]cluster.Info) string {
	nodes := c.o.Config.Nodes
	at := -1
	for i, n := range nodes {
		if n.Name == owner {
			at = i
		}
	}
	for i := 1; i <= len(nodes); i++ {
		n := nodes[(at+i+len(nodes))%len(nodes)].Name
		if _, up := members[n]; up && n != owner {
			return n
		}
	}
	return ""
}

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
