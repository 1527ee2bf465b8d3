package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/cache"
	"github.com/aluad/aluad/pkg/interlink"
)

// The interlink: one connection per pair of controllers, dialled by the
// node whose name sorts first, accepted by the other, redialled while the
// peer is a member.

// A silent link ends after cluster.interlink_timeout (by default a
// quarter of the lease TTL: 0.5 s at 2 s), pinged every quarter of that:
// until then a write of this controller's own
// LUNs waits for its mirror copy, so a partner that freezes (SIGSTOP, a
// frozen VM) stalls them that long, and then they go on with the
// partner's copies voided.
func (c *Controller) linkOptions() interlink.Options {
	silent := c.cc.InterlinkTimeout
	if silent <= 0 { // a section built without Validate
		silent = c.cc.LeaseTTL / 4
	}
	return interlink.Options{Self: interlink.Hello{Array: c.o.Config.ArrayID, Node: c.node}, Handler: handler{c},
		Heartbeat: silent / 4, Timeout: silent}
}

func (c *Controller) acceptLoop() {
	defer c.wg.Done()
	for {
		nc, err := c.ln.Accept()
		if err != nil {
			if c.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			c.sleep(50 * time.Millisecond)
			continue
		}
		go func() {
			f := interlink.NewFaulty(nc, nil)
			ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			defer cancel()
			conn, err := interlink.Establish(ctx, f, c.linkOptions())
			if err != nil {
				c.log.Warn("interlink: a connection was refused", "remote", nc.RemoteAddr().String(), "err", err)
				nc.Close()
				return
			}
			c.register(conn, f)
		}()
	}
}

func (c *Controller) dialLoop() {
	defer c.wg.Done()
	for c.ctx.Err() == nil {
		for _, n := range c.arr.Nodes {
			if !n.Remote() || n.Name < c.node || !n.Up() || c.linkTo(n.Name) != nil || c.isCut(n.Name) {
				continue // (no connection is made across a cut)
			}
			ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			dial := c.o.Dial
			if dial == nil {
				var d net.Dialer
				dial = d.DialContext
			}
			nc, err := dial(ctx, "tcp", c.cc.Interlink[n.Name])
			if err == nil {
				f := interlink.NewFaulty(nc, nil)
				var conn *interlink.Conn
				if conn, err = interlink.Establish(ctx, f, c.linkOptions()); err == nil {
					c.register(conn, f)
				} else {
					nc.Close()
				}
			}
			cancel()
		}
		c.sleep(100 * time.Millisecond)
	}
}

// register makes conn the link to its peer, replacing an older one.
func (c *Controller) register(conn *interlink.Conn, f *interlink.Faulty) {
	peer := conn.Peer().Node
	if n := c.arr.Node(peer); n == nil || !n.Remote() {
		c.log.Warn("interlink: a peer that is no other node of the array", "peer", peer)
		conn.Close()
		return
	}
	c.mu.Lock()
	if c.ctx.Err() != nil || c.cuts[peer] {
		c.mu.Unlock()
		conn.Close()
		return
	}
	old := c.links[peer]
	l := &link{conn: conn, nc: f}
	f.Delay(c.delays[peer])
	if old != nil {
		// What was posted on the old link may never be answered: a loss,
		// marked before the new link can be used.
		c.lostLinkLocked()
	}
	c.links[peer] = l
	c.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
	c.log.Info("interlink up", "peer", peer)
	c.checkHolder()
	c.sendSnapshot(l)
	go func() {
		<-conn.Done()
		c.mu.Lock()
		current := c.links[peer] == l
		if current {
			// The loss is marked before the link leaves the table: a write
			// that finds no partner waits for the void (Settle).
			c.lostLinkLocked()
			delete(c.links, peer)
		}
		c.mu.Unlock()
		if current && c.ctx.Err() == nil {
			c.log.Warn("interlink down", "peer", peer, "err", conn.Err())
		}
		c.wake()
	}()
}

