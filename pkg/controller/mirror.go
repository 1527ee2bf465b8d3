package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/cache"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/interlink"
)

// The write-cache mirror across processes. Copies go to the partner over
// the interlink, tagged with this incarnation (its join revision) and its
// mirror generation; each generation is recorded in etcd with its holder,
// the partner its copies go to, and a copy goes only to the holder of the
// generation it carries. A link that is lost (or replaced, or a partner
// that changes) may leave copies at the partner that no release will
// reach: every held LUN is destaged, then a new generation is written to
// etcd naming the partner of that moment, and until then no write the
// partner does not see is acknowledged (Settle). A partner no generation
// names (this incarnation's first, or a new one) takes no copy before a
// generation names it. A takeover replays only copies of the
// incarnation's latest generation, and the leader gives the LUNs to its
// holder.
//
// Lock order: the cache's lock (Up, Put and Release run under it), then
// c.mu, then c.vmu.

// mirrorGen is a mirror generation of this incarnation: the revision of
// its void in etcd, and the holder recorded with it ("" before the first,
// or when there was no partner).
type mirrorGen struct {
	Gen    int64
	Holder string
}

// mirrorGen is the generation copies are sent under now.
func (c *Controller) mirrorGen() mirrorGen {
	if g := c.mgen.Load(); g != nil {
		return *g
	}
	return mirrorGen{}
}

// Mirror implements array.Remote.
func (c *Controller) Mirror() cache.Remote { return mirror{c} }

// mirror sends the local cache's copies to the partner over the link.
type mirror struct{ c *Controller }

// Up implements cache.Remote: a partner with a live link that the current
// generation names, and no loss waiting for its void. A linked partner the
// generation does not name (it changed, or none was named yet) needs a
// new generation first.
func (m mirror) Up() bool {
	name, g, l := m.c.checkHolder()
	return l != nil && name == g.Holder && !m.c.unvoided()
}

// checkHolder reads the partner, the current generation and the link to
// the partner, and starts a new generation if the partner has a link and
// the generation does not name it. Run for every write (Up), and as soon
// as a link comes up or a member comes or goes, so the first write to a
// new partner seldom waits for the void.
func (c *Controller) checkHolder() (string, mirrorGen, *link) {
	name := c.partnerName()
	g := c.mirrorGen()
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.links[name]
	if l != nil && name != g.Holder {
		c.newHolderLocked()
	}
	return name, g, l
}

var errNoPartner = errors.New("controller: no mirror partner")

