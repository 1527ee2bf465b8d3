package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/initiator"
	hostlab "github.com/aluad/aluad/pkg/lab"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// lab is an etcd member and the configuration two controllers share.
type lab struct {
	t     *testing.T
	cfg   config.Config
	fence *InProcess
}

func newLab(t *testing.T) *lab {
	t.Helper()
	var m *cluster.Member
	var err error
	for try := 0; try < 3; try++ { // a port picked free may be taken by the time etcd binds it
		m, err = cluster.StartMember(cluster.MemberConfig{Name: "w", Dir: filepath.Join(t.TempDir(), "etcd"),
			ClientURL: "http://" + freeAddr(t), PeerURL: "http://" + freeAddr(t),
			Heartbeat: 10 * time.Millisecond, Election: 100 * time.Millisecond, LogLevel: "fatal"}, 20*time.Second)
		if err == nil {
			break
		}
		t.Logf("etcd member: %v; again with other ports", err)
	}
	require.NoError(t, err)
	t.Cleanup(m.Close)
	cfg := config.Loopback(t.TempDir(), 4<<20)
	cfg.LUNs = cfg.LUNs[:4]
	cfg.ArrayID = "ctl-test"
	cfg.Cluster = cluster.Config{Etcd: []string{m.ClientURL()},
		Interlink: map[string]string{"a": freeAddr(t), "b": freeAddr(t)},
		LeaseTTL:  time.Second, FailbackAfter: 300 * time.Millisecond}
	// The records' and the fence's mechanics under membership's rules
	// alone; core_test.go runs the core on the leader.
	cfg.Ownership.Off = true
	return &lab{t: t, cfg: cfg, fence: NewInProcess()}
}

func (l *lab) start(node string) *Controller {
	l.t.Helper()
	return l.startWith(Options{Config: l.cfg, Node: node, Daemon: quiet()})
}

// startWith starts a controller of the lab, fenced by the lab.
func (l *lab) startWith(o Options) *Controller {
	l.t.Helper()
	o.JoinTimeout, o.Fencer = 20*time.Second, l.fence
	c, err := Start(o)
	require.NoError(l.t, err)
	l.fence.Add(c)
	return c
}

// quiet keeps the controllers' logs out of the test's output, unless
// ALUAD_TEST_LOG is set.
func quiet() daemon.Options {
	var w io.Writer = io.Discard
	if os.Getenv("ALUAD_TEST_LOG") != "" {
		w = os.Stderr
	}
	return daemon.Options{Logger: slog.New(slog.NewTextHandler(w, nil)), StatsInterval: -1}
}

