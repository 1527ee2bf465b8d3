package array

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/media"
)

// Concurrent sequences found by review (each lost an acknowledged write
// before): they run the array's calls on real goroutines, held at the
// interleaving by gates in the interlink and the media.

// A forwarded write that passed route before a's crash waits in the
// interlink; the failover takeover waits for it (io.Lock); a restarts
// meanwhile. The restart replays the mirror onto a before a serves, the
// write merges with the acknowledged data there, and the takeover flushes
// a and hands the LUN over: nothing is lost.
func TestRestartWhileTakeoverDrains(t *testing.T) {
	const penalty = 50 * time.Microsecond
	var armed atomic.Bool
	inRoute := make(chan struct{})
	goOn := make(chan struct{})
	cfg := Loopback(t.TempDir(), 1<<20)
	cfg.Interlink.Penalty = penalty
	mirror := true
	cfg.Cache.Mirror = &mirror
	a, err := New(cfg, Options{
		OpenStore:     func(_ uint64, size int64) (media.Store, error) { return media.NewMem(size), nil },
		ManualDestage: true,
		Background:    func(f func()) { f() },
		Sleep: func(d time.Duration) {
			if d == penalty && armed.CompareAndSwap(true, false) {
				close(inRoute)
				<-goOn
			}
		},
	})
	require.NoError(t, err)
	defer a.Close()
	l := a.LUN(2)
	require.Equal(t, "a", l.Owner().Name)
	w1 := bytes.Repeat([]byte{0xab}, 8192)
	require.NoError(t, l.WriteAt(1, w1, 0, false)) // via a's port: acked, mirrored on b

	armed.Store(true)
	wErr := make(chan error, 1)
	go func() { wErr <- l.WriteAt(3, bytes.Repeat([]byte{0xcd}, 512), 0, false) }() // via b's port
	<-inRoute
	_, err = a.CrashNode("a")
	require.NoError(t, err)
	mErr := make(chan error, 1)
	go func() { _, err := a.Move([]uint64{2}, "b", alua.CauseFailover); mErr <- err }()
	for l.io.TryRLock() { // until the takeover waits in io.Lock
		l.io.RUnlock()
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, a.RestartNode("a"))
	close(goOn)
	require.NoError(t, <-wErr, "the in-flight write is acknowledged")
	require.NoError(t, <-mErr)
	require.Equal(t, "b", l.Owner().Name)
	require.Zero(t, a.Node("a").Cache.DirtyBytes(2), "a holds no page of a LUN it no longer owns")
	got := make([]byte, 8192)
	require.NoError(t, l.ReadAt(3, got, 0))
	want := append(bytes.Repeat([]byte{0xcd}, 512), w1[512:]...)
	require.True(t, bytes.Equal(want, got), "W1's bytes 512..4095 (acknowledged before the crash) are gone: got[512]=%#x got[4096]=%#x", got[512], got[4096])
}

// RestartNode has replayed LUN 2 into a's cache but not yet set a up when
// the failover takeover (decided at the crash) starts: it sees a down and
// replays the mirror on b. a's dirty copies must go, or a's destager
// writes them over newer data that b wrote later.
func TestTakeoverAfterRestartReplayDropsOldOwnerPages(t *testing.T) {
	a := midMoveArray(t, true, func(*Array, MovePoint) {})
	l := a.LUN(2)
	require.NoError(t, l.WriteAt(1, bytes.Repeat([]byte{0xab}, 4096), 0, false))
	_, err := a.CrashNode("a")
	require.NoError(t, err)
	n := a.Node("a")
	// RestartNode(a), first part (verbatim).
	n.Cache.Restart()
	for _, l := range a.LUNs {
		l.replayMu.Lock()
		if l.Owner() == n {
			_, err := a.replay(l, n)
			require.NoError(t, err)
		}
		l.replayMu.Unlock()
	}
	// The executor's failover runs now.
	c, err := a.Move([]uint64{2}, "b", alua.CauseFailover)
	require.NoError(t, err)
	t.Logf("takeover replayed %d", c.Replayed)
	// RestartNode(a), the rest.
	a.topo.Lock()
	n.up.Store(true)
	a.topo.Unlock()
	require.Zero(t, n.Cache.DirtyBytes(2), "a holds dirty pages of a LUN it does not own")

	require.NoError(t, l.WriteAt(3, bytes.Repeat([]byte{0xee}, 4096), 0, false)) // acked on b
	require.NoError(t, a.Node("b").Cache.Flush(2))
	var seen uint64
	n.Cache.DestagePass(&seen) // a's destager, idle
	n.Cache.DestagePass(&seen)
	_, err = a.Move([]uint64{2}, "a", alua.CauseFailback)
	require.NoError(t, err)
	got := make([]byte, 4096)
	require.NoError(t, l.ReadAt(1, got, 0))
	require.True(t, bytes.Equal(bytes.Repeat([]byte{0xee}, 4096), got), "the acknowledged 0xee write: got %#x", got[0])
}