// Put implements cache.Remote.
// The copies go to the holder recorded with the generation they carry,
// whoever the partner is now.
func (m mirror) Put(id uint64, ps []cache.MirrorPage) func() error {
	g := m.c.mirrorGen()
	lk := m.c.linkTo(g.Holder)
	if g.Holder == "" || lk == nil {
		return func() error { return errNoPartner }
	}
	token, inc, gen := m.c.fence.Token(id), m.c.ms.JoinRevision(), g.Gen
	pend := make([]*interlink.Pending, len(ps))
	for i, p := range ps {
		pend[i] = lk.conn.PostMirror(uint32(id), interlink.Mirror{Token: token, Inc: inc, Gen: gen, Offset: p.Idx * m.c.ps,
			Ver: p.Ver, Data: p.Data})
	}
	return func() error {
		ctx, cancel := context.WithTimeout(m.c.ctx, m.c.cc.LeaseTTL)
		defer cancel()
		for _, p := range pend {
			if err := p.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}
}

// Release implements cache.Remote: to the current generation's holder,
// which holds the copies (those sent to an earlier one are void).
func (m mirror) Release(id uint64, ps []cache.MirrorPage) {
	g := m.c.mirrorGen()
	lk := m.c.linkTo(g.Holder)
	if g.Holder == "" || lk == nil {
		return
	}
	token := m.c.fence.Token(id)
	for _, p := range ps {
		lk.conn.PostDrop(uint32(id), interlink.Drop{Token: token, Offset: p.Idx * m.c.ps, Length: m.c.ps, Ver: p.Ver})
	}
}

// Settle implements cache.Remote: every release posted on the link to the
// current generation's holder is answered, or every loss has been voided.
func (m mirror) Settle() error {
	c := m.c
	deadline := time.Now().Add(c.cc.LeaseTTL)
	for {
		c.vmu.Lock()
		seq, voided := c.lossSeq, c.voidedSeq >= c.lossSeq
		c.vmu.Unlock()
		if voided {
			var lk *link
			if h := c.mirrorGen().Holder; h != "" {
				lk = c.linkTo(h)
			}
			if lk == nil {
				return nil // no link and every loss voided
			}
			ctx, cancel := context.WithDeadline(c.ctx, deadline)
			err := lk.conn.Drain(ctx)
			cancel()
			c.vmu.Lock()
			same := c.lossSeq == seq
			c.vmu.Unlock()
			switch {
			case err == nil && same && c.ms.Valid():
				return nil // (a link lost and replaced meanwhile must be voided first)
			case err == nil && same:
				return fmt.Errorf("%w: the lease ran out", cache.ErrNotHeld)
			case errors.Is(err, interlink.ErrFenced), errors.Is(err, interlink.ErrNotOwner):
				return fmt.Errorf("%w: the partner refused a release (it owns the LUN now): %v", cache.ErrNotHeld, err)
			case err != nil:
				time.Sleep(5 * time.Millisecond) // the link's end is being recorded
			}
		}
		c.vmu.Lock()
		for c.voidedSeq < c.lossSeq && time.Now().Before(deadline) && c.ctx.Err() == nil {
			waitCond(c.vcond, deadline)
		}
		c.vmu.Unlock()
		if !time.Now().Before(deadline) || c.ctx.Err() != nil {
			return fmt.Errorf("%w: the partner's copies are neither released nor void", cache.ErrNotHeld)
		}
	}
}

// lostLinkLocked records a loss and starts the voids if they do not run;
// c.mu is held (the lock order is c.mu, then c.vmu).
func (c *Controller) lostLinkLocked() {
	c.vmu.Lock()
	defer c.vmu.Unlock()
	c.lossSeq++
	if !c.voidRunning {
		c.voidRunning = true
		go c.runVoids()
	}
}

// newHolderLocked: copies are to go to a partner the current generation
// does not name, so a new generation must name it first: a loss, unless a
// void is pending already (it records the partner of its own time; if
// that is not this one, the next Up asks again). c.mu is held.
func (c *Controller) newHolderLocked() {
	c.vmu.Lock()
	pending := c.voidedSeq < c.lossSeq
	c.vmu.Unlock()
	if !pending {
		c.lostLinkLocked()
	}
}

// unvoided reports a loss not voided yet.
func (c *Controller) unvoided() bool {
	c.vmu.Lock()
	defer c.vmu.Unlock()
	return c.voidedSeq < c.lossSeq
}

// runVoids voids until every loss recorded is covered: every held LUN
// destaged (its copies are out of reach), then a new generation in etcd
// naming the partner of that moment as its holder.
// A controller that is no member any more stops: it serves nothing, and
// Settle refuses what waits.
func (c *Controller) runVoids() {
	over := c.mirrorGen().Gen
	for {
		c.vmu.Lock()
		if c.voidedSeq >= c.lossSeq || c.ctx.Err() != nil {
			c.voidRunning = false
			c.vcond.Broadcast()
			c.vmu.Unlock()
			return
		}
		target := c.lossSeq
		c.vmu.Unlock()
		if err := c.flushHeld(); err != nil {
			c.log.Warn("destaging single-copy data before the void", "err", err)
			c.sleep(100 * time.Millisecond)
			continue
		}
		holder := c.partnerName()
		gen, err := c.void(holder, over)
		var moved *cluster.GenMoved
		switch {
		case errors.As(err, &moved):
			// A void of this incarnation's applied though it was not
			// answered (it waited on a frozen member, or its answer
			// failed): void again, over it.
			c.log.Info("the mirror generation moved: voiding again", "gen", moved.Found)
			over = moved.Found
		case err == nil:
			over = gen
			if gen > c.mirrorGen().Gen { // (one runVoids at a time)
				c.mgen.Store(&mirrorGen{Gen: gen, Holder: holder})
			}
			c.log.Info("the partner's copies are void", "gen", gen, "holder", holder)
			c.vmu.Lock()
			c.voidedSeq = max(c.voidedSeq, target)
			c.vcond.Broadcast()
			c.vmu.Unlock()
		case errors.Is(err, cluster.ErrStale):
			c.log.Warn("no member: the partner's copies cannot be voided", "err", err)
			c.vmu.Lock()
			c.voidRunning = false
			c.vcond.Broadcast()
			c.vmu.Unlock()
			return
		default:
			c.sleep(100 * time.Millisecond)
		}
	}
}

// void starts a mirror generation over generation over with two voids
// at once and takes the first that applies (at most one can: see
// cluster.VoidMirror). The client sends them to two etcd members, so a
// member that froze does not hold the void, as it did every write of
// this controller's LUNs waiting on it, until the client dropped the
// member (ending the round then, on Bounded's word). The one left on the
// frozen member changes nothing when it lands. A refusal (the
// generation moved, or no member) is answered at once; a void that fails
// otherwise (etcd electing a leader, say) is sent again, up to four in
// all.
func (c *Controller) void(holder string, over int64) (int64, error) {
	ctx, cancel := c.store.Bounded(c.ctx, 2*time.Second)
	defer cancel()
	type answer struct {
		gen int64
		err error
	}
	answers := make(chan answer, 4)
	send := func() {
		go func() {
			gen, err := c.store.VoidMirror(ctx, c.ms, holder, over)
			answers <- answer{gen, err}
		}()
	}
	send()
	send()
	launched, pending, last := 2, 2, error(nil)
	for pending > 0 {
		a := <-answers
		pending--
		var moved *cluster.GenMoved
		if a.err == nil || errors.As(a.err, &moved) || errors.Is(a.err, cluster.ErrStale) {
			return a.gen, a.err
		}
		last = a.err
		if ctx.Err() == nil && launched < 4 {
			send()
			launched++
			pending++
		}
	}
	return 0, last
}

// flushHeld destages every LUN this controller has dirty pages of. One it
// cannot write now (the lease near its deadline, or a record naming
// another owner not installed yet, whose install drops the pages) fails
// the round: no copy is voided while its page is dirty here.
func (c *Controller) flushHeld() error {
	var errs []error
	loc := c.arr.Local().Cache
	for _, l := range c.arr.LUNs {
		if loc.DirtyBytes(l.ID) == 0 {
			continue // (a LUN taken over from it has none: installing the record dropped them)
		}
		if err := loc.Flush(l.ID); err != nil {
			errs = append(errs, fmt.Errorf("LUN %d: %w", l.ID, err))
		}
	}
	return errors.Join(errs...)
}

// waitCond waits on cond (its lock held) until a broadcast or, at the
// latest, shortly after deadline.
func waitCond(cond *sync.Cond, deadline time.Time) {
	t := time.AfterFunc(time.Until(deadline)+time.Millisecond, func() {
		cond.L.Lock()
		cond.Broadcast()
		cond.L.Unlock()
	})
	cond.Wait()
	t.Stop()
}
