package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/interlink"
)

// The ownership core runs on the elected leader (unless the ownership
// section turns it off: then the leader's rules are membership's alone).
// Every controller observes its own hosts (logins, logouts, RTPGs, I/O and
// exchange intervals) and reports them over the interlink to every peer,
// and keeps what it knows of each node's nexuses: on each new link it
// sends its own as a snapshot, and a newly elected leader seeds its core
// with all of them, so a leader elected later, or a restarted controller,
// knows which host reaches which node. The leader feeds its core those
// observations, the members as node states and every record as the
// owner; the core's batches become records (target set, the old owner's
// flush, the new owner), its reports are the leader's.
//
// Membership stays the leader's own rule for a takeover (a dead or
// restarted owner: the copies must be replayed, under MemberGone), and
// the core's failover batch waits for that record; failback, balance and
// the operator's moves are the core's (a failback needs every host of the
// LUN back on its preferred owner, not only the member).

// nodeObs is what is known of one node's nexuses.
type nodeObs struct {
	nexus map[ownership.Nexus]bool
	rtpg  map[rtpgKey]bool // value: the extended header was asked for
	// inc and seq: the incarnation and the last report this is from;
	// dead: incarnations that joined at or before it are gone (their
	// late reports are dropped).
	inc, dead int64
	seq       uint64
}

type rtpgKey struct {
	n   ownership.Nexus
	lun uint64
}

func newNodeObs() *nodeObs {
	return &nodeObs{nexus: map[ownership.Nexus]bool{}, rtpg: map[rtpgKey]bool{}}
}

// note updates the table with an observation.
func (t *nodeObs) note(e ownership.Event) {
	switch e := e.(type) {
	case ownership.Login:
		t.nexus[e.Nexus] = true
	case ownership.Logout:
		delete(t.nexus, e.Nexus)
		for k := range t.rtpg {
			if k.n == e.Nexus {
				delete(t.rtpg, k)
			}
		}
	case ownership.RTPG:
		t.rtpg[rtpgKey{e.Nexus, e.LUN}] = t.rtpg[rtpgKey{e.Nexus, e.LUN}] || e.Extended
	}
}

// logouts are the table's nexuses ending (the node is gone).
func (t *nodeObs) logouts() []ownership.Event {
	var evs []ownership.Event
	for n := range t.nexus {
		evs = append(evs, ownership.Logout{Nexus: n})
	}
	return evs
}

// clear forgets the nexuses (its incarnation is gone).
func (t *nodeObs) clear() { clear(t.nexus); clear(t.rtpg) }

// diff is what turns the table into fresh, as events: the nexuses gone,
// the new ones, and the RTPGs not seen before (a nexus the core already
// has is not logged in again: a re-login would make it undiscovered).
func (t *nodeObs) diff(fresh *nodeObs) []ownership.Event {
	var evs []ownership.Event
	for n := range t.nexus {
		if !fresh.nexus[n] {
			evs = append(evs, ownership.Logout{Nexus: n}) // gone while the link was down
		}
	}
	for n := range fresh.nexus {
		if !t.nexus[n] {
			evs = append(evs, ownership.Login{Nexus: n})
		}
	}
	for k, ext := range fresh.rtpg {
		if was, ok := t.rtpg[k]; !ok || (ext && !was) {
			evs = append(evs, ownership.RTPG{Nexus: k.n, LUN: k.lun, Extended: ext})
		}
	}
	return evs
}

// events are the table as events for a core that knows none of it.
func (t *nodeObs) events() []ownership.Event {
	var evs []ownership.Event
	for n := range t.nexus {
		evs = append(evs, ownership.Login{Nexus: n})
	}
	for k, ext := range t.rtpg {
		evs = append(evs, ownership.RTPG{Nexus: k.n, LUN: k.lun, Extended: ext})
	}
	return evs
}