// session logs in to the first port of node on c.
func session(t *testing.T, c *Controller, node, name string) *initiator.Session {
	t.Helper()
	for _, p := range c.D.Portals() {
		if p.Node == node {
			s, err := initiator.Dial(context.Background(), initiator.Config{Addr: p.Addr, Target: p.Target,
				InitiatorName: "iqn.2026-11.test.aluad:" + name, DialTimeout: 2 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
	t.Fatalf("no port of node %s", node)
	return nil
}

func owners(c *Controller) string {
	s := ""
	for _, l := range c.arr.LUNs {
		s += fmt.Sprintf("%d:%s ", l.ID, l.Owner().Name)
	}
	return s
}

// Two controllers as separate controllers of one array, on one etcd
// member: commands on every path (a non-owner's forwarded over the
// interlink), a crash of one (its cache lost), the survivor taking its
// LUNs over with every acknowledged write (the mirror replayed) and
// reporting 2A/06, then the restart and the failback, with a checker that
// never sees two controllers serve one LUN as owner.
func TestFailoverAndFailback(t *testing.T) {
	lab := newLab(t)
	a := lab.start("a")
	b := lab.start("b")
	defer func() { b.Stop(time.Second) }()
	ctx := context.Background()
	hostA, hostB := session(t, a, "a", "h1"), session(t, b, "b", "h1")

	// Writes on both paths, acknowledged, each LUN with its own tags.
	acked := map[[2]uint64]uint64{}
	tag := uint64(0)
	for _, l := range lab.cfg.LUNs {
		for lba := uint64(0); lba < 64; lba += 8 {
			for _, s := range []*initiator.Session{hostA, hostB} {
				tag++
				data := hostlab.Tagged(tag)
				require.NoError(t, hostlab.Retry(5*time.Second, func() error { return s.Write16(ctx, l.ID, lba, data, 512, false) }))
				acked[[2]uint64{l.ID, lba}] = tag
			}
		}
	}
	for k, tg := range acked {
		for _, s := range []*initiator.Session{hostA, hostB} {
			var got []byte
			require.NoError(t, hostlab.Retry(5*time.Second, func() (err error) { got, err = s.Read16(ctx, k[0], k[1], 8, 512); return err }))
			require.True(t, bytes.Equal(got, hostlab.Tagged(tg)), "LUN %d LBA %d on every path", k[0], k[1])
		}
	}
	fwd := uint64(0)
	for _, l := range b.arr.LUNs {
		fwd += l.Stats()[1].Forwarded.Load()
	}
	require.Positive(t, fwd, "b forwarded commands for a's LUNs")

	// Fresh writes just before the crash: dirty in a's cache, copies in
	// b's mirror, not yet destaged.
	for _, l := range lab.cfg.LUNs {
		if l.Preferred != "a" {
			continue
		}
		for lba := uint64(64); lba < 128; lba += 8 {
			tag++
			require.NoError(t, hostA.Write16(ctx, l.ID, lba, hostlab.Tagged(tag), 512, false))
			acked[[2]uint64{l.ID, lba}] = tag
		}
	}
	// (Checked here, not after the slower reads above: a's idle destage
	// may have written and released everything by then.)
	require.Positive(t, b.arr.Local().Cache.MirrorBytes(), "b holds copies of a's dirty pages")
	killed := time.Now()
	a.Kill()
	for _, l := range lab.cfg.LUNs {
		require.NoError(t, hostlab.Retry(10*time.Second, func() error {
			_, err := hostB.Read16(ctx, l.ID, 0, 8, 512)
			return err
		}))
	}
	took := time.Since(killed)
	t.Logf("failover: every LUN served by b %v after the kill (lease TTL %v); owners %s", took, lab.cfg.Cluster.LeaseTTL, owners(b))
	for _, l := range b.arr.LUNs {
		require.Equal(t, "b", l.Owner().Name)
	}
	replayed := 0
	evs, _ := b.D.Events.Since(0)
	for _, e := range evs {
		if e.Change != nil {
			replayed += e.Change.Replayed
		}
	}
	require.Positive(t, replayed, "the takeover replayed mirrored pages")
	for k, tg := range acked {
		var got []byte
		require.NoError(t, hostlab.Retry(5*time.Second, func() (err error) { got, err = hostB.Read16(ctx, k[0], k[1], 8, 512); return err }))
		require.True(t, bytes.Equal(got, hostlab.Tagged(tg)), "acknowledged write lost: LUN %d LBA %d", k[0], k[1])
	}

	// The restart: a rejoins (once its old lease is gone) and its LUNs
	// fail back, announced on b's paths.
	a2 := lab.start("a")
	defer func() { a2.Stop(time.Second) }()
	ck := watchBoth(a2, b, lunIDs(lab))
	require.Eventually(t, func() bool {
		for _, l := range a2.arr.LUNs {
			if l.Owner().Name != l.Preferred.Name {
				return false
			}
		}
		return true
	}, 15*time.Second, 20*time.Millisecond, "the LUNs fail back: %s", owners(a2))
	hostA2 := session(t, a2, "a", "h2")
	for k, tg := range acked {
		require.NoError(t, hostlab.Retry(5*time.Second, func() error {
			got, err := hostA2.Read16(ctx, k[0], k[1], 8, 512)
			if err == nil && !bytes.Equal(got, hostlab.Tagged(tg)) {
				return fmt.Errorf("LUN %d LBA %d reads back wrong after the failback", k[0], k[1])
			}
			return err
		}))
	}
	require.Zero(t, ck.done(), "two controllers served one LUN as owner")
	uas, err := hostB.ClearUA(ctx, lab.cfg.LUNs[0].ID, 8)
	var ce *initiator.CheckError
	if err != nil && !errors.As(err, &ce) {
		require.NoError(t, err)
	}
	require.Contains(t, uas, [2]byte{0x2a, 0x06}, "b's nexus was told of the asymmetric access state change")
}

// Both controllers stopped cleanly, one after the other, then started
// again: every LUN is served on its preferred owner at once, with every
// write, and none is taken over (the last to stop left the records as at
// the array's first start; they once moved twice: to the holder of
// copies that did not matter, and back).
func TestCleanRestartMovesNothing(t *testing.T) {
	lab := newLab(t)
	a, b := lab.start("a"), lab.start("b")
	onA, onB := session(t, a, "a", "h1"), session(t, b, "b", "h1")
	w := newWriter(t)
	for _, l := range lab.cfg.LUNs {
		s := onA
		if l.Preferred == "b" {
			s = onB
		}
		require.NoError(t, w.write(s, l.ID, 0, 5*time.Second))
	}
	require.NoError(t, b.Stop(time.Second))
	require.Eventually(t, func() bool { return allOn(a, func(string) string { return "a" }) }, 10*time.Second,
		10*time.Millisecond, "a took b's LUNs: %s", owners(a))
	require.NoError(t, a.Stop(time.Second))

	a2, b2 := lab.start("a"), lab.start("b")
	defer a2.Stop(time.Second)
	defer b2.Stop(time.Second)
	for _, c := range []*Controller{a2, b2} {
		require.Eventually(t, func() bool { return allOn(c, func(p string) string { return p }) }, 10*time.Second,
			10*time.Millisecond, "%s: %s", c.node, owners(c))
	}
	onA2, onB2 := session(t, a2, "a", "h1"), session(t, b2, "b", "h1")
	w.verify(onA2, "through a after the restart")
	w.verify(onB2, "through b after the restart")
	for _, c := range []*Controller{a2, b2} {
		evs, _ := c.D.Events.Since(0)
		for _, e := range evs {
			if e.Change != nil {
				require.NotEqual(t, "failover", e.Change.Cause, "%s: a takeover after a clean restart: %+v", c.node, *e.Change)
			}
		}
	}
}
