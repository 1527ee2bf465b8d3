package array

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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
	// Stop is how long I/O to the batch was held (TRANSITIONING), from the
	// first LUN entering the state to the last leaving it.
	Stop time.Duration
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

// Move transfers the LUNs to node to as one batch. Each LUN goes through
// TRANSITIONING on its old and new owner's groups (SPC-4 5.15.2.4.6: new
// commands get 04/0A), in-flight I/O drains, the LUN is flushed, and the
// new states are published for every group at once; then the change is
// announced. LUNs already on to are left out; ErrNoChange when none is left.
// A flush failure rolls the batch back and is announced as failed.
func (a *Array) Move(ids []uint64, to string, cause Cause) (Change, error) {
	dst := a.Node(to)
	if dst == nil {
		return Change{}, fmt.Errorf("no node %q", to)
	}
	if !dst.Up() {
		return Change{}, fmt.Errorf("node %s is down", to)
	}
	var batch []*LUN
	var from *Node
	for _, id := range ids {
		l := a.LUN(id)
		if l == nil {
			return Change{}, fmt.Errorf("no LUN %d", id)
		}
		if l.Owner() == dst {
			continue
		}
		if from == nil {
			from = l.Owner()
		}
		batch = append(batch, l)
	}
	if len(batch) == 0 {
		return Change{}, fmt.Errorf("LUN %s: %w %s", joinIDs(ids), ErrNoChange, to)
	}
	for i, l := range batch {
		if !l.moveMu.TryLock() {
			for _, m := range batch[:i] {
				m.moveMu.Unlock()
			}
			return Change{}, fmt.Errorf("LUN %d is already moving", l.ID)
		}
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
	start := a.now()
	olds := make([]*aluaSnap, len(batch))
	for i, l := range batch {
		olds[i] = l.alua.Load()
		l.alua.Store(&aluaSnap{owner: olds[i].owner, target: dst, moving: true, status: olds[i].status, gen: olds[i].gen})
	}
	var err error
	for _, l := range batch {
		l.io.Lock() // in-flight commands drain; later ones wait here
		if ferr := l.store.Sync(); ferr != nil && err == nil {
			err = fmt.Errorf("LUN %d: flush: %w", l.ID, ferr)
		}
	}
	for i, l := range batch {
		if err != nil {
			l.alua.Store(olds[i])
		} else {
			st := append([]byte(nil), olds[i].status...)
			code := StatusImplicit
			if cause == CauseSTPG {
				code = StatusExplicit
			}
			st[olds[i].owner.Index], st[dst.Index] = code, code
			l.alua.Store(&aluaSnap{owner: dst, status: st, gen: olds[i].gen + 1})
		}
		l.io.Unlock()
	}
	c.Stop = a.now().Sub(start)
	if err != nil {
		c.Failed, c.Err = true, err
	}
	a.notify(c)
	return c, err
}

// SetNodeUp marks a node up or down. A down node's group is UNAVAILABLE
// for every LUN (SPC-4 5.15.2.4.5); the change is announced for every LUN.
// Moving LUNs off a failed node is the ownership core's decision, not this.
func (a *Array) SetNodeUp(name string, up bool) error {
	n := a.Node(name)
	if n == nil {
		return fmt.Errorf("no node %q", name)
	}
	if n.up.Swap(up) == up {
		return nil
	}
	c := Change{Cause: CauseNodeDown}
	if up {
		c.Cause = CauseNodeUp
	}
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