// toObs is an observation for the wire.
func toObs(e ownership.Event) (interlink.Obs, bool) {
	nx := func(k interlink.ObsKind, n ownership.Nexus) interlink.Obs {
		return interlink.Obs{Kind: k, Host: n.Host, Initiator: n.Initiator, ISID: n.ISID, Port: n.Port}
	}
	switch e := e.(type) {
	case ownership.Login:
		return nx(interlink.ObsLogin, e.Nexus), true
	case ownership.Logout:
		o := nx(interlink.ObsLogout, e.Nexus)
		o.Flag = e.Orderly
		return o, true
	case ownership.RTPG:
		o := nx(interlink.ObsRTPG, e.Nexus)
		o.LUN, o.Flag = e.LUN, e.Extended
		return o, true
	case ownership.IO:
		return interlink.Obs{Kind: interlink.ObsIO, Host: e.Host, LUN: e.LUN, Ops: e.Ops, Media: e.Media,
			Bytes: e.Bytes, Time: e.RespTime, Interval: int64(e.Ticks)}, true
	case ownership.PathLatency:
		o := nx(interlink.ObsPath, e.Nexus)
		o.Ops, o.Time = e.Ops, e.Exchange
		return o, true
	}
	return interlink.Obs{}, false
}

// fromObs is a peer's observation as the core's event (node: the peer).
func fromObs(node string, o interlink.Obs) ownership.Event {
	n := ownership.Nexus{Host: o.Host, Initiator: o.Initiator, ISID: o.ISID, Port: o.Port, Node: node}
	switch o.Kind {
	case interlink.ObsLogin:
		return ownership.Login{Nexus: n}
	case interlink.ObsLogout:
		return ownership.Logout{Nexus: n, Orderly: o.Flag}
	case interlink.ObsRTPG:
		return ownership.RTPG{Nexus: n, LUN: o.LUN, Extended: o.Flag}
	case interlink.ObsIO:
		return ownership.IO{Host: o.Host, Node: node, LUN: o.LUN, Ops: o.Ops, Media: o.Media, Bytes: o.Bytes,
			RespTime: o.Time, Ticks: int(max(1, min(o.Interval, 1<<20)))}
	default:
		return ownership.PathLatency{Nexus: n, Ops: o.Ops, Exchange: o.Time}
	}
}

// observed takes one of this node's observations (the daemon's control
// path calls it): noted, sent to every peer, and fed to the core here if
// this controller leads.
func (c *Controller) observed(e ownership.Event) {
	o, ok := toObs(e)
	if !ok {
		return
	}
	c.obsMu.Lock()
	defer c.obsMu.Unlock()
	c.obs[c.node].note(e)
	c.seq++
	for _, lk := range c.liveLinks() {
		lk.conn.PostReport(interlink.Report{Node: c.node, Inc: c.ms.JoinRevision(), Seq: c.seq, Obs: []interlink.Obs{o}})
	}
	if p := c.core.Load(); p != nil {
		p.Post(e)
	}
}

// sendSnapshot sends this node's nexuses to a new link's peer.
func (c *Controller) sendSnapshot(lk *link) {
	c.obsMu.Lock()
	defer c.obsMu.Unlock()
	c.seq++
	r := interlink.Report{Node: c.node, Inc: c.ms.JoinRevision(), Seq: c.seq, Snapshot: true}
	for _, e := range c.obs[c.node].events() {
		if o, ok := toObs(e); ok {
			r.Obs = append(r.Obs, o)
		}
	}
	lk.conn.PostReport(r)
}

// report takes a peer's observations.
func (c *Controller) report(m interlink.Report) error {
	if n := c.arr.Node(m.Node); n == nil || !n.Remote() {
		return fmt.Errorf("a report from %q, no other node of the array", m.Node)
	}
	c.obsMu.Lock()
	defer c.obsMu.Unlock()
	t := c.obs[m.Node]
	if m.Inc <= t.dead || m.Inc < t.inc || (m.Inc == t.inc && m.Seq <= t.seq) {
		return nil // a gone or earlier incarnation's, or late from a replaced link
	}
	var evs []ownership.Event
	if m.Inc > t.inc {
		// A new incarnation: what the earlier one had is gone.
		evs = append(evs, t.logouts()...)
		t.clear()
		t.inc = m.Inc
	}
	t.seq = m.Seq
	if m.Snapshot {
		fresh := newNodeObs()
		for _, o := range m.Obs {
			fresh.note(fromObs(m.Node, o))
		}
		evs = append(evs, t.diff(fresh)...)
		t.nexus, t.rtpg = fresh.nexus, fresh.rtpg
	} else {
		for _, o := range m.Obs {
			e := fromObs(m.Node, o)
			t.note(e)
			evs = append(evs, e)
		}
	}
	if p := c.core.Load(); p != nil {
		p.Post(evs...)
	}
	return nil
}

