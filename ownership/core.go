package ownership

import (
	"fmt"
	"sort"

	"github.com/aluad/aluad/pkg/alua"
)

// Core is the ownership state machine. It is not safe for concurrent use:
// one goroutine owns it (CONVENTIONS 1).
type Core struct {
	cfg   Config
	now   int
	nodes map[string]*node
	hosts map[string]*host
	luns  map[uint64]*lun
	// sorted keys, so every iteration is deterministic
	nodeNames []string
	lunIDs    []uint64
	hostNames []string

	ready    Ready
	conds    map[condKey]*condState
	lastPlan int
	// lastOperator: the tick of the last operator's move (balance holds
	// back for the cooldown after it); stressSince: since when the array
	// has been stressed (-1: not now).
	lastOperator int
	stressSince  int
	// gen counts connectivity changes; reachable() caches per host by it.
	gen   uint64
	reach map[string]reachEntry
	// up is the cached list of up nodes (valid while upGen == gen);
	// scratch is reused by allowed().
	up      []string
	upGen   uint64
	scratch []int
}

type reachEntry struct {
	gen   uint64
	nodes []string
	idx   []int
}

type node struct {
	name     string
	up       bool
	capacity float64
	portDown map[uint16]bool
	// movedOff: the LUNs failed over off the node, or moved off while it
	// was down, and not back on it since (Node Offline names them);
	// cleared when the node comes back up.
	movedOff map[uint64]bool
	// rt is the rolling mean response time of I/O served here (µs);
	// bestRT the best rolling value seen with enough operations.
	rt, bestRT float64
	// this tick's operations and their summed response times; ops is
	// their rolling count
	pendOps, pendRT float64
	ops             float64
	// failures: the ticks it went down at, within CrashWindow; upSince:
	// when it last came up; unstable since unstableAt (crashloop.go).
	failures   []int
	upSince    int
	unstable   bool
	unstableAt int
}

type lun struct {
	id               uint64
	preferred, owner string
	media, group     string
	// arrive is the rolling work per tick arriving at each node; pending
	// collects the current tick's samples.
	arrive, pending map[string]float64
	// users: hosts that sent RTPG or sustained media I/O for this LUN.
	users map[string]bool
	// hostArrive is each user's rolling media work per tick at each node
	// (hostPending: this tick's); media holds, per host, the recent ticks
	// its media I/O to the LUN arrived in (mediaSeen).
	hostArrive, hostPending map[string]map[string]float64
	mediaSeen               map[string]evidence
	// follow: the check of who followed the LUN's last planned move
	// (behaviour.go); nil when none is running.
	follow *followCheck
	// failovers: ticks of recent failovers (damping); damped: since when
	// the LUN is held on its reachable owner (-1: not); flapHosts: the
	// hosts whose lost paths caused its failovers.
	failovers []int
	damped    int
	flapHosts []string
	// flapping: the failover being decided is off an owner that is up;
	// flapFrom and lastFlap: the node the last counted failover left and
	// when; dampedBy: the failover that damped it, dampedCount the count
	// then.
	flapping              bool
	flapFrom              string
	lastFlap              int
	dampedBy, dampedCount int
	// lastMove is the tick of the last ownership change (-inf: never),
	// lastCause its cause.
	lastMove  int
	lastCause alua.Cause
	// displaced: moved off its preferred owner by a failover; failback
	// brings it home once the recovery is complete and stable.
	// wasDisplaced: before the last move (a rollback restores it).
	displaced, wasDisplaced bool
	// prefOKSince: since when every user reaches the preferred owner
	// (-1: not now).
	prefOKSince int
	// changes are the ticks of recent owner changes (thrash detection).
	changes []int
	// shipTo/shipSince: the non-owner node most I/O has arrived at, and
	// since when.
	shipTo    string
	shipSince int
	// failures counts the LUN's moves rolled back in a row; no move of it
	// is decided before retryAt (a doubling back-off, so a move the array
	// cannot carry out is not asked for again in a loop).
	failures int
	retryAt  int
}

// maxRetryTicks caps the back-off after rolled-back moves.
const maxRetryTicks = 32

const never = -1 << 30

// New makes a core. Declare nodes, hosts and LUNs with NodeDecl, HostDecl
// and LUNDecl events before feeding the rest.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{cfg: cfg, nodes: map[string]*node{}, hosts: map[string]*host{}, luns: map[uint64]*lun{},
		conds: map[condKey]*condState{}, lastPlan: never, lastOperator: never, stressSince: -1,
		reach: map[string]reachEntry{}}, nil
}

// Now is the current logical time in ticks.
func (c *Core) Now() int { return c.now }

// Owner returns a LUN's owner as the core believes it.
func (c *Core) Owner(id uint64) string {
	if l := c.luns[id]; l != nil {
		return l.owner
	}
	return ""
}

