package array

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/cache"
)

// Change is one ALUA change made by the array. The device server announces
// it: UA 2A/06 (asymmetric access state changed) on every I_T nexus of
// every listed LUN, or 2A/07 (implicit transition failed) when Failed.
type Change struct {
	LUNs     []uint64
	From, To string // node names; empty for a node up/down change
	Cause    alua.Cause
	Failed   bool
	Err      error
	// Flush is how long the old owner destaged the batch's dirty data
	// while I/O went on (phase 1 of a planned move).
	Flush time.Duration
	// Stop is how long I/O to the batch was held: from asking for the
	// batch's I/O locks (in-flight commands drain) to releasing held
	// commands to the new owner.
	Stop time.Duration
	// Replayed counts pages a takeover replayed from a crashed owner's
	// mirror on the new owner.
	Replayed int
	// Lost lists, for a node crash, the acknowledged data that no mirror
	// holds (only with mirroring off, or a double failure).
	Lost []Loss
}

// Loss is dirty data lost with a crashed node's cache.
type Loss struct {
	LUN    uint64 `json:"lun"`
	Blocks int64  `json:"blocks"` // logical blocks
	Pages  int    `json:"pages"`
	// PageIdx lists the cache pages lost (page size units), for checks.
	PageIdx []int64 `json:"-"`
}

// ErrNoChange is returned when every LUN of a move is already owned by the
// destination.
var ErrNoChange = errors.New("already owned by node")

