// Package controller runs one controller of an array whose controllers
// are processes of their own (`aluad controller`): it joins the cluster
// in etcd under a lease (pkg/cluster), runs the daemon for its own node
// only (its cache, its target ports), keeps the interlink to the other
// controllers (pkg/interlink: forwarded commands, mirror copies, the
// flush of a hand-over), installs the ownership records it watches into
// its array, and serves a LUN as owner only while its fence allows. It
// reports what it observes of its hosts to the other controllers. One
// controller at a time is elected leader: it runs the ownership core,
// fed every controller's observations, whose batches it carries out as
// records (plane.go), takes a dead or restarted owner's LUNs over, and
// completes or rolls back a move a previous leader left half done
// (leader.go). The rules are pkg/cluster's; this package is their wiring.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/cache"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/cluster/kv"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/fence"
	"github.com/aluad/aluad/pkg/interlink"
	"github.com/aluad/aluad/pkg/media"
)

// Options start a controller.
type Options struct {
	// Config is the array's configuration with its cluster section; every
	// controller reads the same one.
	Config config.Config
	// Node is the node this process runs.
	Node string
	// Member, if set, is an etcd member this process runs itself (one of
	// the cluster's; Config.Cluster.Etcd lists every member's client URL).
	Member *cluster.MemberConfig
	// JoinTimeout bounds the wait for etcd's quorum and for a previous
	// incarnation's lease to end (default: 30s).
	JoinTimeout time.Duration
	// Daemon tunes the daemon (logger, control socket, API); Local and
	// Remote are set by the controller.
	Daemon daemon.Options
	// Fencer fences a controller whose lease ran out before its LUNs are
	// taken over, and a node's previous incarnation before it joins again
	// (nil: the method of the configuration's cluster.fencing).
	Fencer fence.Fencer
	// Store, if set, is the cluster store's backend in place of a client
	// of Config.Cluster.Etcd, and Listen and Dial carry the interlink in
	// place of TCP: controllers of one cluster in one process, on the
	// in-memory store (kv.Mem, each behind its own kv.Link) and network
	// (memnet), where a testing/synctest bubble fakes their time.
	Store  kv.Backend
	Listen func(network, addr string) (net.Listener, error)
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	// MediaSleep waits out the media-delay fault (nil: media.PreciseWait,
	// which a synctest bubble's fake time does not drive: time.Sleep).
	MediaSleep media.Sleeper
}

