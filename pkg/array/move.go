package array

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/cache"
)

// Cause says why ownership or an access state changed.
type Cause string

// Causes of a change.
const (
	CauseManual   Cause = "manual"   // an operator's move (aluad move)
	CauseSTPG     Cause = "stpg"     // a host's SET TARGET PORT GROUPS (explicit mode)
	CauseFailover Cause = "failover" // the owner node failed
	CauseFailback Cause = "failback" // back to the preferred owner after recovery
	CauseBalance  Cause = "balance"  // load balance
	CauseShipping Cause = "shipping" // most I/O arrives at a non-owner node
	CauseNodeDown Cause = "node-down"
	CauseNodeUp   Cause = "node-up"
)

// Change is one ALUA change made by the array. The device server announces
// it: UA 2A/06 (asymmetric access state changed) on every I_T nexus of
// every listed LUN, or 2A/07 (implicit transition failed) when Failed.
type Change struct {
	LUNs     []uint64
	From, To string // node names; empty for a node up/down change
	Cause    Cause
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
// the goroutine that made it. Register before serving.
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
// the duration, as explicit-mode arrays do. When the old owner has
// crashed, the move is a takeover: the new owner replays the crashed
// owner's mirrored dirty pages. The change is then announced. LUNs already
// on to are left out (ErrNoChange when none is left). A flush failure
// rolls the batch back and is announced as failed.
func (a *Array) Move(ids []uint64, to string, cause Cause) (Change, error) {
	dst := a.Node(to)
	if dst == nil {
		return Change{}, fmt.Errorf("no node %q", to)
	}
	if !dst.Up() {
		return Change{}, fmt.Errorf("node %s is down", to)
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
	if !from.Up() {
		c.Stop, c.Replayed = a.takeover(batch, dst)
		a.notify(c)
		return c, nil
	}
	olds := make([]*aluaSnap, len(batch))
	for i, l := range batch {
		olds[i] = l.alua.Load()
		if cause == CauseSTPG {
			l.alua.Store(&aluaSnap{owner: from, target: dst, moving: true, status: olds[i].status, gen: olds[i].gen})
		}
		from.Cache.SetWriteThrough(l.ID, true)
		// The new owner's pages of the LUN are stale; it serves none of
		// its I/O until the switch, so they can go before the stop.
		dst.Cache.Invalidate(l.ID)
	}
	start := a.now()
	err = a.flushPhase(batch, from)
	c.Flush = a.now().Sub(start)
	stop := a.now()
	for _, l := range batch {
		l.io.Lock() // in-flight commands drain; later ones are held here
	}
	if err == nil {
		err = a.destagePhase(batch, from)
	}
	for i, l := range batch {
		from.Cache.SetWriteThrough(l.ID, false)
		if err != nil {
			l.alua.Store(olds[i])
			continue
		}
		for _, n := range a.Nodes {
			n.Cache.DropMirror(l.ID)
		}
		l.alua.Store(olds[i].switched(from, dst, cause))
	}
	for _, l := range batch {
		l.io.Unlock()
	}
	c.Stop = a.now().Sub(stop)
	if err == nil {
		// The old owner's clean pages are no longer read; drop them
		// before the move ends (and before the LUN can move back).
		for _, l := range batch {
			from.Cache.Invalidate(l.ID)
		}
	}
	if err != nil {
		c.Failed, c.Err = true, err
	}
	a.notify(c)
	return c, err
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
func (a *Array) flushPhase(batch []*LUN, from *Node) error {
	for _, l := range batch {
		if err := from.Cache.Flush(l.ID); err != nil {
			return fmt.Errorf("LUN %d: flush: %w", l.ID, err)
		}
	}
	return nil
}

// destagePhase writes what became dirty again before the stop (writes
// that were in flight when write-through began).
func (a *Array) destagePhase(batch []*LUN, from *Node) error {
	for _, l := range batch {
		if from.Cache.DirtyBytes(l.ID) == 0 {
			continue
		}
		if err := from.Cache.Flush(l.ID); err != nil {
			return fmt.Errorf("LUN %d: flush: %w", l.ID, err)
		}
	}
	return nil
}

// switched is the snapshot after a move from -> dst.
func (s *aluaSnap) switched(from, dst *Node, cause Cause) *aluaSnap {
	st := append([]byte(nil), s.status...)
	code := StatusImplicit
	if cause == CauseSTPG {
		code = StatusExplicit
	}
	st[from.Index], st[dst.Index] = code, code
	return &aluaSnap{owner: dst, status: st, gen: s.gen + 1}
}

// takeover moves LUNs off a crashed owner: the new owner installs the
// mirrored dirty pages (from whichever node holds them) as its own dirty
// pages before it serves; without a partner to mirror them to, it
// destages them in the background.
func (a *Array) takeover(batch []*LUN, dst *Node) (time.Duration, int) {
	start := a.now()
	replayed := 0
	var single []uint64
	defer func() {
		if len(single) > 0 {
			a.destageAsync(dst, single)
		}
	}()
	for _, l := range batch {
		l.io.Lock()
		var pages []cache.MirrorPage
		for _, n := range a.Nodes {
			if n.Up() {
				pages = append(pages, n.Cache.TakeMirror(l.ID)...)
			}
		}
		dst.Cache.Invalidate(l.ID)
		if err := dst.Cache.Install(l.ID, newest(pages)); err != nil {
			a.logf("LUN %d: replaying the mirror on %s: %v", l.ID, dst.Name, err)
		}
		replayed += len(pages)
		if len(pages) > 0 && a.partner(dst) == nil {
			single = append(single, l.ID)
		}
		s := l.alua.Load()
		l.alua.Store(s.switched(s.owner, dst, CauseFailover))
		l.io.Unlock()
	}
	return a.now().Sub(start), replayed
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

// CrashNode fails a node as a power loss would: in-flight commands on its
// LUNs drain, its cache (dirty pages included) and the mirror it held are
// lost, and its group is UNAVAILABLE (SPC-4 5.15.2.4.5) for every LUN.
// Its LUNs report TRANSITIONING on the other groups (commands get 04/0A)
// until a takeover moves them; moving them is the ownership core's
// decision, not this. Nodes that mirrored to it destage their dirty data,
// which no longer has a second copy. The returned change (also announced)
// lists what no mirror holds.
func (a *Array) CrashNode(name string) (Change, error) {
	n := a.Node(name)
	if n == nil {
		return Change{}, fmt.Errorf("no node %q", name)
	}
	if !n.Up() {
		return Change{}, fmt.Errorf("node %s is already down", name)
	}
	var owned []*LUN
	for _, l := range a.LUNs {
		if l.Owner() == n {
			owned = append(owned, l)
			l.io.Lock()
		}
	}
	n.up.Store(false)
	lost := n.Cache.Crash()
	for _, l := range owned {
		l.io.Unlock()
	}
	c := Change{Cause: CauseNodeDown, From: name, Lost: a.unmirrored(lost)}
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
	go func() {
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
	}()
}

// unmirrored counts, per LUN, the crashed cache's dirty pages that no up
// node's mirror holds at that version or newer.
func (a *Array) unmirrored(lost []cache.DirtyPage) []Loss {
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
		out[len(out)-1].Blocks += int64(a.Nodes[0].Cache.Config().PageSize / l.BlockSize)
	}
	return out
}

// RestartNode brings a crashed node back with an empty cache. It owns
// nothing until the ownership core fails its LUNs back.
func (a *Array) RestartNode(name string) error {
	n := a.Node(name)
	if n == nil {
		return fmt.Errorf("no node %q", name)
	}
	if n.Up() {
		return nil
	}
	n.Cache.Restart()
	n.up.Store(true)
	c := Change{Cause: CauseNodeUp, To: name}
	for _, l := range a.LUNs {
		c.LUNs = append(c.LUNs, l.ID)
	}
	a.notify(c)
	return nil
}

// GroupRequest is one state a host asks for a target port group with SET
// TARGET PORT GROUPS (explicit mode only).
type GroupRequest struct {
	Group uint16
	State AccessState
}

// ErrBadRequest: an STPG names an unknown group, a state a host may not
// ask for, two groups to be active/optimized, or a group that is down.
var ErrBadRequest = errors.New("invalid target port group request")

// SetGroups honours an STPG the way the explicit baseline does: ownership
// moves at once to the group asked to be active/optimized (or, when the
// owner's group is asked to step down, to the first other group that is
// up), flushing before I/O is served again. It reports whether ownership
// changed. A move that fails is rolled back and returned as an error.
func (a *Array) SetGroups(lun uint64, reqs []GroupRequest) (bool, error) {
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
		case ActiveOptimized:
			if to != nil && to != g || !g.Up() {
				return false, fmt.Errorf("%w: group %d cannot be the only active/optimized one", ErrBadRequest, r.Group)
			}
			to = g
		case ActiveNonOptimized, Standby:
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
	if _, err := a.Move([]uint64{lun}, to.Name, CauseSTPG); err != nil {
		if errors.Is(err, ErrNoChange) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