func joinIDs(ids []uint64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

// OnChange registers f to be called after every ALUA change, in order, from
// the goroutine that made it. Register before serving. A move announces
// its change while it still holds the batch (and keeps crashes waiting),
// so f must not call back into Move, CrashNode or RestartNode.
func (a *Array) OnChange(f func(Change)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.listeners = append(a.listeners, f)
}

func (a *Array) notify(c Change) {
	a.mu.Lock()
	ls := append([]func(Change){}, a.listeners...)
	a.mu.Unlock()
	for _, f := range ls {
		f(c)
	}
}

// Move transfers the LUNs to node to as one batch; every LUN must have
// the same owner. A planned move runs in two phases:
//
//  1. flush: the old owner's cache writes the batch through and destages
//     its dirty data to media while I/O goes on;
//  2. stop: new commands to the batch are held and in-flight ones drain
//     (the LUN I/O locks), the little that is dirty again is destaged,
//     both caches drop the batch's pages, the new owner is published for
//     every group at once, and the held commands are released to it.
//
// Hosts see the hold as latency, not as an error. Only an STPG (explicit
// mode) reports TRANSITIONING (SPC-4 5.15.2.4.6: commands get 04/0A) for
// the duration, as explicit-mode arrays do. The change is then announced.
// LUNs already on to are left out (ErrNoChange when none is left).
//
// Faults during a move: when the old owner has crashed (before the move or
// at any point of it), the move becomes a takeover: the new owner replays
// the mirrored dirty pages, so nothing acknowledged is dropped. When the
// old owner crashed and came back during the move, what it holds since is
// flushed and the mirror is replayed as well. When the new owner goes
// down, the move is abandoned: the LUNs stay where they were and the
// change is announced as failed (2A/07). A flush that fails otherwise
// rolls the batch back, also announced as failed.
func (a *Array) Move(ids []uint64, to string, cause alua.Cause) (Change, error) {
	if a.local != nil {
		return Change{}, ErrClusterMode
	}
	dst := a.Node(to)
	if dst == nil {
		return Change{}, fmt.Errorf("no node %q", to)
	}
	if !dst.Up() {
		return Change{}, fmt.Errorf("node %s is down", to)
	}
	incs := make([]uint64, len(a.Nodes)) // before the owner is read: a crash and restart from here on is seen
	for i, n := range a.Nodes {
		incs[i] = n.Cache.Incarnation()
	}
	batch, from, err := a.batchOf(ids, dst)
	if err != nil {
		return Change{}, err
	}
	defer func() {
		for _, l := range batch {
			l.moveMu.Unlock()
		}
	}()
	c := Change{From: from.Name, To: dst.Name, Cause: cause}
	for _, l := range batch {
		c.LUNs = append(c.LUNs, l.ID)
	}
	pt := MovePoint{LUNs: c.LUNs, From: from.Name, To: dst.Name}
	if !from.Up() {
		err = a.takeover(batch, from, dst, &c, pt)
		return c, err
	}
	inc := incs[from.Index]
	olds := make([]*aluaSnap, len(batch))
	// Under topo: a crash or restart that records its status codes in
	// the snapshot meanwhile is not overwritten.
	a.topo.Lock()
	for i, l := range batch {
		olds[i] = l.alua.Load()
		if cause == alua.CauseSTPG {
			// Both groups go TRANSITIONING at the host's request.
			st := append([]byte(nil), olds[i].status...)
			st[from.Index], st[dst.Index] = alua.StatusExplicit, alua.StatusExplicit
			l.alua.Store(&aluaSnap{owner: from, target: dst, moving: true, status: st, gen: olds[i].gen})
		}
	}
	a.topo.Unlock()
	for _, l := range batch {
		from.Cache.SetWriteThrough(l.ID, true)
		// The new owner's pages of the LUN are stale; it serves none of
		// its I/O until the switch, so they can go before the stop.
		dst.Cache.Invalidate(l.ID)
	}
	start := a.now()
	err = a.flushPhase(batch, from, pt)
	c.Flush = a.now().Sub(start)
	stop := a.now()
	for _, l := range batch {
		l.io.Lock() // in-flight commands drain; later ones are held here
	}
	a.hook(MovePoint{Phase: PhaseHold, LUNs: pt.LUNs, From: pt.From, To: pt.To})
	crashed, err := a.settle(batch, from, dst, inc, err, pt)
	// A crash of dst now waits until the change is announced: a move is
	// never reported done onto a node that is down.
	a.topo.Lock()
	if err == nil && !dst.Up() {
		err = fmt.Errorf("%w: node %s went down", ErrMoveAbandoned, dst.Name)
	}
	if err == nil && crashed {
		c.Replayed, err = a.replayAll(batch, from, dst)
	}
	for i, l := range batch {
		if !crashed {
			from.Cache.SetWriteThrough(l.ID, false)
		}
		// From the current snapshot: it has the status codes a crash or
		// restart of another node set during the move.
		cur := l.alua.Load()
		if err != nil {
			st := cur.status
			if cur.moving {
				// The groups that reported TRANSITIONING return to their
				// states because the move failed: an implicit change
				// (a down group keeps its own).
				st = append([]byte(nil), st...)
				for _, n := range []*Node{from, dst} {
					if n.Up() {
						st[n.Index] = alua.StatusImplicit
					}
				}
			}
			l.alua.Store(&aluaSnap{owner: olds[i].owner, status: st, gen: olds[i].gen})
			continue
		}
		if !crashed {
			for _, n := range a.Nodes {
				n.Cache.DropMirror(l.ID)
			}
		}
		l.alua.Store(cur.switched(from, dst, cause))
	}
	c.Stop = a.now().Sub(stop)
	// Announced before the held commands go: none of them completes on
	// the new owner before its nexus has the unit attention queued.
	c, err = a.finishMove(c, err)
	a.topo.Unlock()
	for _, l := range batch {
		l.io.Unlock()
	}
	if err == nil {
		// The old owner's clean pages are no longer read; drop them
		// before the move ends (and before the LUN can move back).
		for _, l := range batch {
			from.Cache.Invalidate(l.ID)
		}
	}
	return c, err
}

// ErrMoveAbandoned: the destination went down during the move; the LUNs
// stay with their owner.
var ErrMoveAbandoned = errors.New("move abandoned")

// finishMove announces a move's change (failed if err) and returns it.
func (a *Array) finishMove(c Change, err error) (Change, error) {
	if err != nil {
		c.Failed, c.Err = true, err
	}
	a.notify(c)
	return c, err
}

// settle runs the last destage of a held batch and decides how it ends,
// re-checking after every step, since either node may crash (and the old
// owner may come back) at any point: crashed reports that the old owner's
// cache lost its contents since the move began (inc), so the mirror must
// be replayed on dst; err is set when the move cannot complete (dst went
// down, or a flush failed). flushErr is the flush phase's outcome.
func (a *Array) settle(batch []*LUN, from, dst *Node, inc uint64, flushErr error, pt MovePoint) (crashed bool, err error) {
	err = flushErr
	hooked := false
	for {
		if !dst.Up() {
			return crashed, fmt.Errorf("%w: node %s went down", ErrMoveAbandoned, dst.Name)
		}
		if g := from.Cache.Incarnation(); g != inc {
			// The flush so far is void: what was dirty then is in the
			// mirror now, what came since (if it is back) in its cache.
			inc, crashed, err = g, true, nil
		}
		if !from.Up() {
			return true, nil
		}
		if err != nil {
			return crashed, err
		}
		err = a.destagePhase(batch, from, pt, crashed)
		if err != nil || from.Cache.Incarnation() != inc || !from.Up() || !dst.Up() {
			continue
		}
		if !hooked {
			hooked = true
			a.hook(MovePoint{Phase: PhaseSwitch, LUNs: pt.LUNs, From: pt.From, To: pt.To})
			continue
		}
		return crashed, nil
	}
}

// ByOwner splits LUN ids into groups of one current owner each, in the
// order the owners first appear (unknown ids are left out): a decision's
// batch becomes one Move per owner.
func (a *Array) ByOwner(ids []uint64) [][]uint64 {
	var out [][]uint64
	at := map[*Node]int{}
	for _, id := range ids {
		l := a.LUN(id)
		if l == nil {
			continue
		}
		o := l.Owner()
		i, ok := at[o]
		if !ok {
			i = len(out)
			at[o] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], id)
	}
	return out
}