// CutInterlink cuts (or restores) this controller's end of its link to
// peer, as a network fault would: what it sends is held (the peer learns
// of the cut by its heartbeat), and a new connection cannot be made while
// the cut lasts.
func (c *Controller) CutInterlink(peer string, cut bool) error {
	if n := c.arr.Node(peer); n == nil || !n.Remote() {
		return fmt.Errorf("controller: no other node %q", peer)
	}
	c.mu.Lock()
	c.cuts[peer] = cut
	l := c.links[peer]
	c.mu.Unlock()
	if l != nil {
		return l.nc.Cut(cut)
	}
	return nil
}

// DelayInterlink adds latency to what this controller sends to peer (0:
// none), on the link now and on any made later.
func (c *Controller) DelayInterlink(peer string, d time.Duration) error {
	if n := c.arr.Node(peer); n == nil || !n.Remote() {
		return fmt.Errorf("controller: no other node %q", peer)
	}
	if d < 0 || d > time.Minute {
		return errors.New("controller: an interlink delay is from 0 (none) to 1m")
	}
	c.mu.Lock()
	c.delays[peer] = d
	l := c.links[peer]
	c.mu.Unlock()
	if l != nil {
		l.nc.Delay(d)
	}
	return nil
}

// inject takes the faults of a controller process (daemon.Options.Faults):
// its interlink's; a node fault is the process's own (kill it, start it).
func (c *Controller) inject(f api.Fault) (bool, error) {
	switch f.Kind {
	case api.FaultInterlinkCut, api.FaultInterlinkRestore:
		if err := c.CutInterlink(f.Node, f.Kind == api.FaultInterlinkCut); err != nil {
			return true, err
		}
		if f.Kind == api.FaultInterlinkRestore {
			return true, c.DelayInterlink(f.Node, 0)
		}
		return true, nil
	case api.FaultInterlinkDelay:
		return true, c.DelayInterlink(f.Node, f.Delay)
	case api.FaultMediaDelay:
		if f.Delay < 0 {
			return true, fmt.Errorf("media-delay: a negative delay (%v)", f.Delay)
		}
		c.media.Delay(f.Delay)
		return true, nil
	case api.FaultPowerLoss, api.FaultPanic, api.FaultCrash, api.FaultRestart:
		return true, fmt.Errorf("a controller process fails as a process: kill it (kill -9 is a power loss) and start it again; "+
			"this one runs node %s", c.node)
	}
	return false, nil
}

func (c *Controller) isCut(peer string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cuts[peer]
}

func (c *Controller) linkTo(node string) *link {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.links[node]
}

// partnerName is the mirror partner: the next node up after this one in
// configuration order. Copies go to it once a mirror generation names it
// as the holder (mirror.go); the leader takes this node's LUNs over to
// the holder of its latest generation.
func (c *Controller) partnerName() string {
	local := c.arr.Local()
	for i := 1; i < len(c.arr.Nodes); i++ {
		if n := c.arr.Nodes[(local.Index+i)%len(c.arr.Nodes)]; n.Up() {
			return n.Name
		}
	}
	return ""
}

// forwardLifetime bounds how long after its sending a forwarded write or
// unmap may still take effect on the owner (interlink.Conn.Forward): half
// the lease TTL, 1 s at the default 2 s. A forwarder that gets no answer
// (the link died, or the owner is that slow) answers the host only once
// it has passed, so the host never retries, then writes the block again,
// while the first write can still land. It is the longest a host waits
// for its answer then (the heartbeat ends a dead link after
// cluster.interlink_timeout, by default a quarter of the TTL: sooner),
// and a command that reaches the owner's cache later
// than that (a link delayed as long, an owner stalled) is refused, and
// retried by the host.
func (c *Controller) forwardLifetime() time.Duration { return c.cc.LeaseTTL / 2 }

