package faultnet

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echo is a server that writes back what it reads.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes b and reads it back within wait.
func roundTrip(c net.Conn, b string, wait time.Duration) error {
	if _, err := c.Write([]byte(b)); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(wait))
	got := make([]byte, len(b))
	_, err := io.ReadFull(c, got)
	return err
}

// Frozen, a connection stays open and nothing moves; thawed, what waited
// arrives. Cut, connections end, and new ones are held open with nothing
// through.
func TestProxy(t *testing.T) {
	p, err := Listen(echo(t))
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, roundTrip(c, "ping", 5*time.Second))

	p.Freeze(true)
	err = roundTrip(c, "abcd", 100*time.Millisecond)
	var ne net.Error
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "frozen: no answer, the connection open: %v", err)
	p.Freeze(false)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 4)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, "abcd", string(got), "thawed: what waited arrives")

	p.Cut(true)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(got)
	require.Error(t, err, "cut: the connection ends")
	c2, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c2.Close()
	require.Error(t, roundTrip(c2, "held", 100*time.Millisecond), "cut: a new connection gets nothing through")
	p.Cut(false)
	c3, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c3.Close()
	require.NoError(t, roundTrip(c3, "back", 5*time.Second))
}
