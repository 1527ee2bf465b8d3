package controller

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/initiator"
	hostlab "github.com/aluad/aluad/pkg/lab"
)

// addNode adds a controller to the lab's configuration: two ports and an
// interlink address, no LUN preferring it.
func (l *lab) addNode(name string) {
	l.t.Helper()
	nc := array.NodeConfig{Name: name}
	for i := 0; i < 2; i++ {
		nc.Ports = append(nc.Ports, array.PortConfig{Name: name + string(rune('0'+i)), Addr: "127.0.0.1:0"})
	}
	l.cfg.Nodes = append(l.cfg.Nodes, nc)
	il := map[string]string{name: freeAddr(l.t)}
	for n, a := range l.cfg.Cluster.Interlink {
		il[n] = a
	}
	l.cfg.Cluster.Interlink = il
}

// linked waits until every pair of the controllers has its interlink up.
func linked(t *testing.T, cs ...*Controller) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, x := range cs {
			for _, y := range cs {
				if x != y && x.linkTo(y.node) == nil {
					return false
				}
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the interlinks come up")
}

// Three controllers: a's partner b dies, so a's copies go to c (a new
// mirror generation); b comes back as a member, the first after a in
// configuration order again, but a's link to b stays down, so a's
// acknowledged writes are still dirty on a with their only copies on c.
// a dies: its LUNs must go to c, the holder recorded with a's latest
// generation, which replays them, not to b, which holds nothing of them.
// (The review's sequence; the takeover once went to b and lost them.)
// The same when c is the first partner a ever had (b was not started):
// no loss made a generation then, so the first partner is recorded too.
func TestTakeoverGoesToTheRecordedHolder(t *testing.T) {
	for _, first := range []bool{false, true} {
		t.Run(map[bool]string{false: "partner died", true: "first partner"}[first], func(t *testing.T) {
			takeoverToTheHolder(t, first)
		})
	}
}

func takeoverToTheHolder(t *testing.T, first bool) {
	lab := newLab(t)
	lab.addNode("c")
	// No idle destage: a's pages stay dirty, their copies needed.
	lab.cfg.Cache.DestageInterval = time.Hour
	ctx := context.Background()
	a, c := lab.start("a"), lab.start("c")
	defer func() { c.Stop(time.Second) }()
	luns := lab.preferring("a")
	onA := session(t, a, "a", "h1")
	w := newWriter(t)
	if !first {
		b := lab.start("b")
		linked(t, a, b, c)
		mirrorsTo(t, a, "b")
		for _, lun := range luns {
			require.NoError(t, w.write(onA, lun, 0, 5*time.Second))
		}
		require.Positive(t, b.arr.Local().Cache.MirrorBytes(), "a mirrors to b, its partner")
		b.Kill()
	} else {
		linked(t, a, c)
	}
	// Once a sees no b, its partner is c; its writes are mirrored there
	// (through until then).
	deadline := time.Now().Add(10 * time.Second)
	for lba := uint64(8); c.arr.Local().Cache.MirrorBytes() == 0; lba += 8 {
		require.True(t, time.Now().Before(deadline), "a mirrors to c")
		require.NoError(t, w.write(onA, luns[0], lba%512, 5*time.Second))
		time.Sleep(20 * time.Millisecond)
	}
	for _, lun := range luns {
		for l := uint64(512); l < 576; l += 8 {
			require.NoError(t, w.write(onA, lun, l, 5*time.Second))
		}
	}
	held := c.arr.Local().Cache.MirrorBytes()
	t.Logf("c holds %d bytes of a's copies", held)

	// b comes back, but a's link to it does not (a dials b: a's cut holds
	// it down), so a keeps its copies on c.
	require.NoError(t, a.CutInterlink("b", true))
	b2 := lab.start("b")
	defer func() { b2.Stop(time.Second) }()
	require.Eventually(t, func() bool { return a.arr.Node("b").Up() && c.arr.Node("b").Up() }, 10*time.Second,
		10*time.Millisecond, "b is a member again")
	require.Equal(t, "b", a.partnerName(), "b is a's partner by configuration order again")
	require.Nil(t, a.linkTo("b"))
	for _, lun := range luns {
		require.Positive(t, a.arr.Local().Cache.DirtyBytes(lun), "a's writes are dirty on a")
	}
	require.Equal(t, held, c.arr.Local().Cache.MirrorBytes(), "their copies are on c")
	require.Zero(t, b2.arr.Local().Cache.MirrorBytes(), "and not on b")

	a.Kill()
	onC := session(t, c, "c", "h2")
	for _, lun := range luns {
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			o, err := c.store.Owner(ctx, lun)
			return err == nil && o.Owner != "a" && o.To == ""
		}, 15*time.Second, 20*time.Millisecond, "a's LUN %d is taken over", lun)
	}
	w.verify(onC, "after a's takeover")
	ctxR, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, lun := range luns {
		o, err := c.store.Owner(ctxR, lun)
		require.NoError(t, err)
		require.Equal(t, cluster.Record{LUN: lun, Owner: "c", Cause: "failover", Replay: true}, o.Record,
			"LUN %d goes to the holder of a's copies", lun)
	}
}

// watchAll is watchBoth over any number of controllers: it counts the
// moments two of them serve one LUN as owner (it must stay 0).
func watchAll(cs []*Controller, luns []uint64) *checker {
	ck := &checker{stop: make(chan struct{})}
	ck.wg.Add(1)
	go func() {
		defer ck.wg.Done()
		for {
			select {
			case <-ck.stop:
				return
			default:
			}
			for _, l := range luns {
				n := 0
				for _, c := range cs {
					if c.Serves(l) {
						n++
					}
				}
				if n > 1 {
					ck.both.Add(1)
				}
			}
			time.Sleep(500 * time.Microsecond)
		}
	}()
	return ck
}