func (c *Controller) liveLinks() []*link {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*link, 0, len(c.links))
	for _, l := range c.links {
		out = append(out, l)
	}
	return out
}

// notLeading says where the core runs, for a query asked of a controller
// that does not lead (reports, rebalance, the core's views).
func (c *Controller) notLeading() error {
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
	defer cancel()
	leader, err := c.store.Leader(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("the ownership core runs on the cluster's leader, and etcd does not answer who leads: %w", err)
	case leader == "" || leader == c.node:
		return errors.New("the ownership core runs on the cluster's leader, and no controller leads yet: ask again")
	}
	return fmt.Errorf("the ownership core runs on the cluster's leader, node %s (this is node %s): ask its control socket or API",
		leader, c.node)
}

// coreOn says whether the leader runs the ownership core.
func (c *Controller) coreOn() bool { return !c.o.Config.Ownership.Off }

// startCore runs the core on this controller for a term: seeded with
// every node's known nexuses, its batches carried out through the
// records. The members' states come from decide.
func (c *Controller) startCore(l *cluster.Leadership) error {
	p := c.D.Ctl()
	c.obsMu.Lock()
	defer c.obsMu.Unlock()
	var seed []ownership.Event
	for _, n := range c.o.Config.Nodes {
		seed = append(seed, c.obs[n.Name].events()...)
	}
	if err := p.StartWith(c.o.Config.Ownership, func(b ownership.Batch, at time.Time) ([]ownership.OwnerChanged, error) {
		return c.moveLUNs(l, b.LUNs, b.To, b.Cause, at)
	}, seed...); err != nil {
		return err
	}
	c.told = map[string]int64{}
	c.diverged = map[uint64]bool{}
	c.upMu.Lock()
	c.upSince = map[string]time.Time{}
	c.upMu.Unlock()
	c.core.Store(p)
	return nil
}

