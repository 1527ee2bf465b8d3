package controller

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/daemon"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func (l *lab) startLogged(node string, w *syncBuf) *Controller {
	l.t.Helper()
	return l.startWith(Options{Config: l.cfg, Node: node,
		Daemon: daemon.Options{Logger: slog.New(slog.NewTextHandler(w, nil)), StatsInterval: -1}})
}

// A failback of b's two LUNs after b's restart: the core decides both at
// once; the executor carries them out one after the other, each a flush
// (here the first one's flush is slow). The second LUN waits in the
// executor's queue, neither claimed nor with a target in its record, and
// the core's owner (b) differs from the record (a) meanwhile: the
// reconciliation leaves it (it once "corrected" the core back to a, and
// the core saw b, a, b: owner changes that never happened).
func TestReconcileLeavesAQueuedBatch(t *testing.T) {
	lab := coreLab(t)
	var logA syncBuf
	a, b := lab.pair(&logA)
	b2 := crashAndRestartB(t, lab, a, b)

	onB := lab.preferring("b")
	var once sync.Once
	hookFn := func(point string, c *Controller, lun uint64) {
		if point == "target-set" && c == a {
			once.Do(func() { time.Sleep(1500 * time.Millisecond) }) // a slow flush
		}
	}
	testHook.Store(&hookFn)
	defer testHook.Store(nil)

	// The core's owner of each of b's LUNs, as it changes.
	var mu sync.Mutex
	hist := map[uint64][]string{}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			a.D.Ctl().Do(func(co *ownership.Core) {
				mu.Lock()
				for _, id := range onB {
					h := hist[id]
					if o := co.Owner(id); len(h) == 0 || h[len(h)-1] != o {
						hist[id] = append(h, o)
					}
				}
				mu.Unlock()
			})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	hostB2 := session(t, b2, "b", "h1")
	for _, l := range lab.cfg.LUNs {
		rtpg(t, hostB2, l.ID)
	}
	probed(t, hostB2)
	require.Eventually(t, func() bool { return allOn(a, func(p string) string { return p }) }, 15*time.Second, 10*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	close(done)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("the core's owners over time: %v", hist)
	for _, line := range strings.Split(logA.String(), "\n") {
		if strings.Contains(line, "corrected") || strings.Contains(line, "ownership move failed") {
			t.Log(line)
		}
	}
	require.NotContains(t, logA.String(), "differs from the record: corrected", "reconcileCore undid a batch under way")
	for _, id := range onB {
		require.Equal(t, []string{"a", "b"}, hist[id], "LUN %d: the core's owner went back and forth", id)
	}
}

// A controller dies; its hosts' sessions end (reported over the link
// before it closed), and the leader's core decides a failover of its
// LUNs at once. The mover refuses each batch while the dead controller
// is still a member (no interlink to the owner), the core retries with
// its back-off: no ownership-thrash report (every refused batch once
// counted as an owner change, though each LUN moved once).
func TestRefusedFailoversRaiseNoThrash(t *testing.T) {
	lab := coreLab(t)
	var logA syncBuf
	a, b := lab.pair(&logA)
	hostOnBoth(t, lab, a, b)
	time.Sleep(time.Second)
	b.Kill()
	require.Eventually(t, func() bool { return allOn(a, func(string) string { return "a" }) }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	reps, err := a.D.Ctl().Reports()
	require.NoError(t, err)
	var raised []string
	for _, r := range reps {
		if r.Condition == ownership.OwnershipThrash {
			raised = append(raised, r.String())
		}
	}
	t.Logf("refused batches: %d", strings.Count(logA.String(), "ownership move failed"))
	require.Empty(t, raised, "a controller's crash raised ownership thrash")
}

// An operator's move asked of b (not the leader) of a LUN b owns, and b
// stopped meanwhile (a maintenance script: move off, then stop): b's Stop
// waits for the move it asked, and refuses the leader's flush at once, so
// the move is rolled back and Stop goes on (a read-write lock once let no
// request in past the waiting Stop: the flush waited behind Stop, Stop
// for the move, the move for the flush, until the flush timed out, and
// everything b's partner sent stalled meanwhile).
func TestStopDuringItsOwnMove(t *testing.T) {
	lab := coreLab(t)
	a, b := lab.pair(nil)
	require.Eventually(t, func() bool { return b.linkTo("a") != nil && a.linkTo("b") != nil }, 5*time.Second, 10*time.Millisecond)
	var lunB uint64
	for _, l := range lab.cfg.LUNs {
		if l.Preferred == "b" {
			lunB = l.ID
		}
	}
	require.Eventually(t, func() bool { return b.arr.LUN(lunB).Owner().Name == "b" }, 5*time.Second, 10*time.Millisecond)
	var once sync.Once
	hookFn := func(point string, c *Controller, lun uint64) {
		if point == "target-set" && c == a && lun == lunB {
			once.Do(func() {
				for !b.stopping.Load() {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(50 * time.Millisecond) // Stop is waiting for hmu
			})
		}
	}
	testHook.Store(&hookFn)
	defer testHook.Store(nil)
	moved := make(chan error, 1)
	go func() { _, err := b.D.Move(lunB, "a"); moved <- err }()
	time.Sleep(200 * time.Millisecond)
	b.Stop(time.Second)
	err := <-moved
	t.Logf("the move: %v", err)
	// Refused at once by the stopping b, not timed out after waiting
	// behind b's Stop (which waited for the move).
	require.ErrorContains(t, err, "node b is stopping", "the leader's flush to b")
}

// A failback batch decided while b's hosts reach it, carried out after b
// restarted (its hosts not logged in again): refused, as a failover the
// owner's return overtook is (it once moved the LUN to a node no host
// reached, a failback on a partial recovery, and the core then failed it
// over again).
func TestFailbackOvertakenByTargetRestart(t *testing.T) {
	lab := coreLab(t)
	var logA syncBuf
	a, b := lab.pair(&logA)
	b2 := crashAndRestartB(t, lab, a, b)

	onB := lab.preferring("b")
	first, second := onB[0], onB[1]
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hookFn := func(point string, c *Controller, lun uint64) {
		if point == "target-set" && c == a && lun == first {
			once.Do(func() { close(held); <-release })
		}
	}
	testHook.Store(&hookFn)
	defer testHook.Store(nil)
	hostB2 := session(t, b2, "b", "h1")
	for _, l := range lab.cfg.LUNs {
		rtpg(t, hostB2, l.ID)
	}
	probed(t, hostB2)
	<-held // the failback batch {first, second} is under way
	// b restarts (an orderly restart); its host does not log in again.
	hostB2.Close()
	b2.Stop(time.Second)
	b3 := lab.start("b")
	defer b3.Stop(time.Second)
	require.Eventually(t, func() bool { return a.linkTo("b") != nil && !a.upAt("b").IsZero() }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // a's core has been told b3 is up
	close(release)
	var hist []string
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		o := a.arr.LUN(second).Owner().Name
		if len(hist) == 0 || hist[len(hist)-1] != o {
			hist = append(hist, o)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("LUN %d's owner on a: %v; paths %v", second, hist, paths(t, a))
	require.Equal(t, []string{"a"}, hist, "LUN %d failed back to a restarted b no host reaches", second)
}

// crashAndRestartB: the host on both nodes, b crashes, a takes its LUNs
// over, and b starts again (no host logged in to it) with its link to a
// up; it stops at the test's end.
func crashAndRestartB(t *testing.T, lab *lab, a, b *Controller) *Controller {
	t.Helper()
	hostOnBoth(t, lab, a, b)
	b.Kill()
	require.Eventually(t, func() bool { return allOn(a, func(string) string { return "a" }) }, 10*time.Second, 10*time.Millisecond)
	b2 := lab.start("b")
	t.Cleanup(func() { b2.Stop(time.Second) })
	require.Eventually(t, func() bool { return a.linkTo("b") != nil }, 10*time.Second, 10*time.Millisecond)
	return b2
}
