// Package faultnet owns network faults for tests that run real servers
// (etcd members, controllers) on loopback: a TCP proxy in front of a
// server that can cut every connection (a crash or a partition: the peer
// sees its connections end) or freeze them (a paused process or a frozen
// machine: connections stay open, new ones are accepted, and nothing
// moves until it thaws).
package faultnet

import (
	"io"
	"net"
	"sync"
)

// Proxy relays TCP connections to a target.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	thawed *sync.Cond // on mu
	cut    bool
	frozen bool
	closed bool
	conns  []net.Conn
}

// Listen starts a proxy to target on a free loopback port.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target}
	p.thawed = sync.NewCond(&p.mu)
	go p.accept()
	return p, nil
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		go p.relay(c)
	}
}

// track keeps c to be cut later; false if it is cut already.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *Proxy) relay(c net.Conn) {
	if !p.gate() { // a frozen server's backlog holds the connection
		c.Close()
		return
	}
	p.mu.Lock()
	cut := p.cut
	p.mu.Unlock()
	if cut {
		return // held open, nothing goes through (as the cut left it)
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(u) {
		u.Close()
		c.Close()
		return
	}
	go p.copy(u, c)
	go p.copy(c, u)
}

// copy relays src to dst, each chunk through the gate.
func (p *Proxy) copy(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			return
		}
	}
}

// gate waits while the proxy is frozen; false once it is closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.frozen && !p.closed {
		p.thawed.Wait()
	}
	return !p.closed
}

// Cut closes every connection and, while cut, holds new ones open with
// nothing going through; Cut(false) lets new ones through again.
func (p *Proxy) Cut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

// Freeze stops every byte in both directions, connections left open;
// Freeze(false) lets what waited go on.
func (p *Proxy) Freeze(frozen bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = frozen
	if !frozen {
		p.thawed.Broadcast()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.thawed.Broadcast()
}