// Controller is a running controller process.
type Controller struct {
	D *daemon.Daemon

	o      Options
	cc     cluster.Config
	node   string
	log    *slog.Logger
	member *cluster.Member
	cli    *cluster.Client
	store  *cluster.Store
	ms     *cluster.Membership
	fence  *cluster.Fence
	self   fence.Identity // this process, as it publishes itself
	fencer fence.Fencer   // another machine's controllers (or every one: tests, none)
	local  *fence.Process // this machine's (nil: fencer fences all)
	media  media.Switch   // the media-delay fault
	arr    *array.Array
	ln     net.Listener
	ps     int64 // the cache's page size

	mu     sync.Mutex
	links  map[string]*link         // live interlink connections by peer node
	cuts   map[string]bool          // peers whose link is cut (the fault)
	delays map[string]time.Duration // latency added to what goes to a peer (the fault)

	// The mirror generation this node sends copies under (mirror.go), and
	// the voids under way (a lost partner link: writes that the partner
	// does not see are acknowledged only once its older copies are void).
	mgen        atomic.Pointer[mirrorGen]
	vmu         sync.Mutex
	vcond       *sync.Cond
	lossSeq     int64 // links lost (or replaced, or a partner changed)
	voidedSeq   int64 // the losses a void covers
	voidRunning bool
	lunMu       map[uint64]*array.ChanMutex // orders a record's install against copies arriving (a channel: held over the array's drain)
	stopping    atomic.Bool
	gone        atomic.Bool // killed: its media writes on their way fail (gated)
	mgate       gate        // its media writes: killed, held by a pause (tests)
	fenceMu     sync.Mutex
	fences      map[string]*fenceJob // the leader's fences under way or done, by node
	final       atomic.Bool          // stopped, marking the records clean
	hmu         sync.Mutex           // the peers' requests in service (enter)
	hcond       *sync.Cond           // on hmu: inflight fell to 0
	inflight    int                  // under hmu: requests admitted and not done
	closing     bool                 // under hmu: no more are admitted
	backoff     map[uint64]time.Time // the leader's: no failback of a LUN before this (after a rollback); under busyMu

	// The ownership core (plane.go): what each node's hosts are known to
	// reach, the leader's core while it leads and its term, the LUNs its
	// batches are moving, and the members told to the core.
	obsMu  sync.Mutex
	obs    map[string]*nodeObs
	core   atomic.Pointer[control.Path]
	term   atomic.Pointer[cluster.Leadership]
	busyMu sync.Mutex
	busy   map[uint64]bool
	told   map[string]int64
	// diverged: LUNs whose record and the core's owner differed at the
	// last round (the leader's; corrected if they still do).
	diverged map[uint64]bool
	seq      uint64 // this node's reports, under obsMu
	upMu     sync.Mutex
	upSince  map[string]time.Time // when the core was told each node is up
	// termStart: when this controller's current term as leader began.
	termStart time.Time

	kick     chan struct{} // wakes the leader
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	failOnce sync.Once
	failed   chan struct{}
	err      error
	// ending: Stop or Kill has begun (the first one runs; a later call
	// waits for exited, on a channel: a wait on a lock would stop a
	// synctest bubble's fake time while the first waits on a timer).
	ending atomic.Bool
	exited chan struct{} // closed once Stop or Kill has ended everything
}

// link is one live interlink connection.
type link struct {
	conn *interlink.Conn
	nc   *interlink.Faulty
}

