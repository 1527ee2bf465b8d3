package memnet

import (
	"context"
	"io"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestListenDialAndTalk(t *testing.T) {
	n := New()
	l, err := n.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, err = n.Listen("tcp", l.Addr().String())
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	_, err = n.Dial(context.Background(), "tcp", "127.0.0.1:1")
	require.ErrorIs(t, err, syscall.ECONNREFUSED)

	accepted := make(chan error, 1)
	go func() {
		s, err := l.Accept()
		if err == nil {
			buf := make([]byte, 5)
			_, err = io.ReadFull(s, buf)
			if err == nil {
				_, err = s.Write(append([]byte("re:"), buf...))
			}
			s.Close()
		}
		accepted <- err
	}()
	c, err := n.Dial(context.Background(), "tcp", l.Addr().String())
	require.NoError(t, err)
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)
	got, err := io.ReadAll(c) // the answer, then EOF when the server closes
	require.NoError(t, err)
	require.Equal(t, "re:hello", string(got))
	require.NoError(t, <-accepted)
	_, err = c.Write([]byte("x"))
	require.ErrorIs(t, err, syscall.EPIPE, "the peer closed")
	c.Close()
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err)

	require.NoError(t, l.Close())
	_, err = n.Dial(context.Background(), "tcp", l.Addr().String())
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "a closed listener refuses")
	l2, err := n.Listen("tcp", l.Addr().String())
	require.NoError(t, err, "its address is free again")
	l2.Close()
}

// Deadlines run on the bubble's fake time: a read waits exactly until its
// deadline, a write never waits (the buffer is unbounded), and a later
// deadline replaces an earlier one.
func TestDeadlinesInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(Addr("a"), Addr("b"))
		defer a.Close()
		defer b.Close()
		start := time.Now()
		n, err := a.Read(nil)
		require.Equal(t, 0, n)
		require.NoError(t, err, "a zero-length read returns at once")
		a.SetReadDeadline(start.Add(3 * time.Second))
		_, err = a.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.Equal(t, 3*time.Second, time.Since(start))

		a.SetReadDeadline(time.Now().Add(time.Hour))
		a.SetReadDeadline(time.Time{}) // cleared: waits for data
		go func() {
			time.Sleep(time.Minute)
			b.Write([]byte("late"))
		}()
		buf := make([]byte, 4)
		_, err = io.ReadFull(a, buf)
		require.NoError(t, err)
		require.Equal(t, "late", string(buf))
		require.Equal(t, 3*time.Second+time.Minute, time.Since(start))

		b.SetWriteDeadline(time.Now().Add(-time.Second))
		_, err = b.Write([]byte("x"))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		for range 1000 { // nobody reads: writes still return
			_, err = a.Write(make([]byte, 4096))
			require.NoError(t, err)
		}
	})
}
