package interlink

import (
	"context"
	"fmt"
	"sync"
)

// Pending is a posted request: its outcome arrives later.
type Pending struct {
	t       Type
	lun     uint32
	payload []byte
	done    chan struct{}
	err     error
}

// Wait returns the request's outcome once the peer has answered it (or
// the connection ended, or ctx did).
func (p *Pending) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed once the outcome is known.
func (p *Pending) Done() <-chan struct{} { return p.done }

func (p *Pending) finish(err error) {
	p.err = err
	close(p.done)
}

// outbox is the connection's ordered queue of posted requests: one
// goroutine sends them in the order they were posted.
type outbox struct {
	mu      sync.Mutex
	queue   []*Pending
	waiting map[*Pending]bool // posted and not answered yet
	kick    chan struct{}
}

// PostMirror queues a mirror copy to be sent after everything posted
// before it and returns at once, without touching the network: the cache
// posts under its own lock, in its write order, and waits for the
// outcome after unlocking.
func (c *Conn) PostMirror(lun uint32, m Mirror) *Pending {
	return c.post(TMirror, lun, m.Marshal())
}

// PostDrop queues a release of mirror copies, as PostMirror: it reaches
// the peer after every copy posted before it.
func (c *Conn) PostDrop(lun uint32, m Drop) *Pending {
	return c.post(TDrop, lun, m.Marshal())
}

func (c *Conn) post(t Type, lun uint32, payload []byte) *Pending {
	return c.postAs(t, lun, payload, true)
}

// postAs queues a request; drained ones are waited for by Drain.
func (c *Conn) postAs(t Type, lun uint32, payload []byte, drained bool) *Pending {
	p := &Pending{t: t, lun: lun, payload: payload, done: make(chan struct{})}
	if len(payload) > MaxPayload {
		p.finish(fmt.Errorf("interlink: a %d-byte %s (at most %d)", len(payload), t, MaxPayload))
		return p
	}
	c.out.mu.Lock()
	if err := c.Err(); err != nil {
		c.out.mu.Unlock()
		p.finish(fmt.Errorf("%w (%v)", ErrClosed, err))
		return p
	}
	c.out.queue = append(c.out.queue, p)
	if drained {
		c.out.waiting[p] = true
	}
	c.out.mu.Unlock()
	select {
	case c.out.kick <- struct{}{}:
	default:
	}
	return p
}

// Drain waits until every request posted before it has been answered,
// and returns the first refusal among them: a node acknowledges a
// hand-over, or a write its partner did not see, only once its partner
// has every copy and release it sent.
func (c *Conn) Drain(ctx context.Context) error {
	c.out.mu.Lock()
	ps := make([]*Pending, 0, len(c.out.waiting))
	for p := range c.out.waiting {
		ps = append(ps, p)
	}
	c.out.mu.Unlock()
	var refused error
	for _, p := range ps {
		if err := p.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return err
			}
			if refused == nil {
				refused = err
			}
		}
	}
	// A connection that ended did not deliver what waited; a request the
	// peer refused (a fenced release) did not do what it asked.
	if err := c.Err(); err != nil {
		return fmt.Errorf("%w (%v)", ErrClosed, err)
	}
	return refused
}

// poster sends the posted requests in order.
func (c *Conn) poster() {
	defer c.wg.Done()
	for {
		select {
		case <-c.done:
			c.out.mu.Lock()
			q := c.out.queue
			c.out.queue = nil
			for _, p := range q {
				delete(c.out.waiting, p)
			}
			c.out.mu.Unlock()
			for _, p := range q {
				p.finish(fmt.Errorf("%w (%v)", ErrClosed, c.Err()))
			}
			return
		case <-c.out.kick:
		}
		for {
			c.out.mu.Lock()
			q := c.out.queue
			c.out.queue = nil
			c.out.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, p := range q {
				c.sendPosted(p)
			}
		}
	}
}

func (c *Conn) sendPosted(p *Pending) {
	ch := make(chan Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		c.answered(p, fmt.Errorf("%w (%v)", ErrClosed, err))
		return
	}
	c.nextID++
	id := c.nextID
	c.calls[id] = ch
	c.mu.Unlock()
	go func() {
		f, ok := <-ch
		if !ok {
			c.answered(p, fmt.Errorf("%w (%v)", ErrClosed, c.Err()))
			return
		}
		if f.Type != p.t|TReply {
			err := fmt.Errorf("%w: a %s answers a %s", ErrFrame, f.Type, p.t)
			c.fail(err)
			c.answered(p, err)
			return
		}
		c.answered(p, ack(f))
	}()
	if err := c.send(Frame{Header: Header{Type: p.t, ID: id, LUN: p.lun}, Payload: p.payload}); err != nil {
		return // the connection failed: the call's channel is closed
	}
}

func (c *Conn) answered(p *Pending, err error) {
	c.out.mu.Lock()
	delete(c.out.waiting, p)
	c.out.mu.Unlock()
	p.finish(err)
}