// Start joins the cluster and serves the node.
func Start(o Options) (_ *Controller, err error) {
	cfg := o.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Cluster.On() {
		return nil, errors.New("controller: the configuration has no cluster section (etcd, interlink)")
	}
	if !hasNode(cfg, o.Node) {
		return nil, fmt.Errorf("controller: no node %q in the configuration", o.Node)
	}
	if o.JoinTimeout <= 0 {
		o.JoinTimeout = 30 * time.Second
	}
	log := o.Daemon.Logger
	if log == nil {
		log = slog.Default()
	}
	c := &Controller{o: o, cc: cfg.Cluster, node: o.Node, log: log.With("node", o.Node), links: map[string]*link{}, cuts: map[string]bool{},
		delays: map[string]time.Duration{},
		kick:   make(chan struct{}, 1), failed: make(chan struct{}), exited: make(chan struct{}), lunMu: map[uint64]*array.ChanMutex{},
		backoff: map[uint64]time.Time{}, obs: map[string]*nodeObs{}, busy: map[uint64]bool{}}
	c.vcond = sync.NewCond(&c.vmu)
	c.hcond = sync.NewCond(&c.hmu)
	for _, n := range cfg.Nodes {
		c.obs[n.Name] = newNodeObs()
	}
	for _, l := range cfg.LUNs {
		c.lunMu[l.ID] = &array.ChanMutex{}
	}
	// Page versions after any earlier incarnation's: the partner keeps
	// the newer of two copies of a page.
	cache.SeedVersions(uint64(time.Now().UnixNano()))
	c.ctx, c.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if o.Member != nil {
		if c.member, err = cluster.StartMember(*o.Member, o.JoinTimeout); err != nil {
			return nil, err
		}
	}
	if err := c.setUpFencing(); err != nil {
		return nil, err
	}
	if o.Store != nil {
		c.store = cluster.NewStoreKV(o.Store, cfg.ArrayID, nil)
	} else {
		if c.cli, err = cluster.Dial(c.cc.Etcd); err != nil {
			return nil, fmt.Errorf("controller: etcd client: %w", err)
		}
		c.store = cluster.NewStoreOn(c.cli, cfg.ArrayID, nil)
	}
	ctx, cancel := context.WithTimeout(c.ctx, o.JoinTimeout)
	defer cancel()
	// The records exist before any controller joins: none serves a
	// record from before its join until the leader has rewritten it.
	var recs []cluster.Record
	for _, l := range cfg.LUNs {
		recs = append(recs, cluster.Record{LUN: l.ID, Owner: l.Preferred, Fresh: true})
	}
	if err := c.store.Init(ctx, recs); err != nil {
		return nil, err
	}
	if err := c.join(); err != nil {
		return nil, err
	}
	// A controller admits a command as owner only while its lease holds
	// for this long after: enough for the command to reach the media.
	c.fence = cluster.NewFence(c.ms, c.cc.LeaseTTL/4)
	listen := o.Listen
	if listen == nil {
		listen = net.Listen
	}
	if c.ln, err = listen("tcp", c.cc.Interlink[c.node]); err != nil {
		return nil, fmt.Errorf("controller: interlink: %w", err)
	}
	owners, rev, err := c.store.Owners(ctx)
	if err != nil {
		return nil, err
	}
	members, mrev, err := c.store.Members(ctx)
	if err != nil {
		return nil, err
	}
	coreOff := cfg.Ownership.Off
	cfg.Ownership.Off = true // the leader runs the core (plane.go), or membership's rules alone
	dopt := o.Daemon
	dopt.Local, dopt.Remote, dopt.Mover, dopt.Faults = c.node, c, c.operatorMove, c.inject
	wrap := dopt.WrapStore
	dopt.WrapStore = func(lun uint64, s media.Store) media.Store { // the media-delay fault
		if wrap != nil {
			s = wrap(lun, s)
		}
		return media.WithFaults(gated{s, &c.mgate}, &c.media, o.MediaSleep)
	}
	if !coreOff {
		dopt.Observed, dopt.NoCore = c.observed, c.notLeading
	}
	if c.D, err = daemon.Start(cfg, dopt); err != nil {
		return nil, err
	}
	c.arr = c.D.Array
	// Each controller serves its own ports and sees its own sessions
	// only: the leader's core hands STANDBY-type hosts back on its own
	// array, and nothing carries hand-offs between controllers yet, so a
	// STANDBY-type host is handed off (ANO) wherever no core says
	// otherwise. It is never cut off; it follows a move at its checker's
	// pace there instead of at once.
	c.arr.SetHandoffDefault(true)
	c.ps = int64(c.arr.Local().Cache.Config().PageSize)
	for _, n := range c.arr.Nodes {
		if n.Remote() {
			_, up := members[n.Name]
			c.arr.SetRemoteUp(n.Name, up)
		}
	}
	for _, l := range c.arr.LUNs {
		if ow, ok := owners[l.ID]; ok {
			c.apply(ow)
		}
	}
	if c.member != nil {
		c.wg.Add(1)
		go c.keepEtcdLeaderOff()
	}
	c.wg.Add(5)
	go c.acceptLoop()
	go c.dialLoop()
	go c.watchOwners(rev)
	go c.watchMembers(mrev)
	go c.leaderLoop()
	go func() {
		select {
		case <-c.ms.Lost():
			c.fail(errors.New("controller: the lease is lost (cut off from etcd for longer than its TTL): this controller serves nothing as owner; restart it"))
		case <-c.ctx.Done():
		}
	}()
	// etcd may grant more than asked (its floor is 1.5 election timeouts).
	c.log.Info("controller serving", "interlink", c.ln.Addr().String(), "lease_ttl", c.ms.TTL())
	return c, nil
}