// Forward implements array.Remote: the command runs on the owner.
func (c *Controller) Forward(owner *array.Node, l *array.LUN, op *array.Op) error {
	lk := c.linkTo(owner.Name)
	if lk == nil {
		return array.ErrOwnerDown
	}
	bs := int64(l.BlockSize)
	m, err := toForward(op, bs, c.fence.Token(l.ID))
	if err != nil {
		return err
	}
	// A write or an unmap is waited for as long as it may take effect;
	// what changes nothing a later command could see out of order (a
	// read, a cache sync, LBA status) as long as a move could take.
	effect := op.Kind == array.OpWrite || op.Kind == array.OpUnmap
	wait := 2 * c.cc.LeaseTTL
	if effect {
		wait = c.forwardLifetime()
	}
	ctx, cancel := context.WithTimeout(c.ctx, wait)
	defer cancel()
	r, expires, err := lk.conn.Forward(ctx, uint32(l.ID), m, c.forwardLifetime())
	switch {
	case err == nil:
	case errors.Is(err, interlink.ErrNotOwner), errors.Is(err, interlink.ErrFenced), errors.Is(err, interlink.ErrExpired):
		return array.ErrNotServing // the owner refused it: it did not and will not apply it
	case errors.Is(err, interlink.ErrClosed), ctx.Err() != nil:
		// No answer: the owner may still apply it until it expires.
		if effect {
			time.Sleep(time.Until(expires))
		}
		return array.ErrOwnerDown
	default:
		return err
	}
	switch op.Kind {
	case array.OpRead:
		if len(r.DataIn) != len(op.Data) {
			return fmt.Errorf("controller: the owner returned %d bytes for a %d-byte read", len(r.DataIn), len(op.Data))
		}
		copy(op.Data, r.DataIn)
	case array.OpLBAStatus:
		return readLBAStatus(op, r.DataIn, bs)
	}
	return nil
}

// Serves implements array.Remote.
func (c *Controller) Serves(lun uint64) bool {
	return !c.stopping.Load() && !c.gone.Load() && c.fence.Serves(lun)
}

// Holds implements array.Remote.
func (c *Controller) Holds(lun uint64) bool { return c.fence.Holds(lun) }

// handler serves the peers' requests.
type handler struct{ c *Controller }

// enter admits a peer's request while the controller is not stopping;
// Stop waits for those admitted before it closes the array.
func (c *Controller) enter() (func(), error) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.closing {
		return nil, fmt.Errorf("%w: node %s is stopping", interlink.ErrNotOwner, c.node)
	}
	c.inflight++
	return func() {
		c.hmu.Lock()
		if c.inflight--; c.inflight == 0 {
			c.hcond.Broadcast()
		}
		c.hmu.Unlock()
	}, nil
}

// Forward serves a command another controller forwarded. A write or an
// unmap takes effect only while interlink.Live holds where it does (in
// the cache, ordered before the LUN's later commands): its link has not
// ended and its deadline has not passed. Its forwarder answers a command
// it gets no reply for only after that deadline.
func (h handler) Forward(ctx context.Context, lun uint32, m interlink.Forward) (interlink.ForwardReply, error) {
	c := h.c
	leave, err := c.enter()
	if err != nil {
		return interlink.ForwardReply{}, err
	}
	defer leave()
	l := c.arr.LUN(uint64(lun))
	if l == nil {
		return interlink.ForwardReply{}, fmt.Errorf("no LUN %d", lun)
	}
	if err := c.fence.Check(uint64(lun), m.Token); err != nil {
		return interlink.ForwardReply{}, fmt.Errorf("%w: %v", interlink.ErrFenced, err)
	}
	bs := int64(l.BlockSize)
	op, err := fromForward(m, bs)
	if err != nil {
		return interlink.ForwardReply{}, err
	}
	if err := c.arr.ServeForwarded(uint64(lun), &op, func() error { return interlink.Live(ctx) }); err != nil {
		if errors.Is(err, array.ErrNotServing) || errors.Is(err, array.ErrOwnerDown) {
			return interlink.ForwardReply{}, fmt.Errorf("%w: %v", interlink.ErrNotOwner, err)
		}
		return interlink.ForwardReply{}, err
	}
	switch op.Kind {
	case array.OpRead:
		return interlink.ForwardReply{DataIn: op.Data}, nil
	case array.OpLBAStatus:
		return interlink.ForwardReply{DataIn: lbaStatusReply(&op, bs)}, nil
	}
	return interlink.ForwardReply{}, nil
}

