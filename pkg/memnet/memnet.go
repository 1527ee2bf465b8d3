// Package memnet is an in-memory network for tests: listeners, and
// full-duplex connections with unbounded buffers (a write never waits for
// the reader, as a socket's send buffer lets it) whose every wait is on a
// channel or a timer. A daemon and its hosts wired through one Network can
// run inside a testing/synctest bubble, where time is fake and advances
// only when every goroutine waits: a test of keepalives, stalls and
// delays runs in microseconds with no sleep and no flake. TCP's own
// behaviour (FIN against RST, a full send buffer) is not modelled; tests
// of those stay on loopback sockets.
package memnet

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Network is a set of listeners by address.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*listener
	nextPort  int
}

// New returns an empty network.
func New() *Network { return &Network{listeners: map[string]*listener{}, nextPort: 40000} }

// Listen listens on addr (host:port; port 0 picks a free one), with the
// signature of net.Listen.
func (n *Network) Listen(network, addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Err: err}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if port == "0" {
		for n.listeners[net.JoinHostPort(host, strconv.Itoa(n.nextPort))] != nil {
			n.nextPort++
		}
		port = strconv.Itoa(n.nextPort)
		n.nextPort++
	}
	a := net.JoinHostPort(host, port)
	if n.listeners[a] != nil {
		return nil, &net.OpError{Op: "listen", Net: network, Addr: Addr(a), Err: syscall.EADDRINUSE}
	}
	l := &listener{n: n, addr: Addr(a), conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[a] = l
	return l, nil
}

// Dial connects to addr, with the signature of net.Dialer.DialContext. A
// closed or missing listener refuses. There is no backlog: Dial returns
// once the listener accepts (or ctx ends).
func (n *Network) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: network, Addr: Addr(addr), Err: syscall.ECONNREFUSED}
	}
	client, server := Pipe(Addr("memnet-client:"+addr), l.addr)
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: network, Addr: Addr(addr), Err: syscall.ECONNREFUSED}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Addr is an address on the network.
type Addr string

// Network names the network.
func (Addr) Network() string { return "memnet" }

func (a Addr) String() string { return string(a) }

type listener struct {
	n     *Network
	addr  Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.n.mu.Lock()
		if l.n.listeners[string(l.addr)] == l {
			delete(l.n.listeners, string(l.addr))
		}
		l.n.mu.Unlock()
	})
	return nil
}

func (l *listener) Addr() net.Addr { return l.addr }

// Pipe returns the two ends of one connection.
func Pipe(a, b net.Addr) (net.Conn, net.Conn) {
	ab, ba := newQueue(), newQueue()
	ca := &conn{in: ba, out: ab, local: a, remote: b, done: make(chan struct{})}
	cb := &conn{in: ab, out: ba, local: b, remote: a, done: make(chan struct{})}
	ca.rd.init()
	ca.wd.init()
	cb.rd.init()
	cb.wd.init()
	return ca, cb
}

// queue is one direction's bytes in flight.
type queue struct {
	mu     sync.Mutex
	buf    []byte
	eof    bool // the writer closed: the reader gets io.EOF once it is drained
	broken bool // the reader closed: the writer gets EPIPE
	wake   chan struct{}
}

func newQueue() *queue { return &queue{wake: make(chan struct{}, 1)} }

func (q *queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

type conn struct {
	in, out       *queue
	local, remote net.Addr
	rd, wd        deadline
	once          sync.Once
	done          chan struct{}
}

func (c *conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		select {
		case <-c.done:
			return 0, net.ErrClosed
		default:
		}
		if c.rd.passed() {
			return 0, os.ErrDeadlineExceeded
		}
		c.in.mu.Lock()
		if len(c.in.buf) > 0 {
			n := copy(b, c.in.buf)
			c.in.buf = c.in.buf[n:]
			if len(c.in.buf) > 0 {
				c.in.signal() // more for the next reader
			}
			c.in.mu.Unlock()
			return n, nil
		}
		eof := c.in.eof
		c.in.mu.Unlock()
		if eof {
			return 0, io.EOF
		}
		select {
		case <-c.in.wake:
		case <-c.done:
			return 0, net.ErrClosed
		case <-c.rd.wait():
		}
	}
}

func (c *conn) Write(b []byte) (int, error) {
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	if c.wd.passed() {
		return 0, os.ErrDeadlineExceeded
	}
	c.out.mu.Lock()
	defer c.out.mu.Unlock()
	if c.out.broken {
		return 0, &net.OpError{Op: "write", Net: "memnet", Addr: c.remote, Err: syscall.EPIPE}
	}
	c.out.buf = append(c.out.buf, b...)
	c.out.signal()
	return len(b), nil
}

// Close ends both directions: the peer reads what was written, then EOF,
// and its writes fail.
func (c *conn) Close() error {
	c.once.Do(func() {
		close(c.done)
		c.out.mu.Lock()
		c.out.eof = true
		c.out.mu.Unlock()
		c.out.signal()
		c.in.mu.Lock()
		c.in.broken, c.in.buf = true, nil
		c.in.mu.Unlock()
		c.rd.stop()
		c.wd.stop()
	})
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	c.wd.set(t)
	return nil
}

func (c *conn) SetReadDeadline(t time.Time) error  { c.rd.set(t); return nil }
func (c *conn) SetWriteDeadline(t time.Time) error { c.wd.set(t); return nil }

// deadline is a settable deadline: a channel closed when it passes.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{}
}

func (d *deadline) init() { d.ch = make(chan struct{}) }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		d.ch = make(chan struct{}) // the old one fired (or is firing)
	}
	d.timer = nil
	select {
	case <-d.ch:
		d.ch = make(chan struct{})
	default:
	}
	if t.IsZero() {
		return
	}
	if dur := time.Until(t); dur <= 0 {
		close(d.ch)
	} else {
		ch := d.ch
		d.timer = time.AfterFunc(dur, func() { close(ch) })
	}
}

func (d *deadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
	}
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func (d *deadline) passed() bool {
	select {
	case <-d.wait():
		return true
	default:
		return false
	}
}