// batchOf resolves and locks a batch: the LUNs not already on dst, all
// with one owner.
func (a *Array) batchOf(ids []uint64, dst *Node) ([]*LUN, *Node, error) {
	var batch []*LUN
	var from *Node
	for _, id := range ids {
		l := a.LUN(id)
		if l == nil {
			return nil, nil, fmt.Errorf("no LUN %d", id)
		}
		if l.Owner() == dst {
			continue
		}
		if from == nil {
			from = l.Owner()
		} else if l.Owner() != from {
			return nil, nil, fmt.Errorf("LUN %d is owned by %s, not %s: a batch has one owner", l.ID, l.Owner().Name, from.Name)
		}
		batch = append(batch, l)
	}
	if len(batch) == 0 {
		return nil, nil, fmt.Errorf("LUN %s: %w %s", joinIDs(ids), ErrNoChange, dst.Name)
	}
	for i, l := range batch {
		if !l.moveMu.TryLock() {
			for _, m := range batch[:i] {
				m.moveMu.Unlock()
			}
			return nil, nil, fmt.Errorf("LUN %d is already moving", l.ID)
		}
	}
	return batch, from, nil
}

// flushPhase destages the batch on the old owner and syncs its media
// while I/O continues (writes go through meanwhile).
func (a *Array) flushPhase(batch []*LUN, from *Node, pt MovePoint) error {
	for _, l := range batch {
		a.hook(MovePoint{Phase: PhaseFlush, LUNs: pt.LUNs, From: pt.From, To: pt.To, LUN: l.ID})
		if err := from.Cache.Flush(l.ID); err != nil {
			return fmt.Errorf("LUN %d: flush: %w", l.ID, err)
		}
	}
	return nil
}

// destagePhase writes what became dirty again before the stop (writes
// that were in flight when write-through began), or, with all, flushes
// every LUN of the batch.
func (a *Array) destagePhase(batch []*LUN, from *Node, pt MovePoint, all bool) error {
	for _, l := range batch {
		a.hook(MovePoint{Phase: PhaseDestage, LUNs: pt.LUNs, From: pt.From, To: pt.To, LUN: l.ID})
		if !all && from.Cache.DirtyBytes(l.ID) == 0 {
			continue
		}
		if err := from.Cache.Flush(l.ID); err != nil {
			return fmt.Errorf("LUN %d: flush: %w", l.ID, err)
		}
	}
	return nil
}

// switched is the snapshot after a move from -> dst: both groups'
// states changed, by the host's STPG (01h) or the array's own doing
// (02h), except a from that is down: it stays UNAVAILABLE, with the
// status its failure recorded.
func (s *aluaSnap) switched(from, dst *Node, cause alua.Cause) *aluaSnap {
	st := append([]byte(nil), s.status...)
	code := alua.StatusImplicit
	if cause == alua.CauseSTPG {
		code = alua.StatusExplicit
	}
	if from.Up() {
		st[from.Index] = code
	}
	st[dst.Index] = code
	return &aluaSnap{owner: dst, status: st, gen: s.gen + 1}
}