// Four controllers, one LUN preferring each: a killed with dirty writes
// (their copies on b, its partner), then c (copies on d); each LUN is
// served by the holder of its owner's copies with every acknowledged
// write; both restart and get their LUNs back; never two owners of one
// LUN.
func TestFourControllers(t *testing.T) {
	lab := newLab(t)
	lab.addNode("c")
	lab.addNode("d")
	names := []string{"a", "b", "c", "d"}
	for i := range lab.cfg.LUNs {
		lab.cfg.LUNs[i].Preferred = names[i%len(names)]
	}
	lab.cfg.Cache.DestageInterval = time.Hour // the takeovers replay what a and c wrote
	cs := map[string]*Controller{}
	for _, n := range names {
		cs[n] = lab.start(n)
	}
	defer func() {
		for _, c := range cs {
			c.Stop(time.Second)
		}
	}()
	all := func() []*Controller {
		var out []*Controller
		for _, n := range names {
			out = append(out, cs[n])
		}
		return out
	}
	linked(t, all()...)
	for i, n := range names {
		mirrorsTo(t, cs[n], names[(i+1)%len(names)])
	}
	on := map[string]*initiator.Session{}
	for _, n := range names {
		on[n] = session(t, cs[n], n, "h1")
	}
	ck := watchAll(all(), lunIDs(lab))
	w := newWriter(t)
	writeAll := func(from uint64) {
		for _, l := range lab.cfg.LUNs {
			for lba := from; lba < from+64; lba += 8 {
				require.NoError(t, w.write(on[l.Preferred], l.ID, lba, 10*time.Second))
			}
		}
	}
	served := func(lun uint64, by string) {
		t.Helper()
		require.Eventually(t, func() bool { return cs[by].Serves(lun) && cs[by].arr.LUN(lun).Owner().Name == by },
			15*time.Second, 10*time.Millisecond, "LUN %d served by %s: %s", lun, by, owners(cs[by]))
	}
	writeAll(0)
	for _, l := range lab.cfg.LUNs {
		require.Positive(t, cs[l.Preferred].arr.Local().Cache.DirtyBytes(l.ID), "LUN %d is dirty on its owner", l.ID)
	}

	for _, kill := range []struct{ node, holder string }{{"a", "b"}, {"c", "d"}} {
		require.Positive(t, cs[kill.holder].arr.Local().Cache.MirrorBytes(), "%s holds %s's copies", kill.holder, kill.node)
		cs[kill.node].Kill()
		for _, lun := range lab.preferring(kill.node) {
			served(lun, kill.holder)
		}
		w.verify(on[kill.holder], "after "+kill.node+"'s takeover")
		// (a's LUN is b's now, so b writes it: its copies on c, then d)
		for _, l := range lab.cfg.LUNs {
			if l.Preferred != kill.node {
				require.NoError(t, w.write(on[cs["b"].arr.LUN(l.ID).Owner().Name], l.ID, 200, 10*time.Second))
			}
		}
	}

	for _, n := range []string{"a", "c"} {
		cs[n] = lab.start(n)
		on[n] = session(t, cs[n], n, "h2")
	}
	require.Zero(t, ck.done(), "two controllers served one LUN as owner")
	ck = watchAll(all(), lunIDs(lab))
	for _, l := range lab.cfg.LUNs {
		served(l.ID, l.Preferred)
	}
	writeAll(400)
	for _, n := range names {
		w.verify(on[n], "through "+n+" after the failbacks")
	}
	require.Zero(t, ck.done(), "two controllers served one LUN as owner")
}

// Three controllers: b crashes with an acknowledged write whose only
// copy is on c, its partner, and c is stopped cleanly before the leader
// took b's LUN over, while a is a member: c's stop waits for the takeover
// (the copy replayed, flushed with the stop), and a serves the write. It
// once returned at once because another controller was a member, and
// left with the copy.
func TestStopWaitsForATakeoverWithThree(t *testing.T) {
	lab := newLab(t)
	lab.addNode("c")
	ctx := context.Background()
	a, b, c := lab.start("a"), lab.start("b"), lab.start("c")
	defer func() { a.Stop(time.Second) }()
	linked(t, a, b, c)
	mirrorsTo(t, b, "c")
	lun := lab.preferring("b")[0]
	onB := session(t, b, "b", "h1")
	data := hostlab.Tagged(13)
	require.NoError(t, hostlab.Retry(5*time.Second, func() error { return onB.Write16(ctx, lun, 0, data, 512, false) }))
	require.Positive(t, c.arr.Local().Cache.MirrorBytes(), "c holds the copy")
	testHold.Store(true) // the leader slow to decide: the stop comes first
	defer testHold.Store(false)
	b.Kill()
	require.Eventually(t, func() bool {
		m, _, err := a.store.Members(ctx)
		return err == nil && len(m) == 2
	}, 10*time.Second, 20*time.Millisecond)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(time.Second) }()
	time.Sleep(200 * time.Millisecond) // the stop has begun
	testHold.Store(false)
	require.NoError(t, <-stopped)
	onA := session(t, a, "a", "h2")
	var got []byte
	require.NoError(t, hostlab.Retry(20*time.Second, func() (err error) {
		got, err = onA.Read16(ctx, lun, 0, 8, 512)
		return err
	}))
	require.True(t, bytes.Equal(got, data), "acknowledged write lost: c stopped with b's only copy")
}
