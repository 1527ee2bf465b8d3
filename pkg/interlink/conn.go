package interlink

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/clock"
)

// Handler serves a peer's requests. Errors wrapping ErrFenced, ErrNotOwner
// or ErrExpired reach the peer as those codes; any other as ErrFailed. A
// Forward applies its command only where Live(ctx) holds.
type Handler interface {
	Forward(ctx context.Context, lun uint32, m Forward) (ForwardReply, error)
	Mirror(ctx context.Context, lun uint32, m Mirror) error
	Drop(ctx context.Context, lun uint32, m Drop) error
	Flush(ctx context.Context, lun uint32, m Flush) error
	Report(ctx context.Context, m Report) error
	Move(ctx context.Context, m Move) error
}

// Options configure a connection.
type Options struct {
	// Self is what this side says in its hello; the peer must name the
	// same array.
	Self Hello
	// Handler serves the peer's requests (nil: every request is refused).
	Handler Handler
	// Heartbeat pings the peer every interval, and closes the connection
	// with ErrSilent when no frame has arrived for Timeout (zero: none).
	Heartbeat, Timeout time.Duration
	// Clock paces the heartbeat (nil: the real one).
	Clock clock.Clock
}

// ErrSilent closes a connection whose peer sent nothing for the timeout.
var ErrSilent = errors.New("interlink: the peer is silent")

// ErrClosed is a request on a closed connection.
var ErrClosed = errors.New("interlink: connection closed")

// Conn is one established interlink connection. Both sides may send
// requests; replies are matched by id. Forwarded commands are served
// concurrently; mirror copies, releases and flushes of one LUN are served
// one at a time in the order they arrived, so a release never overtakes
// the copy it releases, nor an older copy a newer one.
type Conn struct {
	nc   net.Conn
	o    Options
	peer Hello

	wmu sync.Mutex
	bw  *bufio.Writer

	mu     sync.Mutex
	calls  map[uint64]chan Frame
	lanes  map[uint32]chan Frame
	nextID uint64
	err    error
	last   atomic.Int64 // unix nanoseconds a byte last arrived

	out outbox

	// base is this side's epoch for the link clock (stamp); anchor is the
	// peer's latest stamp with this side's clock when it came (heard).
	base   time.Time
	amu    sync.Mutex
	anchor anchor

	done chan struct{}
	wg   sync.WaitGroup
}

// liveReader notes every byte that arrives: a peer in the middle of a
// large frame is not silent.
type liveReader struct {
	r    io.Reader
	last *atomic.Int64
	clk  interface{ Now() time.Time }
}

func (l *liveReader) Read(b []byte) (int, error) {
	n, err := l.r.Read(b)
	if n > 0 && l.last != nil {
		l.last.Store(l.clk.Now().UnixNano())
	}
	return n, err
}