// keepEtcdLeaderOff moves the etcd leadership from this controller's
// member to a witness whenever it finds it here (checked locally every
// 250 ms: an election can bring it back at any time): a killed
// controller must not take the etcd leader with it, or its failover
// waits for an election and a second lease TTL (etcd renews every lease
// when a new leader is elected).
func (c *Controller) keepEtcdLeaderOff() {
	defer c.wg.Done()
	controllers := map[string]bool{c.o.Member.Name: true}
	for _, n := range c.o.Config.Nodes {
		controllers[n.Name] = true
	}
	for c.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		moved, err := c.member.HandOffLeadership(ctx, func(name string) bool { return !controllers[name] })
		cancel()
		if moved {
			c.log.Info("etcd leadership moved to a witness")
		} else if err != nil && c.ctx.Err() == nil {
			c.log.Warn("moving the etcd leadership to a witness", "err", err)
		}
		c.sleep(250 * time.Millisecond)
	}
}

// join takes the node's membership; a previous incarnation's lease (a
// process killed a moment ago) is waited out.
func (c *Controller) join() error {
	deadline := time.Now().Add(c.o.JoinTimeout)
	for {
		ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		ms, err := c.store.Join(ctx, cluster.Info{Node: c.node, Interlink: c.cc.Interlink[c.node], Process: c.self}, c.cc.LeaseTTL)
		cancel()
		if err == nil {
			c.ms = ms
			return nil
		}
		if errors.Is(err, cluster.ErrUnfenced) {
			// The previous process of this node died or stopped without
			// leaving, and nobody fenced it yet: this one does, before it
			// serves anything (the old one may be paused with a write).
			fctx, cancel := context.WithTimeout(c.ctx, c.cc.FenceTimeout)
			if err = c.fenceNode(fctx, c.node); err == nil {
				cancel()
				continue
			}
			cancel()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller: joining the cluster: %w", err)
		}
		if errors.Is(err, cluster.ErrMember) {
			c.log.Info("the previous incarnation's lease still holds; waiting for it to end")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Err is closed when the controller cannot go on; Error says why.
func (c *Controller) Err() <-chan struct{} { return c.failed }

// Error is why the controller failed (nil while it runs).
func (c *Controller) Error() error {
	select {
	case <-c.failed:
		return c.err
	default:
		return nil
	}
}

func (c *Controller) fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		c.log.Error("controller failed", "err", err)
		close(c.failed)
	})
}

// Leader names the elected leader ("" when none).
func (c *Controller) Leader(ctx context.Context) (string, error) { return c.store.Leader(ctx) }

// Stop ends the controller: the daemon flushes and stops, the partner
// receives every release, and the lease is revoked (the others take its
// LUNs over at once).
func (c *Controller) Stop(grace time.Duration) (err error) {
	if !c.ending.CompareAndSwap(false, true) {
		<-c.exited
		return nil
	}
	defer close(c.exited)
	func() {
		c.takeOverHeld(grace)
		c.stopping.Store(true) // serves nothing as owner from here on
		c.hmu.Lock()           // the peers' requests under way end first; new ones are refused at once
		c.closing = true
		for c.inflight > 0 {
			c.hcond.Wait()
		}
		c.hmu.Unlock()
		if c.D != nil {
			err = c.D.Stop(grace)
		}
		settled := (mirror{c}).Settle()
		if settled != nil {
			c.log.Warn("the partner did not confirm every release", "err", settled)
		}
		if err == nil && settled == nil {
			c.markClean()
		}
		c.close()
	}()
	return err
}

func (c *Controller) close() { c.shut(true) }

// shut ends the loops and the links, then leaves the cluster (revoking
// the lease) or not (a crash leaves it to expire), and closes the client
// and the etcd member.
func (c *Controller) shut(leave bool) {
	c.cancel()
	if c.ln != nil {
		c.ln.Close()
	}
	c.mu.Lock()
	for _, l := range c.links {
		l.conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	if leave && c.ms != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.ms.Leave(ctx)
		cancel()
	} else if c.ms != nil {
		c.ms.Abandon() // a crash: the lease runs out by itself
	}
	if c.cli != nil {
		c.cli.Close()
	}
	if c.member != nil {
		c.member.Close()
	}
}