// takeover moves LUNs off a crashed owner: the new owner installs the
// mirrored dirty pages (from whichever node holds them) as its own dirty
// pages before it serves; without a partner to mirror them to, it
// destages them in the background. A LUN is taken over only while dst is
// up; if dst goes down part-way, the rest stay on from (their mirror
// copies untouched), and the move fails whole: the next failover moves
// both kinds on.
func (a *Array) takeover(batch []*LUN, from, dst *Node, c *Change, pt MovePoint) error {
	start := a.now()
	for _, l := range batch {
		l.io.Lock() // in-flight commands drain; later ones wait for the switch
	}
	defer func() {
		for _, l := range batch {
			l.io.Unlock()
		}
	}()
	var err error
	for _, l := range batch {
		a.hook(MovePoint{Phase: PhaseTakeover, LUNs: pt.LUNs, From: pt.From, To: pt.To, LUN: l.ID})
		a.topo.Lock()
		if !dst.Up() {
			a.topo.Unlock()
			err = fmt.Errorf("%w: node %s went down", ErrMoveAbandoned, dst.Name)
			break
		}
		n, herr := a.handOver(l, from, dst)
		if herr != nil {
			a.topo.Unlock()
			err = fmt.Errorf("LUN %d: %w", l.ID, herr)
			break
		}
		c.Replayed += n
		s := l.alua.Load()
		l.alua.Store(s.switched(from, dst, c.Cause)) // a host's STPG in the explicit mode: 01h
		a.topo.Unlock()
	}
	c.Stop = a.now().Sub(start)
	// Announced under topo (a crash of dst waits) and before the held
	// commands go. If dst went down part-way, the whole batch failed:
	// the LUNs it took are on a down node now, like any of its own, and
	// the next failover takes them on from its partner's mirror.
	a.topo.Lock()
	if err == nil && !dst.Up() {
		err = fmt.Errorf("%w: node %s went down", ErrMoveAbandoned, dst.Name)
	}
	*c, err = a.finishMove(*c, err)
	a.topo.Unlock()
	return err
}

// replayAll hands a held batch over to dst after its old owner crashed
// during the move (see handOver); topo and the I/O locks are held.
func (a *Array) replayAll(batch []*LUN, from, dst *Node) (int, error) {
	total := 0
	for _, l := range batch {
		n, err := a.handOver(l, from, dst)
		if err != nil {
			return total, fmt.Errorf("LUN %d: %w", l.ID, err)
		}
		total += n
	}
	return total, nil
}

// handOver moves a LUN's data from a crashed owner to dst, with I/O to it
// held: if the old owner is back (a restart replayed the mirror onto it,
// and it may have taken writes since), its cache is flushed first; then
// what only the mirror holds is replayed on dst; then the old owner's
// pages are dropped, so none of them can be destaged over dst's newer
// data later. The caller holds topo (dst is up) and the LUN's I/O lock.
func (a *Array) handOver(l *LUN, from, dst *Node) (int, error) {
	l.replayMu.Lock()
	defer l.replayMu.Unlock()
	if from.Up() {
		if err := from.Cache.Flush(l.ID); err != nil {
			return 0, err
		}
	}
	dst.Cache.Invalidate(l.ID)
	n, err := a.replay(l, dst)
	if err != nil {
		return n, err
	}
	from.Cache.Invalidate(l.ID)
	return n, nil
}

// replay installs the newest mirrored copies of the LUN's dirty pages, from
// every node that is up, as dirty pages of dst's cache (which mirrors them
// on to its own partner), and destages them in the background when dst has
// no partner. The caller holds the LUN's I/O lock or keeps its I/O away.
func (a *Array) replay(l *LUN, dst *Node) (int, error) {
	var pages []cache.MirrorPage
	for _, n := range a.Nodes {
		if n.Up() && n != dst {
			pages = append(pages, n.Cache.TakeMirror(l.ID)...)
		}
	}
	pages = append(pages, dst.Cache.TakeMirror(l.ID)...)
	if err := dst.Cache.Install(l.ID, newest(pages)); err != nil {
		a.logf("LUN %d: replaying the mirror on %s: %v", l.ID, dst.Name, err)
		return 0, err
	}
	if len(pages) > 0 && a.partner(dst) == nil {
		a.destageAsync(dst, []uint64{l.ID})
	}
	return len(pages), nil
}