// Dial connects to a peer's interlink listener with dial (nil: TCP).
func Dial(ctx context.Context, addr string, o Options, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("interlink: %s: %w", addr, err)
	}
	c, err := establish(ctx, nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Accept takes one connection from l and establishes it.
func Accept(ctx context.Context, l net.Listener, o Options) (*Conn, error) {
	nc, err := l.Accept()
	if err != nil {
		return nil, err
	}
	c, err := establish(ctx, nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Establish exchanges hellos over a connection the caller opened (one it
// wrapped, with Faulty for one) and starts the connection's loops.
func Establish(ctx context.Context, nc net.Conn, o Options) (*Conn, error) {
	return establish(ctx, nc, o)
}

// establish exchanges hellos (each side sends first, then reads) and
// starts the connection's loops.
func establish(ctx context.Context, nc net.Conn, o Options) (*Conn, error) {
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	lr := &liveReader{r: nc, clk: o.Clock}
	br := bufio.NewReaderSize(lr, 256<<10)
	base := o.Clock.Now()
	self := o.Self
	self.Stamp = int64(o.Clock.Now().Sub(base))
	if _, err := nc.Write(AppendFrame(nil, Frame{Header: Header{Type: THello}, Payload: self.Marshal()})); err != nil {
		return nil, fmt.Errorf("interlink: hello: %w", err)
	}
	f, err := ReadFrame(br)
	if err != nil {
		return nil, fmt.Errorf("interlink: hello: %w", err)
	}
	var peer Hello
	if f.Type != THello {
		return nil, fmt.Errorf("%w: the first frame is %s, not hello", ErrFrame, f.Type)
	}
	if err := peer.Unmarshal(f.Payload); err != nil {
		return nil, err
	}
	heard := int64(o.Clock.Now().Sub(base))
	if peer.Array != o.Self.Array {
		return nil, fmt.Errorf("interlink: the peer %s serves array %q, not %q", peer.Node, peer.Array, o.Self.Array)
	}
	nc.SetDeadline(time.Time{})
	c := &Conn{nc: nc, o: o, peer: peer, bw: bufio.NewWriterSize(nc, 256<<10), calls: map[uint64]chan Frame{},
		lanes: map[uint32]chan Frame{}, done: make(chan struct{}), base: base, anchor: anchor{peer: peer.Stamp, local: heard}}
	c.out.waiting, c.out.kick = map[*Pending]bool{}, make(chan struct{}, 1)
	c.last.Store(o.Clock.Now().UnixNano())
	lr.last = &c.last
	c.wg.Add(2)
	go c.readLoop(br)
	go c.poster()
	if o.Heartbeat > 0 && o.Timeout > 0 {
		c.wg.Add(1)
		go c.heartbeat()
	}
	return c, nil
}

// Peer is what the peer said in its hello.
func (c *Conn) Peer() Hello { return c.peer }

// Done is closed when the connection ends; Err says why.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it runs).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection; requests in flight fail with ErrClosed. It
// waits for the connection's own loops, not for handlers still running
// (their contexts are canceled; their replies go nowhere).
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	c.wg.Wait()
	return nil
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	calls := c.calls
	c.calls = map[uint64]chan Frame{}
	c.mu.Unlock()
	close(c.done)
	c.nc.Close()
	for _, ch := range calls {
		close(ch)
	}
}

func (c *Conn) send(f Frame) error {
	b := AppendFrame(make([]byte, 0, HeaderLen+len(f.Payload)), f)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.bw.Write(b); err != nil {
		c.fail(err)
		return err
	}
	if err := c.bw.Flush(); err != nil {
		c.fail(err)
		return err
	}
	return nil
}

// call sends a request and waits for its reply.
func (c *Conn) call(ctx context.Context, t Type, lun uint32, payload []byte) (Frame, error) {
	if len(payload) > MaxPayload {
		return Frame{}, fmt.Errorf("interlink: a %d-byte %s (at most %d)", len(payload), t, MaxPayload)
	}
	ch := make(chan Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return Frame{}, fmt.Errorf("%w (%v)", ErrClosed, err)
	}
	c.nextID++
	id := c.nextID
	c.calls[id] = ch
	c.mu.Unlock()
	if err := c.send(Frame{Header: Header{Type: t, ID: id, LUN: lun}, Payload: payload}); err != nil {
		return Frame{}, fmt.Errorf("%w (%v)", ErrClosed, err)
	}
	select {
	case f, ok := <-ch:
		if !ok {
			return Frame{}, fmt.Errorf("%w (%v)", ErrClosed, c.Err())
		}
		if f.Type != t|TReply {
			err := fmt.Errorf("%w: a %s answers a %s", ErrFrame, f.Type, t)
			c.fail(err)
			return Frame{}, err
		}
		return f, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		return Frame{}, ctx.Err()
	}
}

// ack reads a reply that is an Ack.
func ack(f Frame) error {
	if f.Type&TReply == 0 {
		return fmt.Errorf("%w: %s is no reply", ErrFrame, f.Type)
	}
	var a Ack
	if err := a.Unmarshal(f.Payload); err != nil {
		return err
	}
	return a.Err()
}

// Forward sends a command to the owner and returns its answer. The owner
// applies it only before a deadline (m.Deadline, set here) that passes,
// in real time, no later than expires: lifetime after the send, on this
// side's clock (Options.Clock). After expires, a command whose outcome
// is unknown (no reply: the connection closed, ctx ended) can no longer
// take effect; one the owner did not apply in time is refused with
// ErrExpired.
func (c *Conn) Forward(ctx context.Context, lun uint32, m Forward, lifetime time.Duration) (r ForwardReply, expires time.Time, err error) {
	if c.stamp()-c.lastAnchor().local > int64(lifetime) {
		c.Ping(ctx) // no heartbeat kept the anchor fresh (its error is the call's too)
	}
	a := c.lastAnchor()
	sent := c.stamp()
	m.Deadline = peerDeadline(a, sent, lifetime)
	expires = c.base.Add(time.Duration(sent) + lifetime)
	f, err := c.call(ctx, TForward, lun, m.Marshal())
	if err != nil {
		return ForwardReply{}, expires, err
	}
	if f.Flags&flagAck != 0 {
		return ForwardReply{}, expires, ack(f)
	}
	return r, expires, r.Unmarshal(f.Payload)
}

// Mirror sends a write-back copy; it returns once the peer holds it.
func (c *Conn) Mirror(ctx context.Context, lun uint32, m Mirror) error {
	f, err := c.call(ctx, TMirror, lun, m.Marshal())
	if err != nil {
		return err
	}
	return ack(f)
}

// Drop releases mirror copies.
func (c *Conn) Drop(ctx context.Context, lun uint32, m Drop) error {
	f, err := c.call(ctx, TDrop, lun, m.Marshal())
	if err != nil {
		return err
	}
	return ack(f)
}

// Flush asks the owner to write the LUN's dirty cache to the media.
func (c *Conn) Flush(ctx context.Context, lun uint32, m Flush) error {
	f, err := c.call(ctx, TFlush, lun, m.Marshal())
	if err != nil {
		return err
	}
	return ack(f)
}

// Ping measures a round trip; the peer's stamp in the reply anchors the
// deadlines of the commands forwarded after it.
func (c *Conn) Ping(ctx context.Context) (time.Duration, error) {
	start := c.o.Clock.Now()
	f, err := c.call(ctx, TPing, 0, Ping{Stamp: int64(start.Sub(c.base))}.Marshal())
	if err != nil {
		return 0, err
	}
	now := c.o.Clock.Now()
	var p Ping
	if err := p.Unmarshal(f.Payload); err != nil {
		c.fail(err)
		return 0, err
	}
	c.heard(p.Stamp, int64(now.Sub(c.base)))
	return now.Sub(start), nil
}

// flagAck marks a reply whose payload is an Ack (a Forward that failed).
const flagAck = 1

func (c *Conn) readLoop(br *bufio.Reader) {
	defer c.wg.Done()
	for {
		f, err := ReadFrame(br)
		if err != nil {
			c.fail(err)
			return
		}
		if f.Type&TReply != 0 {
			c.mu.Lock()
			ch := c.calls[f.ID]
			delete(c.calls, f.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- f
			}
			continue
		}
		switch f.Type {
		case TPing:
			var p Ping
			if err := p.Unmarshal(f.Payload); err != nil {
				c.fail(err)
				return
			}
			c.heard(p.Stamp, c.stamp())
			go func() {
				c.send(Frame{Header: Header{Type: TPing | TReply, ID: f.ID}, Payload: Ping{Stamp: c.stamp()}.Marshal()})
			}()
		case TForward, TMove:
			go c.serve(f)
		case TMirror, TDrop, TFlush, TReport:
			c.lane(f.LUN) <- f
		default: // a newer peer's request: refused, the connection goes on
			go c.send(Frame{Header: Header{Type: f.Type | TReply, ID: f.ID, LUN: f.LUN},
				Payload: Ack{Code: Failed, Msg: fmt.Sprintf("node %s does not serve %s requests", c.o.Self.Node, f.Type)}.Marshal()})
		}
	}
}

// lane is the LUN's ordered queue of mirror, release and flush requests,
// with its worker. The read loop waits when a lane is full.
func (c *Conn) lane(lun uint32) chan Frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.lanes[lun]
	if ch == nil {
		ch = make(chan Frame, 256)
		c.lanes[lun] = ch
		go func() {
			for {
				select {
				case f := <-ch:
					c.serve(f)
				case <-c.done:
					return
				}
			}
		}()
	}
	return ch
}

// serve answers one request; a handler that panics fails the request,
// not the process.
func (c *Conn) serve(f Frame) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	reply := Frame{Header: Header{Type: f.Type | TReply, ID: f.ID, LUN: f.LUN}}
	err := c.handle(ctx, f, &reply)
	if err == nil && len(reply.Payload) > MaxPayload {
		err = fmt.Errorf("%w: a %d-byte reply (at most %d)", ErrFailed, len(reply.Payload), MaxPayload)
	}
	if err != nil || f.Type != TForward {
		reply.Payload = ackOf(err).Marshal()
		if f.Type == TForward {
			reply.Flags |= flagAck
		}
	}
	c.send(reply)
}

func (c *Conn) handle(ctx context.Context, f Frame, reply *Frame) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: the %s handler panicked: %v", ErrFailed, f.Type, p)
		}
	}()
	h := c.o.Handler
	switch {
	case h == nil:
		err = fmt.Errorf("%w: node %s serves no requests", ErrNotOwner, c.o.Self.Node)
	case f.Type == TForward:
		var m Forward
		if err = m.Unmarshal(f.Payload); err == nil {
			var r ForwardReply
			ctx = context.WithValue(ctx, requestKey{}, request{c: c, deadline: m.Deadline})
			if r, err = h.Forward(ctx, f.LUN, m); err == nil {
				reply.Payload = r.Marshal()
			}
		}
	case f.Type == TMirror:
		var m Mirror
		if err = m.Unmarshal(f.Payload); err == nil {
			err = h.Mirror(ctx, f.LUN, m)
		}
	case f.Type == TDrop:
		var m Drop
		if err = m.Unmarshal(f.Payload); err == nil {
			err = h.Drop(ctx, f.LUN, m)
		}
	case f.Type == TFlush:
		var m Flush
		if err = m.Unmarshal(f.Payload); err == nil {
			err = h.Flush(ctx, f.LUN, m)
		}
	case f.Type == TReport:
		var m Report
		if err = m.Unmarshal(f.Payload); err == nil {
			err = h.Report(ctx, m)
		}
	case f.Type == TMove:
		var m Move
		if err = m.Unmarshal(f.Payload); err == nil {
			err = h.Move(ctx, m)
		}
	}
	return err
}

func ackOf(err error) Ack {
	switch {
	case err == nil:
		return Ack{Code: OK}
	case errors.Is(err, ErrFenced):
		return Ack{Code: Fenced, Msg: err.Error()}
	case errors.Is(err, ErrNotOwner):
		return Ack{Code: NotOwner, Msg: err.Error()}
	case errors.Is(err, ErrExpired):
		return Ack{Code: Expired, Msg: err.Error()}
	}
	return Ack{Code: Failed, Msg: err.Error()}
}

// heartbeat pings the peer and ends a silent connection.
func (c *Conn) heartbeat() {
	defer c.wg.Done()
	t := c.o.Clock.NewTicker(c.o.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C():
		}
		silent := c.o.Clock.Now().Sub(time.Unix(0, c.last.Load()))
		if silent >= c.o.Timeout {
			c.fail(fmt.Errorf("%w for %v", ErrSilent, silent))
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
			defer cancel()
			c.Ping(ctx)
		}()
	}
}