// LUNs lists the declared LUN ids in order.
func (c *Core) LUNs() []uint64 { return append([]uint64(nil), c.lunIDs...) }

// Nodes lists the declared node names in order.
func (c *Core) Nodes() []string { return append([]string(nil), c.nodeNames...) }

// Ready returns the decisions made since the last Advance.
func (c *Core) Ready() Ready { return c.ready }

// Advance acknowledges the last Ready: its batches were started. A batch
// that then fails must be reported with OwnerChanged{Cause: CauseRollback}.
func (c *Core) Advance() { c.ready = Ready{} }

// Step feeds one event. An error means the event was malformed (unknown
// node, LUN or host); the state is then unchanged.
func (c *Core) Step(e Event) error {
	switch e := e.(type) {
	case Tick:
		c.now++
		c.tick()
	case NodeDecl:
		return c.declareNode(e)
	case HostDecl:
		h := c.hostOf(e.Host)
		if h.typ != e.Type {
			h.typ = e.Type
			h.obs.resetFollow() // a new type is judged afresh
			h.obs.mediaSince = -1
			c.updateHandoffs([]string{h.name})
		}
	case HandoffSync:
		c.resyncHandoffs(e.Host)
	case Rehome:
		c.rehome(e)
	case LUNDecl:
		return c.declareLUN(e)
	case NodeState:
		n := c.nodes[e.Node]
		if n == nil {
			return fmt.Errorf("ownership: unknown node %q", e.Node)
		}
		if e.Up && !n.up {
			clear(n.movedOff)
			n.upSince = c.now
		}
		if !e.Up && n.up {
			c.noteFailure(n)
		}
		n.up = e.Up
		if !e.Up {
			c.unflap(e.Node)
			for _, name := range c.hostNames {
				c.forgetIfUnconnected(c.hosts[name], e.Node)
			}
		}
		c.gen++
		c.reconcile(nil)
	case PortState:
		n := c.nodes[e.Node]
		if n == nil {
			return fmt.Errorf("ownership: unknown node %q", e.Node)
		}
		n.portDown[e.Port] = !e.Up
		if !e.Up {
			for _, name := range c.hostNames {
				c.forgetIfUnconnected(c.hosts[name], e.Node)
			}
		}
		c.gen++
		c.reconcile(nil)
	case Login:
		if c.nodes[e.Nexus.Node] == nil {
			return fmt.Errorf("ownership: login to unknown node %q", e.Nexus.Node)
		}
		c.login(e.Nexus)
		c.reconcile(c.hosts[e.Nexus.Host])
	case Logout:
		c.logout(e)
		if h := c.hosts[e.Nexus.Host]; h != nil {
			c.reconcile(h)
		}
	case RTPG:
		l := c.luns[e.LUN]
		if l == nil || c.nodes[e.Nexus.Node] == nil {
			return fmt.Errorf("ownership: RTPG for unknown LUN %d or node %q", e.LUN, e.Nexus.Node)
		}
		c.rtpg(e.Nexus)
		h := c.hosts[e.Nexus.Host]
		c.use(l, h)
		h.obs.rtpg = true
		h.obs.extended = h.obs.extended || e.Extended
		c.reconcile(c.hosts[e.Nexus.Host])
	case IO:
		if err := c.io(e); err != nil {
			return err
		}
	case PathLatency:
		return c.pathLatency(e)
	case Rebalance:
		c.rebalanceNow()
	case ClearReport:
		return c.clearReport(e)
	case OwnerChanged:
		l := c.luns[e.LUN]
		if l == nil || c.nodes[e.Owner] == nil {
			return fmt.Errorf("ownership: owner change for unknown LUN %d or node %q", e.LUN, e.Owner)
		}
		if l.owner != e.Owner {
			c.setOwner(l, e.Owner, e.Cause)
		}
		if e.Cause == alua.CauseManual {
			c.lastOperator = c.now
		}
		if e.Cause == alua.CauseRollback {
			if n := len(l.failovers); n > 0 && l.failovers[n-1] == l.lastMove && l.lastCause == alua.CauseFailover && l.flapping {
				l.failovers = l.failovers[:n-1] // it did not happen
				if l.damped >= 0 && l.dampedBy == l.lastMove {
					l.damped = -1 // nor did the damping it set off
				}
			}
			if n := len(l.changes); n > 0 && l.changes[n-1] == l.lastMove {
				l.changes = l.changes[:n-1] // nor did the change (no thrash)
			}
			l.failures++
			l.retryAt = c.now + min(1<<min(l.failures-1, 5), maxRetryTicks)
		}
		c.reconcile(nil)
	default:
		return fmt.Errorf("ownership: unknown event %T", e)
	}
	return nil
}