// newest keeps the highest version of each page.
func newest(ps []cache.MirrorPage) []cache.MirrorPage {
	best := map[int64]cache.MirrorPage{}
	for _, p := range ps {
		if b, ok := best[p.Idx]; !ok || p.Ver > b.Ver {
			best[p.Idx] = p
		}
	}
	out := make([]cache.MirrorPage, 0, len(best))
	for _, p := range best {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Idx < out[j].Idx })
	return out
}

// SetNodeUp crashes (up false) or restarts (up true) a node; see
// CrashNode and RestartNode.
func (a *Array) SetNodeUp(name string, up bool) error {
	var err error
	if up {
		err = a.RestartNode(name)
	} else {
		_, err = a.CrashNode(name)
	}
	return err
}

// CrashNode fails a node as a power loss would: its cache (dirty pages
// included) and the mirror it held are lost, and its group is UNAVAILABLE
// (SPC-4 5.15.2.4.5) for every LUN. Commands in flight to it fail (its
// cache refuses them). Its LUNs report TRANSITIONING on the other groups
// (commands get 04/0A) until a takeover moves them; moving them is the
// ownership core's decision, not this. It may happen at any point of a
// move, which then adapts (see Move). Nodes that mirrored to it destage
// their dirty data, which no longer has a second copy. The returned change
// (also announced) lists what no mirror holds.
func (a *Array) CrashNode(name string) (Change, error) {
	if a.local != nil {
		return Change{}, ErrClusterMode
	}
	n := a.Node(name)
	if n == nil {
		return Change{}, fmt.Errorf("no node %q", name)
	}
	// topo is held until the loss is counted: no move or takeover
	// switches an owner, or takes mirror copies, in between.
	a.topo.Lock()
	if !n.Up() {
		a.topo.Unlock()
		return Change{}, fmt.Errorf("node %s is already down", name)
	}
	n.up.Store(false)
	a.markImplicit(n)
	lost, held := n.Cache.CrashMirror()
	// The mirror copies it held for LUNs whose owner is down too (their
	// takeover not done yet) were the last copies.
	for _, d := range held {
		if l := a.LUN(d.LUN); l != nil && !l.Owner().Up() {
			lost = append(lost, d)
		}
	}
	c := Change{Cause: alua.CauseNodeDown, From: name, Lost: a.unmirrored(lost)}
	a.topo.Unlock()
	for _, l := range a.LUNs {
		c.LUNs = append(c.LUNs, l.ID)
	}
	a.notify(c)
	for _, m := range a.Nodes {
		if m.Up() {
			a.destageAsync(m, nil)
		}
	}
	return c, nil
}

// destageAsync writes a node's dirty data (of the listed LUNs, or all)
// to media in the background: data that has lost its mirror copy. New
// writes meanwhile go through, since the node has no partner.
func (a *Array) destageAsync(n *Node, ids []uint64) {
	a.bg.Add(1)
	run := a.opt.Background
	if run == nil {
		run = func(f func()) { go f() }
	}
	run(func() {
		defer a.bg.Done()
		var err error
		if ids == nil {
			err = n.Cache.FlushAll()
		}
		for _, id := range ids {
			if err == nil {
				err = n.Cache.Flush(id)
			}
		}
		if err != nil && !errors.Is(err, cache.ErrDown) {
			a.logf("node %s: destaging single-copy data: %v", n.Name, err)
		}
	})
}

// unmirrored counts, per LUN, the crashed cache's dirty pages that no up
// node's mirror holds at that version or newer.
func (a *Array) unmirrored(lost []cache.DirtyPage) []Loss {
	sort.Slice(lost, func(i, j int) bool {
		if lost[i].LUN != lost[j].LUN {
			return lost[i].LUN < lost[j].LUN
		}
		return lost[i].Idx < lost[j].Idx
	})
	var out []Loss
	for _, d := range lost {
		held := false
		for _, m := range a.Nodes {
			if m.Up() && m.Cache.MirrorHas(d.LUN, d.Idx, d.Ver) {
				held = true
				break
			}
		}
		if held {
			continue
		}
		if len(out) == 0 || out[len(out)-1].LUN != d.LUN {
			out = append(out, Loss{LUN: d.LUN})
		}
		l := a.LUN(d.LUN)
		out[len(out)-1].Pages++
		out[len(out)-1].PageIdx = append(out[len(out)-1].PageIdx, d.Idx)
		out[len(out)-1].Blocks += int64(a.Nodes[0].Cache.Config().PageSize / l.BlockSize)
	}
	return out
}

