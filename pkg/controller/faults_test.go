package controller

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/faultnet"
	"github.com/aluad/aluad/pkg/initiator"
	hostlab "github.com/aluad/aluad/pkg/lab"
)

// checker watches two controllers and counts the moments both serve one
// LUN as owner (it must stay 0).
type checker struct {
	both atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
}

func watchBoth(x, y *Controller, luns []uint64) *checker { return watchAll([]*Controller{x, y}, luns) }

func (ck *checker) done() int64 {
	close(ck.stop)
	ck.wg.Wait()
	return ck.both.Load()
}

// writer keeps the acknowledged writes of a test.
type writer struct {
	t     *testing.T
	mu    sync.Mutex
	tag   uint64
	acked map[[2]uint64]uint64
}

func newWriter(t *testing.T) *writer { return &writer{t: t, acked: map[[2]uint64]uint64{}} }

func (w *writer) write(s *initiator.Session, lun, lba uint64, limit time.Duration) error {
	w.mu.Lock()
	w.tag++
	tag := w.tag
	w.mu.Unlock()
	data := hostlab.Tagged(tag)
	err := hostlab.Retry(limit, func() error { return s.Write16(context.Background(), lun, lba, data, 512, false) })
	if err == nil {
		w.mu.Lock()
		w.acked[[2]uint64{lun, lba}] = tag
		w.mu.Unlock()
	}
	return err
}

func (w *writer) verify(s *initiator.Session, what string) {
	w.t.Helper()
	for k, tg := range w.acked {
		var got []byte
		require.NoError(w.t, hostlab.Retry(10*time.Second, func() (err error) {
			got, err = s.Read16(context.Background(), k[0], k[1], 8, 512)
			return err
		}), what)
		require.True(w.t, bytes.Equal(got, hostlab.Tagged(tg)), "%s: acknowledged write lost: LUN %d LBA %d", what, k[0], k[1])
	}
}

func lunIDs(l *lab) []uint64 {
	var ids []uint64
	for _, c := range l.cfg.LUNs {
		ids = append(ids, c.ID)
	}
	return ids
}

// The interlink cut while both controllers reach etcd: nothing moves, no
// LUN is served by both, I/O on the owners' paths goes on (written
// through: the partner holds no copy), and once the link is back the
// copies flow again.
func TestInterlinkCut(t *testing.T) {
	for _, core := range []bool{false, true} {
		t.Run(map[bool]string{false: "membership", true: "core"}[core], func(t *testing.T) {
			lab := newLab(t)
			lab.cfg.Ownership.Off = !core // the core with its defaults, as a user starts it
			interlinkCut(t, lab)
		})
	}
}