// takeOverHeld: before a controller stops, a gone partner's LUNs whose
// copies only this one holds are taken over (the leader's takeover, the
// copies replayed), so its writes reach the media with the flush of the
// stop instead of leaving with this process. Bounded by grace and three
// lease TTLs, and while a fence the takeover waits for runs, by the
// fence's own timeout after that (a power fence takes seconds: leaving
// before it ends would take the only copy of the partner's acknowledged
// writes away). It waits only while some record awaits a takeover (its
// owner gone, or restarted since it was written): with more than two
// controllers, others being members says nothing of the gone one whose
// copies this one holds.
func (c *Controller) takeOverHeld(grace time.Duration) {
	if c.arr == nil {
		return
	}
	deadline := time.Now().Add(min(max(grace, time.Second), 3*c.cc.LeaseTTL))
	longest, told := deadline.Add(c.cc.FenceTimeout), false
	for c.arr.Local().Cache.MirrorBytes() > 0 && c.ctx.Err() == nil {
		if now := time.Now(); !now.Before(deadline) {
			if !c.fencing() || !now.Before(longest) {
				return
			}
			if !told {
				told = true
				c.log.Warn("the stop waits for a fence: this controller holds the only copy of a gone partner's writes",
					"bytes", c.arr.Local().Cache.MirrorBytes(), "at_most", time.Until(longest).Round(time.Second))
			}
		}
		ctx, cancel := context.WithTimeout(c.ctx, time.Second)
		due, err := c.takeoverDue(ctx)
		cancel()
		if err == nil && !due {
			return
		}
		c.wake()
		c.sleep(50 * time.Millisecond)
	}
}

// takeoverDue says whether a record awaits the leader's takeover: its
// owner is no member, or restarted since the record was written (a fresh
// record, never served, has no copies).
func (c *Controller) takeoverDue(ctx context.Context) (bool, error) {
	members, _, err := c.store.Members(ctx)
	if err != nil {
		return false, err
	}
	owners, _, err := c.store.Owners(ctx)
	if err != nil {
		return false, err
	}
	for _, o := range owners {
		m, up := members[o.Owner]
		if !o.Fresh && (!up || m.Joined > o.Rev) {
			return true, nil
		}
	}
	return false, nil
}