func (c *Core) declareNode(e NodeDecl) error {
	if e.Node == "" || e.Capacity <= 0 {
		return fmt.Errorf("ownership: node %q needs a name and a positive capacity", e.Node)
	}
	if n := c.nodes[e.Node]; n != nil {
		n.capacity = e.Capacity
		return nil
	}
	c.nodes[e.Node] = &node{name: e.Node, up: true, capacity: e.Capacity, portDown: map[uint16]bool{}, movedOff: map[uint64]bool{}}
	c.nodeNames = append(c.nodeNames, e.Node)
	sort.Strings(c.nodeNames)
	c.gen++
	return nil
}

func (c *Core) declareLUN(e LUNDecl) error {
	if c.nodes[e.Preferred] == nil || c.nodes[e.Owner] == nil {
		return fmt.Errorf("ownership: LUN %d: preferred %q and owner %q must be declared nodes", e.LUN, e.Preferred, e.Owner)
	}
	l := c.luns[e.LUN]
	if l == nil {
		l = &lun{id: e.LUN, arrive: map[string]float64{}, users: map[string]bool{}, lastMove: never, prefOKSince: -1,
			damped: -1, lastFlap: never}
		c.luns[e.LUN] = l
		c.lunIDs = append(c.lunIDs, e.LUN)
		sort.Slice(c.lunIDs, func(i, j int) bool { return c.lunIDs[i] < c.lunIDs[j] })
	}
	l.preferred, l.owner, l.media, l.group = e.Preferred, e.Owner, e.Media, e.Group
	return nil
}

// setOwner records an ownership change, decided here or reported.
func (c *Core) setOwner(l *lun, to string, cause alua.Cause) {
	from := l.owner
	l.owner = to
	if cause != alua.CauseRollback {
		l.lastMove, l.lastCause = c.now, cause
		l.changes = append(l.changes, c.now)
	}
	if cause == alua.CauseRollback {
		l.displaced = l.wasDisplaced // the move did not happen
	} else {
		l.wasDisplaced = l.displaced
		if f := c.nodes[from]; f != nil && (cause == alua.CauseFailover || !f.up) {
			// Off its node by a failover, or by any move (a host's STPG
			// in explicit mode) while the node is down: Node Offline
			// names it until the node is back.
			f.movedOff[l.id] = true
		}
	}
	if t := c.nodes[to]; t != nil {
		delete(t.movedOff, l.id) // back (or a rolled-back move: never left)
	}
	switch cause {
	case alua.CauseRollback:
	case alua.CauseFailover:
		l.displaced = to != l.preferred
		if l.flapping {
			// A failover off an owner that is up because hosts lost their
			// paths to it (damping counts these; a node going down or a
			// host leaving is not a path flapping). The count reaching
			// DampCount within the window damps the LUN, again after a
			// release if it is still reached.
			l.failovers = append(l.failovers, c.now)
			l.flapFrom, l.lastFlap = from, c.now
			if l.damped < 0 && len(l.failovers) >= c.cfg.DampCount {
				l.damped, l.dampedBy, l.dampedCount = c.now, c.now, len(l.failovers)
			}
		}
	default:
		l.displaced = false
	}
	switch cause {
	case alua.CauseFailback, alua.CauseBalance, alua.CauseShipping, alua.CauseManual, alua.CauseFailover:
		l.follow = nil
		c.startFollow(l, from, cause)
	case alua.CauseRollback:
	default:
		l.follow = nil
	}
}

// unflap: node went down. A failover off it counted as a path flap in
// this tick or the last was the node's loss seen first through its
// sessions ending: it is not a flap.
func (c *Core) unflap(node string) {
	for _, id := range c.lunIDs {
		l := c.luns[id]
		if n := len(l.failovers); n > 0 && l.flapFrom == node && c.now-l.failovers[n-1] <= 1 {
			if l.damped >= 0 && l.dampedBy == l.failovers[n-1] {
				l.damped = -1
			}
			l.failovers = l.failovers[:n-1]
			l.flapFrom = ""
		}
	}
}

// tick runs the time-driven parts: failback (every tick), shipping and
// balance at the plan interval, and the report conditions.
func (c *Core) tick() {
	c.foldWorkload()
	c.foldPaths()
	c.expireProbes()
	c.trackShipping()
	c.trackFollow()
	c.reconcile(nil)
	c.trackDamping()
	c.trackCrashes()
	c.emit(c.failbacks())
	c.trackStress()
	if c.now-c.lastPlan >= c.cfg.PlanInterval && !c.failbackPending() {
		c.lastPlan = c.now
		c.plan()
	}
	c.updateHandoffs(nil) // the pushes of this tick's moves, with them
	c.evaluateReports()
}

// use records that host h uses LUN l.
func (c *Core) use(l *lun, h *host) {
	if !l.users[h.name] {
		l.users[h.name] = true
		h.uses[l.id] = true
	}
}

// class is a LUN's performance class for batching.
func (l *lun) class() string { return l.media + "/" + l.group }