func interlinkCut(t *testing.T, lab *lab) {
	a, b := lab.start("a"), lab.start("b")
	defer a.Stop(time.Second)
	defer b.Stop(time.Second)
	onA, onB := session(t, a, "a", "h1"), session(t, b, "b", "h1")
	w := newWriter(t)
	owner := map[uint64]*initiator.Session{}
	for _, l := range lab.cfg.LUNs {
		owner[l.ID] = onA
		if l.Preferred == "b" {
			owner[l.ID] = onB
		}
		require.NoError(t, w.write(owner[l.ID], l.ID, 0, 5*time.Second))
	}
	ck := watchBoth(a, b, lunIDs(lab))
	// Cut through the fault API, as `aluad fault interlink-cut` does.
	injectBoth(t, a, b, api.FaultInterlinkCut)
	require.Eventually(t, func() bool { return a.linkTo("b") == nil && b.linkTo("a") == nil }, 5*time.Second,
		10*time.Millisecond, "the heartbeats end the cut link")
	for i := uint64(1); i <= 16; i++ { // a few lease TTLs of I/O on the owners' paths
		for _, l := range lab.cfg.LUNs {
			require.NoError(t, w.write(owner[l.ID], l.ID, i*8, 3*time.Second), "I/O on the owner during the cut")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, l := range a.arr.LUNs {
		require.Equal(t, l.Preferred.Name, l.Owner().Name, "nothing moves while both hold their leases")
	}
	injectBoth(t, a, b, api.FaultInterlinkRestore)
	require.Eventually(t, func() bool { return a.linkTo("b") != nil && b.linkTo("a") != nil }, 5*time.Second,
		10*time.Millisecond, "the link comes back")
	before := b.arr.Local().Cache.MirrorBytes()
	for _, l := range lab.cfg.LUNs {
		if l.Preferred == "a" {
			require.NoError(t, w.write(onA, l.ID, 200, 5*time.Second))
		}
	}
	require.Greater(t, b.arr.Local().Cache.MirrorBytes(), before, "a mirrors to b again")
	require.Zero(t, ck.done(), "two controllers served one LUN as owner")
	w.verify(onA, "through a")
	w.verify(onB, "through b")
}

func newProxy(t *testing.T, target string) *faultnet.Proxy {
	p, err := faultnet.Listen(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// A controller cut off from etcd stops serving as owner within its lease
// TTL (before anyone can take over), the other takes its LUNs over with
// every acknowledged write, and at no moment do both serve one LUN.
func TestCutFromEtcd(t *testing.T) {
	lab := newLab(t)
	px := newProxy(t, lab.cfg.Cluster.Etcd[0][len("http://"):])
	cfgA := lab.cfg
	cfgA.Cluster.Etcd = []string{"http://" + px.Addr()}
	a := lab.startWith(Options{Config: cfgA, Node: "a", Daemon: quiet()})
	defer a.Kill()
	b := lab.start("b")
	defer b.Stop(time.Second)
	onA, onB := session(t, a, "a", "h1"), session(t, b, "b", "h1")
	w := newWriter(t)
	for _, l := range lab.cfg.LUNs {
		for lba := uint64(0); lba < 32; lba += 8 {
			require.NoError(t, w.write(onA, l.ID, lba, 5*time.Second))
		}
	}
	ck := watchBoth(a, b, lunIDs(lab))
	cut := time.Now()
	px.Cut(true)
	require.Eventually(t, func() bool {
		for _, l := range lab.cfg.LUNs {
			if a.Serves(l.ID) {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "a stops serving as owner")
	stopped := time.Since(cut)
	for _, l := range lab.cfg.LUNs {
		require.NoError(t, hostlab.Retry(15*time.Second, func() error {
			_, err := onB.Read16(context.Background(), l.ID, 0, 8, 512)
			return err
		}))
	}
	t.Logf("cut from etcd: a stopped serving after %v (lease %v); b served every LUN %v after the cut",
		stopped.Round(time.Millisecond), a.ms.TTL(), time.Since(cut).Round(time.Millisecond))
	for _, l := range b.arr.LUNs {
		require.Equal(t, "b", l.Owner().Name)
	}
	require.Zero(t, ck.done(), "two controllers served one LUN as owner")
	w.verify(onB, "after the takeover")
}

// The leader killed during a move: it was failing a LUN back from itself
// to the restarted preferred owner. Killed once the record names the
// target, or once it flushed, the other controller is elected, finds the
// move half done with its owner gone, and completes it as a takeover:
// never half done, no acknowledged write lost, never served by both.
func TestLeaderKilledMidMove(t *testing.T) {
	for _, point := range []string{"target-set", "flushed"} {
		t.Run(point, func(t *testing.T) {
			lab := newLab(t)
			b := lab.start("b") // alone: the leader, and it takes a's LUNs over
			defer b.Kill()
			require.Eventually(t, func() bool {
				for _, l := range b.arr.LUNs {
					if l.Owner().Name != "b" {
						return false
					}
				}
				return true
			}, 10*time.Second, 10*time.Millisecond)
			onB := session(t, b, "b", "h1")
			w := newWriter(t)
			var once sync.Once
			fired := make(chan struct{})
			hookFn := func(p string, c *Controller, lun uint64) {
				if p != point || c != b {
					return
				}
				once.Do(func() {
					// Fresh writes to the LUN first: dirty on b (the flush, if
					// any, is over), their copies on a.
					for lba := uint64(300); lba < 332; lba += 8 {
						if err := w.write(onB, lun, lba, time.Second); err != nil {
							break // b no longer serves it (target set): fine
						}
					}
					go c.Kill()
					<-c.ctx.Done()
					close(fired)
				})
			}
			testHook.Store(&hookFn)
			defer testHook.Store(nil)
			for _, l := range lab.cfg.LUNs {
				for lba := uint64(0); lba < 32; lba += 8 {
					require.NoError(t, w.write(onB, l.ID, lba, 5*time.Second))
				}
			}
			a := lab.start("a")
			defer a.Stop(time.Second)
			onA := session(t, a, "a", "h2")
			ck := watchBoth(a, b, lunIDs(lab))
			select {
			case <-fired:
			case <-time.After(20 * time.Second):
				t.Fatal("the leader never reached the point")
			}
			require.Eventually(t, func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				owners, _, err := a.store.Owners(ctx)
				if err != nil {
					return false
				}
				for _, o := range owners {
					if o.Owner != "a" || o.To != "" {
						return false
					}
				}
				return true
			}, 15*time.Second, 20*time.Millisecond, "a takes every LUN, no move left half done")
			require.Zero(t, ck.done(), "two controllers served one LUN as owner")
			w.verify(onA, "after the leader died mid-move")
		})
	}
}

// cutLink cuts both ends of the a-b interlink and waits until the
// heartbeats have ended it on both sides.
func cutLink(t *testing.T, a, b *Controller) {
	t.Helper()
	require.NoError(t, a.CutInterlink("b", true))
	require.NoError(t, b.CutInterlink("a", true))
	require.Eventually(t, func() bool { return a.linkTo("b") == nil && b.linkTo("a") == nil }, 5*time.Second,
		10*time.Millisecond, "the heartbeats end the cut link")
}

// The fault API of a controller process: its interlink's faults, and a
// clear refusal of what it cannot do.
func TestControllerFaults(t *testing.T) {
	lab := newLab(t)
	a := lab.start("a")
	defer a.Stop(time.Second)
	_, err := a.D.Inject(api.Fault{Kind: api.FaultInterlinkDelay, Node: "b", Delay: 5 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, 5*time.Millisecond, a.delays["b"])
	for _, tc := range []struct {
		f    api.Fault
		want string
	}{
		{api.Fault{Kind: api.FaultInterlinkCut, Node: "a"}, `no other node "a"`},
		{api.Fault{Kind: api.FaultInterlinkCut, Node: "z"}, `no other node "z"`},
		{api.Fault{Kind: api.FaultInterlinkDelay, Node: "b", Delay: -time.Second}, "from 0 (none) to 1m"},
		{api.Fault{Kind: api.FaultInterlinkDelay, Node: "b", Delay: time.Hour}, "from 0 (none) to 1m"},
		{api.Fault{Kind: api.FaultPowerLoss, Node: "a"}, "kill it"},
		{api.Fault{Kind: api.FaultRestart, Node: "b"}, "kill it"},
	} {
		_, err := a.D.Inject(tc.f)
		require.ErrorContains(t, err, tc.want, "%+v", tc.f)
	}
	_, err = a.D.Inject(api.Fault{Kind: api.FaultInterlinkRestore, Node: "b"})
	require.NoError(t, err)
	require.Zero(t, a.delays["b"], "a restore ends the delay")
	evs, _ := a.D.Events.Since(0)
	n := 0
	for _, e := range evs {
		if e.Kind == api.EventFault {
			n++
		}
	}
	require.Equal(t, 2, n, "the faults done are in the feed, the refused are not")
}

// injectBoth injects an interlink fault on both ends of the a-b link.
func injectBoth(t *testing.T, a, b *Controller, kind string) {
	t.Helper()
	for c, peer := range map[*Controller]string{a: "b", b: "a"} {
		_, err := c.D.Inject(api.Fault{Kind: kind, Node: peer})
		require.NoError(t, err)
	}
}
