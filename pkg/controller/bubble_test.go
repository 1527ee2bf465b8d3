// The bubbles run without the race detector: with it, a run of these
// (dozens of goroutines per controller, hundreds of seeds) once crashed
// inside the runtime (SIGSEGV in a synctest bubble). The test command
// runs them in their own step.

//go:build !race

package controller

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/cluster/kv"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/fence"
	"github.com/aluad/aluad/pkg/initiator"
	hostlab "github.com/aluad/aluad/pkg/lab"
	"github.com/aluad/aluad/pkg/memnet"
)

// bubble is a cluster of controllers in one process, on the in-memory
// store (kv.Mem; each controller reaches it through its own kv.Link, which
// a test cuts to partition it) and the in-memory network (memnet: the
// interlink and the iSCSI portals), inside a testing/synctest bubble:
// leases, heartbeats and timeouts run on the bubble's fake time, so a
// failover takes no wall time and waits on no sleep.
type bubble struct {
	t0    time.Time
	t     *testing.T
	cfg   config.Config
	net   *memnet.Network
	mem   *kv.Mem
	fence *inProcess
	// fencer fences (nil: fence, which kills the lab's controllers).
	fencer fence.Fencer
	links  map[string]*kv.Link
}

func newBubble(t *testing.T) *bubble {
	t.Helper()
	cfg := config.Loopback(t.TempDir(), 4<<20)
	cfg.LUNs = cfg.LUNs[:4]
	cfg.ArrayID = "bubble"
	cfg.Cluster = cluster.Config{Etcd: []string{"http://127.0.0.1:2379"},
		Interlink: map[string]string{"a": "127.0.0.1:7001", "b": "127.0.0.1:7002"},
		LeaseTTL:  time.Second, FailbackAfter: 300 * time.Millisecond}
	cfg.Ownership.Off = true
	mem := kv.NewMem(clock.Real, 100*time.Millisecond)
	t.Cleanup(mem.Close)
	return &bubble{t0: time.Now(), t: t, cfg: cfg, net: memnet.New(), mem: mem, fence: &inProcess{by: map[string]*Controller{}},
		links: map[string]*kv.Link{}}
}

// start starts node's controller on the bubble's store and network.
func (b *bubble) start(node string) *Controller {
	b.t.Helper()
	c, err := b.startErr(node)
	require.NoError(b.t, err)
	return c
}

func (b *bubble) startErr(node string) (*Controller, error) {
	link := kv.NewLink(b.mem, clock.Real)
	b.links[node] = link
	dopt := quiet()
	dopt.Listen = b.net.Listen
	var f fence.Fencer = b.fence
	if b.fencer != nil {
		f = b.fencer
	}
	c, err := Start(Options{Config: b.cfg, Node: node, JoinTimeout: 20 * time.Second, Daemon: dopt, Fencer: f,
		Store: link, Listen: b.net.Listen, Dial: b.net.Dial, MediaSleep: time.Sleep})
	if err != nil {
		return nil, err
	}
	b.fence.mu.Lock()
	b.fence.by[c.self.Instance] = c
	b.fence.mu.Unlock()
	return c, nil
}

// session logs in to the first port of node on c, over the bubble's
// network.
func (b *bubble) session(c *Controller, node, name string) *initiator.Session {
	b.t.Helper()
	for _, p := range c.D.Portals() {
		if p.Node == node {
			s, err := initiator.Dial(context.Background(), initiator.Config{Addr: p.Addr, Target: p.Target,
				InitiatorName: "iqn.2026-11.test.aluad:" + name, DialTimeout: 2 * time.Second, Dial: b.net.Dial})
			require.NoError(b.t, err)
			b.t.Cleanup(func() { s.Close() })
			return s
		}
	}
	b.t.Fatalf("no port of node %s", node)
	return nil
}

// until waits, on the bubble's time, for cond (at most limit).
func until(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two controllers in a bubble: a write acknowledged through owner a (its
// copy on b), a killed, b takes a's LUN over within the lease TTL plus
// its rounds (fenced first), and reads the write back; then a's
// controller restarts and the LUN fails back to it.
func TestBubbleFailoverAndFailback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bb := newBubble(t)
		a, b := bb.start("a"), bb.start("b")
		defer b.Stop(time.Second)
		until(t, 10*time.Second, func() bool { return a.linkTo("b") != nil && b.linkTo("a") != nil }, "the interlink")
		var lun uint64
		for _, l := range bb.cfg.LUNs {
			if l.Preferred == "a" {
				lun = l.ID
				break
			}
		}
		until(t, 10*time.Second, func() bool { return a.Serves(lun) }, "a serves its LUN")
		onA := bb.session(a, "a", "h1")
		data := hostlab.Tagged(5)
		require.NoError(t, hostlab.Retry(5*time.Second, func() error {
			return onA.Write16(context.Background(), lun, 0, data, 512, false)
		}))
		require.Positive(t, b.arr.Local().Cache.MirrorBytes(), "b holds the copy")

		killed := time.Now()
		a.Kill()
		until(t, 10*time.Second, func() bool { return b.Serves(lun) }, "b takes a's LUN over")
		took := time.Since(killed)
		require.LessOrEqual(t, took, bb.cfg.Cluster.LeaseTTL+time.Second, "served within the lease TTL + 1 s")
		onB := bb.session(b, "b", "h1")
		var got []byte
		require.NoError(t, hostlab.Retry(5*time.Second, func() (err error) {
			got, err = onB.Read16(context.Background(), lun, 0, 8, 512)
			return err
		}))
		require.True(t, bytes.Equal(got, data), "the acknowledged write, replayed from b's copy")

		a2 := bb.start("a")
		defer a2.Stop(time.Second)
		until(t, 20*time.Second, func() bool { return a2.Serves(lun) }, "the LUN fails back to a's new controller")
		t.Logf("taken over %v after the kill (bubble time)", took)
	})
}