// fencing says whether a fence of the leader's runs now, or ended less
// than two lease TTLs ago (its takeover is being written).
func (c *Controller) fencing() bool {
	c.fenceMu.Lock()
	defer c.fenceMu.Unlock()
	for _, j := range c.fences {
		select {
		case <-j.done:
			if time.Since(j.ended) < 2*c.cc.LeaseTTL {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// markClean: the last controller to stop cleanly leaves every LUN's
// record as at the array's first start (its preferred owner, fresh):
// everything is on the media and no copy is needed, so the next start
// serves each LUN on its preferred owner at once, instead of taking each
// over to the holder of copies that do not matter and failing it back.
// Only while no other controller is a member (under that condition).
func (c *Controller) markClean() {
	c.final.Store(true) // (the records it writes are not installed here)
	if n := c.arr.Local().Cache.MirrorBytes(); n > 0 {
		// A partner's writes held only here: not clean (its LUNs must be
		// taken over, their copies replayed, at the next start).
		c.log.Warn("stopped holding a partner's mirror copies: the next start takes its LUNs over", "bytes", n)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	members, _, err := c.store.Members(ctx)
	if err != nil || len(members) != 1 {
		return
	}
	if _, self := members[c.node]; !self {
		return
	}
	owners, _, err := c.store.Owners(ctx)
	if err != nil {
		return
	}
	conds := []cluster.Cond{c.store.MemberIs(c.node, c.ms.JoinRevision())}
	for _, n := range c.o.Config.Nodes {
		if n.Name != c.node {
			conds = append(conds, c.store.MemberGone(n.Name))
		}
	}
	marked := 0
	for _, l := range c.o.Config.LUNs {
		o, ok := owners[l.ID]
		if !ok || o.To != "" || o.Owner != c.node {
			continue // (a gone owner's LUN not taken over: its copies may matter)
		}
		if _, err := c.store.Change(ctx, o, cluster.Record{LUN: l.ID, Owner: l.Preferred, Fresh: true}, conds...); err == nil {
			marked++
		}
	}
	c.log.Info("the last controller stopped cleanly: every LUN starts on its preferred owner next time", "luns", marked)
}

// Kill stops the controller as a crash would (tests): nothing is
// flushed, the lease is left to expire.
func (c *Controller) Kill() {
	c.MarkGone()
	if !c.ending.CompareAndSwap(false, true) {
		<-c.exited
		return
	}
	defer close(c.exited)
	c.arr.Local().Cache.Crash() // what it held in memory is gone
	c.D.Target.Close()          // every host connection drops
	c.shut(false)
	c.arr.Local().Cache.Close() // and nothing of it runs any more
	// What the kernel does at a process's exit: its LUN files unmapped
	// and closed (in one process, a killed controller's mappings
	// otherwise stayed, one set per incarnation, until the process hit
	// its limit of mappings; the caches are closed and the gate refuses
	// writes, so nothing reaches the media).
	c.arr.Close()
}

// Exited is closed once the controller has stopped or been killed, and
// nothing of it runs (its listeners closed: a new process may start).
func (c *Controller) Exited() <-chan struct{} { return c.exited }

// gated is a LUN's media store as this process writes it: once the
// process is killed, a write, punch or sync still on its way (held by a
// pause) fails instead of landing, and the kill waits for the ones already
// under way, as nothing of a killed process reaches the media after it.
// (A real kill needs no gate; an in-process kill, the tests' and the
// bubble's, does.)
type gated struct {
	media.Store
	g *gate
}

// gate is the state of a process's media writes: how many are under
// way, whether it is killed, and the hold of a pause (what a paused
// process had on its way to the media, a destage past its fence check,
// goes on when it resumes, or never if it is killed meanwhile). Every
// wait is on a Cond or a channel, so a synctest bubble's time runs on.
type gate struct {
	mu   sync.Mutex
	cond sync.Cond
	n    int
	dead bool
	hold chan struct{} // nil: not held
}

// enter admits one media write (false: the process is killed).
func (g *gate) enter() bool {
	g.mu.Lock()
	for g.hold != nil {
		ch := g.hold
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
	if g.dead {
		g.mu.Unlock()
		return false
	}
	g.n++
	g.mu.Unlock()
	return true
}

func (g *gate) leave() {
	g.mu.Lock()
	if g.n--; g.n == 0 && g.cond.L != nil {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// kill refuses every write from now and waits for those under way; what
// a pause held is refused.
func (g *gate) kill() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dead = true
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	for g.n > 0 {
		g.cond.Wait()
	}
	if g.hold != nil {
		close(g.hold)
		g.hold = nil
	}
}

// killed says whether kill has begun.
func (g *gate) killed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead
}

// pause holds the writes that come from now (on), or lets them go (off).
func (g *gate) pause(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case on && g.hold == nil && !g.dead:
		g.hold = make(chan struct{})
	case !on && g.hold != nil:
		close(g.hold)
		g.hold = nil
	}
}

// errKilled: a write of a killed process; retryable (the owner is down).
var errKilled = fmt.Errorf("%w: the process was killed", cache.ErrDown)

func (g gated) WriteAt(p []byte, off int64) error {
	if !g.g.enter() {
		return errKilled
	}
	defer g.g.leave()
	return g.Store.WriteAt(p, off)
}

func (g gated) Punch(off, length int64) error {
	if !g.g.enter() {
		return errKilled
	}
	defer g.g.leave()
	return g.Store.Punch(off, length)
}

func (g gated) Sync() error {
	if !g.g.enter() {
		return errKilled
	}
	defer g.g.leave()
	return g.Store.Sync()
}

// Run, Ref and Unref forward what the store offers (reads need no gate).
func (g gated) Run(off int64) (int64, bool, error) { return media.Run(g.Store, off) }

func (g gated) Ref(off int64, n int) ([]byte, bool) {
	if r, ok := g.Store.(media.Referencer); ok {
		return r.Ref(off, n)
	}
	return nil, false
}

func (g gated) Unref() { g.Store.(media.Referencer).Unref() }

// apply installs a record read or watched: the fence sees it, then the
// array adopts its owner (announcing the change). Under the LUN's lock,
// so no mirror copy is taken in between (the Mirror handler holds it too).
// A takeover replays the copies sent under the old owner's current
// mirror generation; older ones were voided.
func (c *Controller) apply(o cluster.Owned) {
	if c.final.Load() {
		return // stopped: its own clean-shutdown records are for the next start
	}
	mu := c.lunMu[o.LUN]
	l := c.arr.LUN(o.LUN)
	if mu == nil || l == nil || c.arr.Node(o.Owner) == nil {
		c.log.Error("a record names what the array does not have", "lun", o.LUN, "owner", o.Owner)
		return
	}
	mu.Lock()
	defer mu.Unlock()
	prev, ok := c.fence.View(o.LUN)
	if ok && o.Rev <= prev.Rev {
		return
	}
	c.fence.See(o)
	if c.stopping.Load() {
		return // the fence follows the records; the closing array does not
	}
	c.tellCore(o)
	if o.To == "" || l.Owner().Name != o.Owner {
		cause := alua.Cause(o.Cause)
		if cause == "" {
			cause = alua.CauseFailover
		}
		var replay func([]cache.MirrorPage) []cache.MirrorPage
		// Becoming the owner replays the copies unless this node saw the
		// planned hand-over's record ({owner: the old owner, to: this
		// node}): whatever the new record says, and however many records
		// came between (a takeover whose install failed, then a move).
		planned := prev.Owner == l.Owner().Name && prev.To == c.node
		if o.Owner == c.node && l.Owner() != c.arr.Local() && !planned {
			gens := c.mirrorGens(l.Owner().Name)
			replay = func(ps []cache.MirrorPage) []cache.MirrorPage {
				keep := make([]cache.MirrorPage, 0, len(ps))
				for _, p := range ps {
					if p.Gen >= gens[p.Inc] {
						keep = append(keep, p)
					}
				}
				if n := len(ps) - len(keep); n > 0 {
					c.log.Info("void mirror copies not replayed", "lun", o.LUN, "pages", n)
				}
				return keep
			}
		}
		ch, err := c.arr.Adopt(o.LUN, o.Owner, cause, replay)
		if err != nil && !errors.Is(err, array.ErrNoChange) {
			// The fence has seen the record: the array must follow it (the
			// copies went back to the mirror). Retried for this LUN alone,
			// while the record is the latest.
			c.log.Error("installing the owner; retrying", "lun", o.LUN, "owner", o.Owner, "err", err)
			c.wg.Add(1)
			go c.retryAdopt(o, cause, replay)
			return
		}
		switch {
		case errors.Is(err, array.ErrNoChange):
		case err != nil:
			c.log.Error("installing the owner", "lun", o.LUN, "owner", o.Owner, "err", err)
		default:
			c.log.Info("owner installed", "lun", o.LUN, "from", ch.From, "to", ch.To, "cause", ch.Cause,
				"replayed", ch.Replayed, "rev", o.Rev)
		}
	}
	c.wake()
}

// retryAdopt installs a record whose install failed, until it succeeds or
// a newer record of the LUN has been seen (its install supersedes it).
func (c *Controller) retryAdopt(o cluster.Owned, cause alua.Cause, replay func([]cache.MirrorPage) []cache.MirrorPage) {
	defer c.wg.Done()
	for c.ctx.Err() == nil {
		c.sleep(100 * time.Millisecond)
		mu := c.lunMu[o.LUN]
		mu.Lock()
		if v, _ := c.fence.View(o.LUN); v.Rev != o.Rev {
			mu.Unlock()
			return
		}
		_, err := c.arr.Adopt(o.LUN, o.Owner, cause, replay)
		mu.Unlock()
		if err == nil || errors.Is(err, array.ErrNoChange) {
			c.log.Info("owner installed after a retry", "lun", o.LUN, "owner", o.Owner, "rev", o.Rev)
			return
		}
	}
}

// mirrorGens reads a node's mirror generations, retrying until it can (a
// takeover cannot tell valid copies from void ones without them).
func (c *Controller) mirrorGens(node string) map[int64]int64 {
	for {
		ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
		gens, err := c.store.MirrorGens(ctx, node)
		cancel()
		if err == nil || c.ctx.Err() != nil {
			return gens
		}
		c.log.Warn("reading the mirror generations", "node", node, "err", err)
		c.sleep(100 * time.Millisecond)
	}
}

func (c *Controller) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// watchOwners follows the table from rev; a watch that ends is replaced
// after a fresh read.
func (c *Controller) watchOwners(rev int64) {
	defer c.wg.Done()
	follow(c, rev, c.store.WatchOwners, func(ev cluster.OwnerEvent) (int64, error) { return ev.Rev, ev.Err },
		func(ev cluster.OwnerEvent) { c.apply(ev.Owned) },
		func(ctx context.Context) (int64, error) {
			owners, r, err := c.store.Owners(ctx)
			if err == nil {
				for _, l := range c.arr.LUNs {
					if o, ok := owners[l.ID]; ok {
						c.apply(o)
					}
				}
			}
			return r, err
		})
}

// watchMembers marks the other nodes up and down as their leases come
// and go.
func (c *Controller) watchMembers(rev int64) {
	defer c.wg.Done()
	follow(c, rev, c.store.WatchMembers, func(ev cluster.MemberEvent) (int64, error) { return ev.Rev, ev.Err },
		func(ev cluster.MemberEvent) {
			if ev.Node != c.node && c.arr.Node(ev.Node) != nil {
				c.arr.SetRemoteUp(ev.Node, ev.Up)
				c.log.Info("member", "peer", ev.Node, "up", ev.Up)
				if !ev.Up {
					c.forgetNode(ev.Node, ev.Rev)
				}
				c.checkHolder() // (the partner may have changed)
			}
			c.wake()
		},
		func(ctx context.Context) (int64, error) {
			members, r, err := c.store.Members(ctx)
			if err == nil {
				for _, n := range c.arr.Nodes {
					if n.Remote() {
						_, up := members[n.Name]
						c.arr.SetRemoteUp(n.Name, up)
					}
				}
				c.wake()
			}
			return r, err
		})
}

// follow applies every event of a watch from rev until the controller
// stops; when the watch ends it reads afresh (reread applies what it
// read and returns its revision) and watches again from there.
func follow[T any](c *Controller, rev int64, watch func(context.Context, int64) <-chan T,
	outcome func(T) (int64, error), apply func(T), reread func(context.Context) (int64, error)) {
	for c.ctx.Err() == nil {
		for ev := range watch(c.ctx, rev) {
			r, err := outcome(ev)
			if err != nil {
				if c.ctx.Err() == nil {
					c.log.Warn("a watch ended; reading afresh", "err", err)
				}
				break
			}
			apply(ev)
			rev = max(rev, r)
		}
		for c.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			r, err := reread(ctx)
			cancel()
			if err == nil {
				rev = r
				break
			}
			c.sleep(200 * time.Millisecond)
		}
	}
}

func (c *Controller) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-c.ctx.Done():
	}
}

func hasNode(cfg config.Config, name string) bool {
	for _, n := range cfg.Nodes {
		if n.Name == name {
			return true
		}
	}
	return false
}
