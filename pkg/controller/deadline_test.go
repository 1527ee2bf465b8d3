package controller

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/initiator"
	hostlab "github.com/aluad/aluad/pkg/lab"
	"github.com/aluad/aluad/pkg/media"
)

// readHold holds the first media read of one LUN's byte at off, once
// armed, until release is closed: a slow read of the page a partial write
// must merge into, on the owner's way to its cache.
type readHold struct {
	lun     uint64
	off     int64
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *readHold) wrap(lun uint64, s media.Store) media.Store {
	if lun != h.lun {
		return s
	}
	return media.WithFaults(s, media.InjectorFunc(func(op media.Op, off, n int64) (time.Duration, error) {
		if op == media.OpRead && off <= h.off && h.off < off+n && h.armed.CompareAndSwap(true, false) {
			close(h.held)
			<-h.release
		}
		return 0, nil
	}), nil)
}

// A forwarded write whose forwarder got no answer must not land after
// what the host wrote once it was answered. The host writes block X = A
// through b, forwarded to the owner a, which holds the command on its way
// to the cache (the read of the page it merges into is slow); the link is
// cut, or the owner stays stalled past the forwarder's wait; b answers
// the host with an error; the host writes A again and then B, both
// acknowledged (through a, or through b again while the link lives); the
// held command goes on. X must read B.
func TestForwardedWriteLandsNotAfterANewerOne(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cut   bool
		retry string // the node whose port the host writes through afterwards
	}{
		{"link cut, then through the owner", true, "a"},
		{"owner stalled, then through the owner", false, "a"},
		{"owner stalled, then through the same forwarder", false, "b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lab := newLab(t)
			lun := lab.preferring("a")[0]
			const lba = 800 // page 100: nothing has read it into a's cache
			hold := &readHold{lun: lun, off: lba * 512, held: make(chan struct{}), release: make(chan struct{})}
			release := sync1(func() { close(hold.release) })
			defer release()
			d := quiet()
			d.WrapStore = hold.wrap
			a := lab.startWith(Options{Config: lab.cfg, Node: "a", Daemon: d})
			defer a.Stop(time.Second)
			b := lab.start("b")
			defer b.Stop(time.Second)
			hosts := map[string]*initiator.Session{"a": session(t, a, "a", "h1"), "b": session(t, b, "b", "h1")}
			require.Eventually(t, func() bool {
				return a.Serves(lun) && b.arr.LUN(lun).Owner().Name == "a" && b.linkTo("a") != nil
			}, 10*time.Second, 10*time.Millisecond, "a serves the LUN, b forwards to it")
			ctx := context.Background()
			block := func(v byte) []byte { return bytes.Repeat([]byte{v}, 512) }
			for _, h := range hosts { // past the sessions' unit attentions, on both paths
				require.NoError(t, hostlab.Retry(10*time.Second, func() error {
					_, err := h.Read16(ctx, lun, 0, 1, 512)
					return err
				}))
			}

			hold.armed.Store(true)
			first := make(chan error, 1)
			go func() { first <- hosts["b"].Write16(ctx, lun, lba, block(0xa), 512, false) }()
			select {
			case <-hold.held: // the owner holds it, before its pages change
			case err := <-first:
				t.Fatalf("the write was answered (%v) without reaching the owner's media", err)
			}
			if tt.cut {
				cutLink(t, a, b)
			}
			require.Error(t, <-first, "b answers the host with no GOOD")
			for _, v := range []byte{0xa, 0xb} { // the host retries A, then writes B
				require.NoError(t, hostlab.Retry(10*time.Second, func() error {
					return hosts[tt.retry].Write16(ctx, lun, lba, block(v), 512, false)
				}), "write %#x", v)
			}
			release() // the held command goes on
			require.Eventually(t, func() bool {
				a.hmu.Lock()
				defer a.hmu.Unlock()
				return a.inflight == 0
			}, 10*time.Second, 10*time.Millisecond, "a has served the held command")
			got, err := hosts["a"].Read16(ctx, lun, lba, 1, 512)
			require.NoError(t, err)
			require.True(t, bytes.Equal(block(0xb), got), "X reads %#x: the first write landed after the acknowledged newer one",
				got[0])
		})
	}
}

// sync1 makes f safe to call more than once (it runs the first time).
func sync1(f func()) func() {
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			f()
		}
	}
}