// gate blocks a store's writes while armed.
type gate struct {
	media.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gate) WriteAt(p []byte, off int64) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Store.WriteAt(p, off)
}

// Three nodes. b's crash waits in CrashMirror for a destage already on
// its way to media; a failover takeover of a's LUN to c is asked for
// meanwhile. It must not skip b's copies and switch while b's crash has
// not yet counted them (a silent loss of two failures): the crash holds
// the topology until it has, so the takeover comes after and finds the
// loss reported, or before and finds the copies.
func TestSecondCrashCountsHeldCopiesDuringTakeover(t *testing.T) {
	cfg := Loopback(t.TempDir(), 1<<20)
	cfg.Interlink.Penalty = 0
	mirror := true
	cfg.Cache.Mirror = &mirror
	nc := NodeConfig{Name: "c"}
	for i := 0; i < 2; i++ {
		nc.Ports = append(nc.Ports, PortConfig{Name: fmt.Sprintf("c%d", i), Addr: "127.0.0.1:0"})
	}
	cfg.Nodes = append(cfg.Nodes, nc)
	gates := map[uint64]*gate{}
	var bgMu sync.Mutex
	var bg []func()
	a, err := New(cfg, Options{
		OpenStore:     func(_ uint64, size int64) (media.Store, error) { return media.NewMem(size), nil },
		ManualDestage: true,
		Background:    func(f func()) { bgMu.Lock(); bg = append(bg, f); bgMu.Unlock() },
		WrapStore: func(id uint64, s media.Store) media.Store {
			g := &gate{Store: s, entered: make(chan struct{}), release: make(chan struct{})}
			gates[id] = g
			return g
		},
	})
	require.NoError(t, err)
	defer func() {
		for _, f := range bg {
			f()
		}
		a.Close()
	}()
	x, y := a.LUN(0), a.LUN(1)
	require.Equal(t, "a", x.Owner().Name)
	require.Equal(t, "b", y.Owner().Name)
	require.NoError(t, x.WriteAt(1, bytes.Repeat([]byte{0xab}, 4096), 0, false)) // mirrored on b
	require.NoError(t, y.WriteAt(3, bytes.Repeat([]byte{0x11}, 4096), 0, false)) // dirty on b
	c1, err := a.CrashNode("a")
	require.NoError(t, err)
	require.Empty(t, c1.Lost)

	g := gates[1]
	g.armed.Store(true)
	go a.Node("b").Cache.Flush(1) // a destage of b's on its way to media
	<-g.entered
	crashed := make(chan Change, 1)
	go func() { c, _ := a.CrashNode("b"); crashed <- c }()
	for a.Node("b").Up() {
		time.Sleep(time.Millisecond)
	}
	moved := make(chan error, 1)
	go func() { _, err := a.Move([]uint64{0}, "c", alua.CauseFailover); moved <- err }()
	time.Sleep(20 * time.Millisecond) // the takeover reaches the crash's topology lock (either order is checked)
	close(g.release)
	c2 := <-crashed
	require.NoError(t, <-moved)
	t.Logf("b's crash reports lost: %+v", c2.Lost)
	got := make([]byte, 4096)
	require.NoError(t, x.ReadAt(5, got, 0))
	if !bytes.Equal(got, bytes.Repeat([]byte{0xab}, 4096)) {
		lostX := false
		for _, ls := range c2.Lost {
			lostX = lostX || ls.LUN == 0
		}
		require.True(t, lostX, "LUN 0's acknowledged write is gone and no crash reported it lost")
	}
}
