// Package clustersim runs the real controllers of one cluster
// (pkg/controller, every goroutine of them) in one process, inside a
// testing/synctest bubble: the store is kv.Mem (etcd's semantics), each
// controller reaches it through its own kv.Link, and the interlink and
// the iSCSI portals run over memnet. Leases, heartbeats and timeouts run
// on the bubble's fake time, so a failover takes no wall time and waits
// on no sleep. On it, the cluster seeds (seeds.go): random scripts of the
// faults that once broke cluster mode, judged by invariants from the
// hosts' side. `aluad sim --cluster` runs them (run.go); so do the
// package's tests.
//
// synctest accepts only a *testing.T, so the command runs the seeds
// through testing.Main, as a test binary would: the package owns the
// bubble, the fault script, the invariants and that runner.
package clustersim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/cluster/kv"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/controller"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/fence"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/memnet"
)

// Bubble is a cluster of controllers in one process, on the in-memory
// store and network. Make it inside synctest.Test.
type Bubble struct {
	T0  time.Time
	T   *testing.T
	Cfg config.Config
	Net *memnet.Network
	Mem *kv.Mem
	// Fence fences this bubble's controllers as a kill (every started
	// one is added); Fencer, when set, is used instead (a planted one).
	Fence  *controller.InProcess
	Fencer fence.Fencer
	// links: each node's link to the store, as of its latest start (a
	// cut: the node partitioned, or paused).
	links map[string]*kv.Link
	// The store has Members etcd members; each node's client balances
	// over a connection to each (cluster.Balanced), probing them unless
	// NoProbes (planted: etcd's client as it was).
	Members  int
	NoProbes bool
	mu       sync.Mutex
	conns    [][]*kv.Link // per member, every connection to it (every incarnation's)
	frozen   map[int]bool
}

// NewBubble is two nodes (a and b), four LUNs, a lease TTL of 1 s.
func NewBubble(t *testing.T) *Bubble {
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
	return &Bubble{T0: time.Now(), T: t, Cfg: cfg, Net: memnet.New(), Mem: mem, Fence: controller.NewInProcess(),
		links: map[string]*kv.Link{}, Members: 3, frozen: map[int]bool{}}
}

// Link is node's link to the store, as of its latest start: cut, the
// node is partitioned from the store (or, blocking, paused).
func (b *Bubble) Link(node string) *kv.Link {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.links[node]
}

// Freeze freezes etcd member k (SIGSTOP of its process: its connections
// stay open and answer nothing) or thaws it. The store's quorum is the
// others'.
func (b *Bubble) Freeze(k int, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		b.conns = make([][]*kv.Link, b.Members)
	}
	b.frozen[k] = on
	for _, c := range b.conns[k] {
		if on {
			c.Cut(true)
		} else {
			c.Heal()
		}
	}
}

// logs: the controllers' logs go to stderr when ALUAD_TEST_LOG is set.
func logs() daemon.Options {
	var w io.Writer = io.Discard
	if os.Getenv("ALUAD_TEST_LOG") != "" {
		w = os.Stderr
	}
	return daemon.Options{Logger: slog.New(slog.NewTextHandler(w, nil)), StatsInterval: -1}
}

// Start starts node's controller (a new process: a new link to the
// store) and fails the test if it does not start.
func (b *Bubble) Start(node string) *controller.Controller {
	b.T.Helper()
	c, err := b.StartErr(node)
	if err != nil {
		b.T.Fatalf("start %s: %v", node, err)
	}
	return c
}

// StartErr starts node's controller.
func (b *Bubble) StartErr(node string) (*controller.Controller, error) {
	b.mu.Lock()
	conns := make([]*kv.Link, b.Members)
	eps := make([]kv.Backend, b.Members)
	for k := range conns {
		conns[k] = kv.NewLink(b.Mem, clock.Real)
		conns[k].LateWrites = true // a frozen member applies what was sent to it when it thaws
		if b.frozen[k] {
			conns[k].Cut(true)
		}
		eps[k] = conns[k]
	}
	bal := cluster.NewBalanced(eps, !b.NoProbes)
	b.T.Cleanup(bal.Close)
	if b.conns == nil {
		b.conns = make([][]*kv.Link, b.Members)
	}
	for k, c := range conns {
		b.conns[k] = append(b.conns[k], c)
	}
	link := kv.NewLink(bal, clock.Real)
	b.links[node] = link
	b.mu.Unlock()
	dopt := logs()
	dopt.Listen = b.Net.Listen
	var f fence.Fencer = b.Fence
	if b.Fencer != nil {
		f = b.Fencer
	}
	c, err := controller.Start(controller.Options{Config: b.Cfg, Node: node, JoinTimeout: 20 * time.Second, Daemon: dopt,
		Fencer: f, Store: link, Listen: b.Net.Listen, Dial: b.Net.Dial, MediaSleep: time.Sleep})
	if err != nil {
		return nil, err
	}
	b.Fence.Add(c)
	return c, nil
}

// Dial logs in to the first port of node on c as initiator name.
func (b *Bubble) Dial(c *controller.Controller, node, name string) (*initiator.Session, error) {
	for _, p := range c.D.Portals() {
		if p.Node == node {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Target: p.Target,
				InitiatorName: "iqn.2026-11.test.aluad:" + name, DialTimeout: 2 * time.Second, Dial: b.Net.Dial})
		}
	}
	return nil, fmt.Errorf("no port of node %s", node)
}

// Until waits, on the bubble's time, for cond (at most limit), and fails
// the test if it does not come.
func Until(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