func (c *Controller) stopCore() {
	c.obsMu.Lock()
	p := c.core.Swap(nil)
	c.obsMu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// tellCore feeds the leader's core a record it did not decide (a
// takeover, a move completed): the owner as etcd says.
func (c *Controller) tellCore(o cluster.Owned) {
	p := c.core.Load()
	if p == nil || o.To != "" || o.Cause == string(alua.CauseRollback) {
		return
	}
	cause := alua.Cause(o.Cause)
	if cause == "" {
		cause = alua.CauseFailover
	}
	p.Post(ownership.OwnerChanged{LUN: o.LUN, Owner: o.Owner, Cause: cause})
}

// nodeStates feeds the core the members as node states: a node that
// left, or came back as a new incarnation, is down (then up again).
func (c *Controller) nodeStates(members map[string]cluster.Info, mrev int64, owners map[uint64]cluster.Owned) {
	p := c.core.Load()
	if p == nil {
		return
	}
	starting := map[string]bool{} // owners of records nobody served yet
	if time.Since(c.termStart) < c.startGrace() {
		for _, o := range owners {
			if o.Fresh {
				starting[o.Owner] = true
			}
		}
	}
	c.obsMu.Lock() // (the tables are cleared with the core told)
	defer c.obsMu.Unlock()
	var evs []ownership.Event
	for _, n := range c.o.Config.Nodes {
		m, up := members[n.Name]
		was, told := c.told[n.Name] // the incarnation told up, -1 down
		switch {
		case up && told && was == m.Joined:
		case up:
			if told && was >= 0 {
				evs = append(evs, ownership.NodeState{Node: n.Name, Up: false}) // a new incarnation
			}
			// What an earlier incarnation reached is gone (a leader elected
			// while the node restarted seeded its core with it).
			evs = append(evs, c.forgetLocked(n.Name, m.Joined-1)...)
			evs = append(evs, ownership.NodeState{Node: n.Name, Up: true})
			c.told[n.Name] = m.Joined
			c.upMu.Lock()
			c.upSince[n.Name] = time.Now()
			c.upMu.Unlock()
		case !told && starting[n.Name]:
			// The array's first start: its controller may be starting (the
			// core takes every node as up until told).
		case !told || was >= 0:
			evs = append(evs, ownership.NodeState{Node: n.Name, Up: false})
			evs = append(evs, c.forgetLocked(n.Name, mrev)...)
			c.told[n.Name] = -1
		}
	}
	p.Post(evs...)
}

// forgetLocked forgets a node's nexuses if they are of an incarnation
// that joined at rev or before (one that is gone), and returns their
// logouts for the core (after the node's state, so the core counts no
// path fault). Under obsMu.
func (c *Controller) forgetLocked(node string, rev int64) []ownership.Event {
	t := c.obs[node]
	if t == nil || node == c.node {
		return nil
	}
	t.dead = max(t.dead, rev)
	if t.inc > rev {
		return nil
	}
	evs := t.logouts()
	t.clear()
	return evs
}

// forgetNode is forgetLocked for a member seen leaving at rev, on a
// controller whose core does not run (the leader's tells its core).
func (c *Controller) forgetNode(node string, rev int64) {
	c.obsMu.Lock()
	defer c.obsMu.Unlock()
	if c.core.Load() == nil {
		c.forgetLocked(node, rev)
	}
}

// reconcileCore corrects the core where it and the records still differ
// a round after they first did (a batch the mover could not report, a
// record told to no core): the records are the truth.
func (c *Controller) reconcileCore(owners map[uint64]cluster.Owned) {
	p := c.core.Load()
	if p == nil {
		return
	}
	core := map[uint64]string{}
	if err := p.Do(func(co *ownership.Core) {
		for _, id := range co.LUNs() {
			core[id] = co.Owner(id)
		}
	}); err != nil {
		return
	}
	var evs []ownership.Event
	for id, o := range owners {
		if o.To != "" || c.moving(id) || p.Pending(id) || core[id] == "" || core[id] == o.Owner {
			delete(c.diverged, id)
			continue
		}
		if !c.diverged[id] {
			c.diverged[id] = true
			continue
		}
		delete(c.diverged, id)
		cause := alua.Cause(o.Cause)
		if cause == "" || cause == alua.CauseRollback {
			cause = alua.CauseRollback
		}
		c.log.Warn("the ownership core's owner differs from the record: corrected", "lun", id, "core", core[id], "record", o.Owner)
		evs = append(evs, ownership.OwnerChanged{LUN: id, Owner: o.Owner, Cause: cause})
	}
	p.Post(evs...)
}

// upAt is when the core was last told node is up (zero: not this term).
func (c *Controller) upAt(node string) time.Time {
	c.upMu.Lock()
	defer c.upMu.Unlock()
	return c.upSince[node]
}

// moveLUNs carries out a batch of the core's (or an operator's move)
// through the records, one LUN at a time, and returns where each is
// after it.
func (c *Controller) moveLUNs(l *cluster.Leadership, ids []uint64, to string, cause alua.Cause, at time.Time) ([]ownership.OwnerChanged, error) {
	var out []ownership.OwnerChanged
	var errs []error
	for _, id := range ids {
		now, was, err := c.moveLUN(l, id, to, cause, at)
		if now != "" {
			// Why it is where it is: the batch's cause if it moved as
			// asked, a rollback if it stayed, a takeover if something else
			// moved it meanwhile (the core counts that change as real).
			why := cause
			switch {
			case now == to:
			case now == was:
				why = alua.CauseRollback
			default:
				why = alua.CauseFailover
			}
			out = append(out, ownership.OwnerChanged{LUN: id, Owner: now, Cause: why})
		}
		if err == nil && now != to {
			err = fmt.Errorf("%w: it is on %s (taken over meanwhile)", errMoveRefused, now)
		}
		if err != nil && !errors.Is(err, array.ErrNoChange) {
			errs = append(errs, fmt.Errorf("LUN %d: %w", id, err))
		}
	}
	return out, errors.Join(errs...)
}

// errMoveRefused: the move cannot start now.
var errMoveRefused = errors.New("the move cannot start")

func (c *Controller) moveLUN(l *cluster.Leadership, id uint64, to string, cause alua.Cause, at time.Time) (now, was string, err error) {
	ctx, cancel := context.WithTimeout(c.ctx, 4*c.cc.LeaseTTL)
	defer cancel()
	if c.stopping.Load() {
		return "", "", fmt.Errorf("%w: node %s is stopping", errMoveRefused, c.node)
	}
	o, err := c.store.Owner(ctx, id)
	if err != nil {
		return "", "", err
	}
	members, _, err := c.store.Members(ctx)
	if err != nil {
		return "", "", err
	}
	m, alive := members[o.Owner]
	_, toUp := members[to]
	switch {
	case o.Owner == to && o.To == "":
		return to, o.Owner, array.ErrNoChange
	case !alive || m.Joined > o.Rev || o.To != "":
		// A takeover (or a move a previous term left) is membership's: the
		// move is where that record leaves the LUN.
		return c.awaitRecord(ctx, o), o.Owner, nil
	case !toUp:
		return o.Owner, o.Owner, fmt.Errorf("%w: node %s is not a member", errMoveRefused, to)
	case cause != alua.CauseManual && c.upAt(o.Owner).After(at):
		// Decided while the owner was down (or an earlier incarnation of
		// it): the core decides afresh from where the LUN is.
		return o.Owner, o.Owner, fmt.Errorf("%w: node %s came back since the move was decided", errMoveRefused, o.Owner)
	case cause != alua.CauseManual && c.upAt(to).After(at):
		// Decided from what an earlier incarnation of the target reached:
		// its hosts may not have logged in to this one.
		return o.Owner, o.Owner, fmt.Errorf("%w: node %s restarted since the move was decided", errMoveRefused, to)
	case !l.Leads():
		return o.Owner, o.Owner, fmt.Errorf("%w: this controller no longer leads", errMoveRefused)
	case o.Owner != c.node && c.linkTo(o.Owner) == nil:
		return o.Owner, o.Owner, fmt.Errorf("%w: no interlink to the owner %s", errMoveRefused, o.Owner)
	case to != c.node && c.linkTo(to) == nil:
		return o.Owner, o.Owner, fmt.Errorf("%w: no interlink to %s", errMoveRefused, to)
	}
	if !c.claim(id) {
		return o.Owner, o.Owner, fmt.Errorf("%w: the LUN is moving", errMoveRefused)
	}
	defer c.unclaim(id)
	moving, err := c.change(ctx, o, cluster.Record{LUN: id, Owner: o.Owner, To: to, Cause: string(cause)}, l.StillLeader())
	if err != nil {
		return c.recordOwner(id, o.Owner), o.Owner, err
	}
	hook("target-set", c, id)
	herr := c.handOver(ctx, l, moving, m.Joined)
	if now := c.recordOwner(id, ""); now != to {
		return now, o.Owner, fmt.Errorf("the old owner %s did not hand it over (%v): rolled back", o.Owner, herr)
	}
	return to, o.Owner, nil
}

// recordOwner reads a LUN's owner now (if unsure: "" or what was known).
func (c *Controller) recordOwner(id uint64, known string) string {
	ctx, cancel := context.WithTimeout(c.ctx, c.cc.LeaseTTL)
	defer cancel()
	o, err := c.store.Owner(ctx, id)
	if err != nil || o.To != "" {
		return known
	}
	return o.Owner
}

// claim marks a LUN as moving under the core's batch: decide leaves its
// record alone meanwhile.
func (c *Controller) claim(id uint64) bool {
	c.busyMu.Lock()
	defer c.busyMu.Unlock()
	if c.busy[id] {
		return false
	}
	c.busy[id] = true
	return true
}

func (c *Controller) unclaim(id uint64) {
	c.busyMu.Lock()
	delete(c.busy, id)
	c.busyMu.Unlock()
	c.wake()
}

func (c *Controller) moving(id uint64) bool {
	c.busyMu.Lock()
	defer c.busyMu.Unlock()
	return c.busy[id]
}

// awaitRecord waits (bounded by ctx) for the LUN's record to change from
// o and complete, and returns its owner then.
func (c *Controller) awaitRecord(ctx context.Context, o cluster.Owned) string {
	c.wake()
	for !c.stopping.Load() { // (a stopping leader writes no takeover)
		owners, _, err := c.store.Owners(ctx)
		if err == nil {
			if n := owners[o.LUN]; n.Rev != o.Rev && n.To == "" {
				return n.Owner
			}
		}
		select {
		case <-ctx.Done():
			return o.Owner
		case <-time.After(c.cc.LeaseTTL / 8):
		}
	}
	return o.Owner
}

// operatorMove is an operator's move asked of this controller: carried
// out here if it leads, else by the leader over the interlink; it returns
// once this controller's array shows the new owner.
func (c *Controller) operatorMove(ids []uint64, to string, cause alua.Cause) (array.Change, error) {
	leave, err := c.enter()
	if err != nil {
		return array.Change{}, err
	}
	defer leave()
	from := ""
	if l := c.arr.LUN(ids[0]); l != nil {
		from = l.Owner().Name
		if from == to && len(ids) == 1 {
			return array.Change{}, array.ErrNoChange
		}
	}
	if err := c.moveAtLeader(ids, to, cause); err != nil {
		return array.Change{}, err
	}
	deadline := time.Now().Add(2 * c.cc.LeaseTTL)
	for _, id := range ids {
		for c.arr.LUN(id).Owner().Name != to && time.Now().Before(deadline) {
			c.sleep(5 * time.Millisecond)
		}
		if now := c.arr.LUN(id).Owner().Name; now != to {
			return array.Change{}, fmt.Errorf("LUN %d: the leader moved it, and this controller still shows it on %s", id, now)
		}
	}
	return array.Change{LUNs: ids, From: from, To: to, Cause: cause}, nil
}

func (c *Controller) moveAtLeader(ids []uint64, to string, cause alua.Cause) error {
	if l := c.term.Load(); l != nil && l.Leads() {
		_, err := c.moveLUNs(l, ids, to, cause, time.Now())
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, 4*c.cc.LeaseTTL)
	defer cancel()
	leader, err := c.store.Leader(ctx)
	if err != nil {
		return fmt.Errorf("finding the leader: %w", err)
	}
	lk := c.linkTo(leader)
	if leader == "" || lk == nil {
		return fmt.Errorf("%w: no leader is reachable over the interlink (leader %q)", errMoveRefused, leader)
	}
	return lk.conn.Move(ctx, interlink.Move{LUNs: ids, To: to, Cause: string(cause)})
}

// move serves a peer's operator move: only the leader carries it out.
func (c *Controller) move(m interlink.Move) error {
	leave, err := c.enter()
	if err != nil {
		return err
	}
	defer leave()
	if m.Cause != string(alua.CauseManual) {
		return fmt.Errorf("a move for %q: only an operator's move is asked of the leader", m.Cause)
	}
	l := c.term.Load()
	if l == nil || !l.Leads() {
		return fmt.Errorf("%w: node %s does not lead", errMoveRefused, c.node)
	}
	for _, id := range m.LUNs {
		if c.arr.LUN(id) == nil {
			return fmt.Errorf("no LUN %d", id)
		}
	}
	if c.arr.Node(m.To) == nil {
		return fmt.Errorf("no node %q", m.To)
	}
	_, err = c.moveLUNs(l, m.LUNs, m.To, alua.Cause(m.Cause), time.Now())
	return err
}

func (h handler) Report(_ context.Context, m interlink.Report) error {
	if err := h.c.report(m); err != nil {
		h.c.log.Warn("interlink: a report refused", "err", err)
	}
	return nil // (a refusal would fail the sender's next hand-over drain)
}

func (h handler) Move(_ context.Context, m interlink.Move) error { return h.c.move(m) }