// markImplicit records status code 02h (altered by implicit asymmetric
// access behaviour, SPC-4 6.36) on the groups whose state changed because
// node n went down or came back: n's own group for every LUN (UNAVAILABLE,
// or back from it), and every group of the LUNs n owns, which report
// TRANSITIONING while their owner is down and their usual states again
// when it is back. The caller holds topo and has changed n's up state.
func (a *Array) markImplicit(n *Node) {
	for _, l := range a.LUNs {
		s := l.alua.Load()
		st := append([]byte(nil), s.status...)
		st[n.Index] = alua.StatusImplicit
		if s.owner == n {
			for i := range st {
				st[i] = alua.StatusImplicit
			}
		}
		l.alua.Store(&aluaSnap{owner: s.owner, target: s.target, moving: s.moving, status: st, gen: s.gen})
	}
}

// RestartNode brings a crashed node back with an empty cache. LUNs it
// still owns (no takeover moved them while it was down, or one is under
// way) first get their mirrored dirty pages back from the partner's
// mirror, before the node serves, so the restart serves every
// acknowledged write. It owns nothing else until the ownership core fails
// its LUNs back.
func (a *Array) RestartNode(name string) error {
	if a.local != nil {
		return ErrClusterMode
	}
	n := a.Node(name)
	if n == nil {
		return fmt.Errorf("no node %q", name)
	}
	if n.Up() {
		return nil
	}
	n.Cache.Restart()
	for _, l := range a.LUNs {
		l.replayMu.Lock()
		if l.Owner() == n {
			// Also for a LUN in a move: the move then finds its old
			// owner back, flushes it and replays what is left.
			if _, err := a.replay(l, n); err != nil {
				a.logf("node %s: LUN %d: %v", n.Name, l.ID, err)
			}
		}
		l.replayMu.Unlock()
	}
	a.topo.Lock()
	n.up.Store(true)
	a.markImplicit(n)
	a.topo.Unlock()
	c := Change{Cause: alua.CauseNodeUp, To: name}
	for _, l := range a.LUNs {
		c.LUNs = append(c.LUNs, l.ID)
	}
	a.notify(c)
	return nil
}

// ErrBadRequest: an STPG names an unknown group, a state a host may not
// ask for, two groups to be active/optimized, or a group that is down.
var ErrBadRequest = errors.New("invalid target port group request")

// SetGroups honours an STPG the way the explicit baseline does: ownership
// moves at once to the group asked to be active/optimized (or, when the
// owner's group is asked to step down, to the first other group that is
// up), flushing before I/O is served again. It reports whether ownership
// changed. A move that fails is rolled back and returned as an error.
func (a *Array) SetGroups(lun uint64, reqs []alua.GroupRequest) (bool, error) {
	l := a.LUN(lun)
	if l == nil {
		return false, fmt.Errorf("no LUN %d", lun)
	}
	owner := l.Owner()
	var to *Node
	demote := false
	for _, r := range reqs {
		g := a.NodeByGroup(r.Group)
		if g == nil {
			return false, fmt.Errorf("%w: no group %d", ErrBadRequest, r.Group)
		}
		switch r.State {
		case alua.ActiveOptimized:
			if to != nil && to != g || !g.Up() {
				return false, fmt.Errorf("%w: group %d cannot be the only active/optimized one", ErrBadRequest, r.Group)
			}
			to = g
		case alua.ActiveNonOptimized, alua.Standby:
			demote = demote || g == owner
		default: // a host may not make a node unavailable, offline or transitioning
			return false, fmt.Errorf("%w: state %s", ErrBadRequest, r.State)
		}
	}
	if to == nil && demote {
		for _, g := range a.Nodes {
			if g != owner && g.Up() {
				to = g
				break
			}
		}
		if to == nil {
			return false, fmt.Errorf("%w: no other group is up", ErrBadRequest)
		}
	}
	if to == nil || to == owner {
		return false, nil
	}
	if _, err := a.Move([]uint64{lun}, to.Name, alua.CauseSTPG); err != nil {
		if errors.Is(err, ErrNoChange) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