func (h handler) Mirror(_ context.Context, lun uint32, m interlink.Mirror) error {
	c := h.c
	leave, err := c.enter()
	if err != nil {
		return err
	}
	defer leave()
	mu := c.lunMu[uint64(lun)]
	if mu == nil || m.Offset < 0 || m.Offset%c.ps != 0 || int64(len(m.Data)) != c.ps {
		return fmt.Errorf("a copy of %d bytes at %d of LUN %d is no page", len(m.Data), m.Offset, lun)
	}
	// Under the LUN's lock: a copy is held before a takeover of the LUN
	// takes the copies, or refused after it (the view names this node).
	mu.Lock()
	defer mu.Unlock()
	if err := c.fence.Check(uint64(lun), m.Token); err != nil {
		return fmt.Errorf("%w: %v", interlink.ErrFenced, err)
	}
	if v, _ := c.fence.View(uint64(lun)); v.Owner == c.node {
		return fmt.Errorf("%w: this node owns LUN %d", interlink.ErrFenced, lun)
	}
	c.arr.Local().Cache.Hold(uint64(lun), []cache.MirrorPage{{Idx: m.Offset / c.ps, Ver: m.Ver, Data: m.Data, Inc: m.Inc, Gen: m.Gen}})
	return nil
}

func (h handler) Drop(_ context.Context, lun uint32, m interlink.Drop) error {
	c := h.c
	// Served while stopping too (it touches the mirror's memory only, not
	// the array): a partner stopping at the same time settles its releases.
	mu := c.lunMu[uint64(lun)]
	if mu == nil || m.Offset < 0 || m.Length < 0 || m.Offset%c.ps != 0 || m.Length%c.ps != 0 || m.Length > 1<<30 {
		return fmt.Errorf("a release of %d bytes at %d is not whole pages", m.Length, m.Offset)
	}
	// A release of a LUN this node took over comes from an owner that was
	// fenced out: refused, so the owner does not acknowledge what it wrote.
	mu.Lock()
	defer mu.Unlock()
	if v, _ := c.fence.View(uint64(lun)); v.Owner == c.node {
		return fmt.Errorf("%w: this node owns LUN %d", interlink.ErrFenced, lun)
	}
	var ps []cache.MirrorPage
	for off := m.Offset; off < m.Offset+m.Length; off += c.ps {
		ps = append(ps, cache.MirrorPage{Idx: off / c.ps, Ver: m.Ver})
	}
	c.arr.Local().Cache.Release(uint64(lun), ps)
	return nil
}

func (h handler) Flush(ctx context.Context, lun uint32, m interlink.Flush) error {
	leave, err := h.c.enter()
	if err != nil {
		return err
	}
	defer leave()
	return h.c.handOff(ctx, uint64(lun), m.Token)
}

// handOff is the old owner's step of a planned move, asked for by the
// leader with the token of the record that names the new owner as the
// target: once this node's view holds that record (it no longer serves
// the LUN as owner), it destages the LUN and waits until its partner has
// every copy and release it sent, then acknowledges.
func (c *Controller) handOff(ctx context.Context, lun uint64, token int64) error {
	deadline := time.Now().Add(c.cc.LeaseTTL)
	for c.fence.Token(lun) < token && time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		o, err := c.store.Owner(rctx, lun)
		cancel()
		if err == nil && o.Rev >= token {
			c.apply(o)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	v, _ := c.fence.View(lun)
	if v.Rev != token || v.Owner != c.node || v.To == "" || v.Rev <= c.ms.JoinRevision() {
		return fmt.Errorf("%w: LUN %d: the hand-over's record is at %d, this node holds %d (owner %s, to %q)",
			interlink.ErrFenced, lun, token, v.Rev, v.Owner, v.To)
	}
	if err := c.arr.Release(lun); err != nil {
		return err
	}
	if err := (mirror{c}).Settle(); err != nil {
		return fmt.Errorf("the partner's copies are neither released nor void: %w", err)
	}
	return nil
}
