package controller

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/initiator"
	hostlab "github.com/aluad/aluad/pkg/lab"
)

// coreLab is a lab whose leader runs the ownership core, with windows
// short enough for a test (no balance plan during it).
func coreLab(t *testing.T) *lab {
	lab := newLab(t)
	lab.cfg.Ownership = control.Config{Tick: 50 * time.Millisecond, FailbackWindow: 300 * time.Millisecond,
		FailbackCooldown: 600 * time.Millisecond, DiscoveryWindow: 300 * time.Millisecond, Cooldown: time.Second,
		PlanInterval: time.Hour, ShipWindow: time.Hour}
	return lab
}

// rtpg asks for the LUN's target port groups on s (what multipath does
// when it discovers a path).
func rtpg(t *testing.T, s *initiator.Session, lun uint64) {
	t.Helper()
	cdb := []byte{0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0x04, 0, 0, 0}
	require.NoError(t, hostlab.Retry(5*time.Second, func() error {
		r, err := s.Execute(context.Background(), lun, cdb, nil, 1024)
		if err == nil && r.Status != 0 {
			err = fmt.Errorf("RTPG status %#x", r.Status)
		}
		return err
	}))
}

// leaderCore waits until one of cs leads with its core running and
// returns it.
func leaderCore(t *testing.T, cs ...*Controller) *Controller {
	t.Helper()
	var lead *Controller
	require.Eventually(t, func() bool {
		for _, c := range cs {
			if c.core.Load() != nil {
				lead = c
				return true
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond, "a leader runs the core")
	return lead
}

// paths are the nexuses the leader's core knows, as "host@node" (up ones).
func paths(t *testing.T, c *Controller) []string {
	var out []string
	require.NoError(t, c.D.Ctl().Do(func(core *ownership.Core) {
		for _, p := range core.PathStates() {
			if p.Up {
				out = append(out, p.Nexus.Host+"@"+p.Nexus.Node)
			}
		}
	}))
	slices.Sort(out)
	return slices.Compact(out)
}

func allOn(c *Controller, want func(pref string) string) bool {
	for _, l := range c.arr.LUNs {
		if l.Owner().Name != want(l.Preferred.Name) {
			return false
		}
	}
	return true
}

// The ownership core on the leader, fed by both controllers'
// observations: a new leader knows the hosts of both nodes; after a
// controller's restart nothing fails back while the hosts do not reach it
// (a partial recovery), and everything does once they do; an operator's
// move asked of the non-leader is carried out by the leader and not
// undone; no acknowledged write is lost and no LUN has two owners.
func TestCoreOnTheLeader(t *testing.T) {
	lab := coreLab(t)
	a, b := lab.pair(nil)
	ctx := context.Background()
	hostA, hostB := hostOnBoth(t, lab, a, b)
	acked := map[[2]uint64]uint64{}
	tag := uint64(0)
	for _, l := range lab.cfg.LUNs {
		for _, s := range []*initiator.Session{hostA, hostB} {
			tag++
			lba := tag * 8
			require.NoError(t, hostlab.Retry(5*time.Second, func() error { return s.Write16(ctx, l.ID, lba, hostlab.Tagged(tag), 512, false) }))
			acked[[2]uint64{l.ID, lba}] = tag
		}
	}

	// The leader dies: b leads, its core seeded from what it knew of a's
	// hosts and its own, and takes a's LUNs over.
	a.Kill()
	require.Same(t, b, leaderCore(t, b))
	require.Eventually(t, func() bool { return allOn(b, func(string) string { return "b" }) }, 10*time.Second,
		10*time.Millisecond, "b took a's LUNs over: %s", owners(b))
	require.Contains(t, paths(t, b), "iqn.2026-11.test.aluad:h1@b")

	// a restarts; the host has not logged in to it again: a partial
	// recovery, nothing fails back (several failback windows).
	a2 := lab.start("a")
	defer func() { a2.Stop(time.Second) }()
	ck := watchBoth(a2, b, lunIDs(lab))
	require.Eventually(t, func() bool { return a2.linkTo("b") != nil }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(2 * time.Second)
	require.True(t, allOn(b, func(string) string { return "b" }), "a failback without the host on a: %s", owners(b))

	// The host logs in to a again and discovers the path: every LUN fails
	// back to its preferred owner.
	hostA2 := session(t, a2, "a", "h1")
	for _, l := range lab.cfg.LUNs {
		rtpg(t, hostA2, l.ID)
	}
	ck2 := initiator.NewChecker(10*time.Millisecond, hostA2) // its checker probes the new path
	defer ck2.Stop()
	require.Eventually(t, func() bool { return allOn(a2, func(p string) string { return p }) }, 15*time.Second,
		20*time.Millisecond, "the LUNs fail back once the host reaches a: %s", owners(a2))
	for _, l := range lab.cfg.LUNs {
		if l.Preferred == "a" {
			v, _ := a2.fence.View(l.ID)
			require.Equal(t, string(alua.CauseFailback), v.Cause, "LUN %d came back by the core's failback", l.ID)
		}
	}

	// An operator's move asked of a2 (not the leader): the leader carries
	// it out; it stays (the core does not undo it).
	var lunA uint64
	for _, l := range lab.cfg.LUNs {
		if l.Preferred == "a" {
			lunA = l.ID
			break
		}
	}
	ch, err := a2.D.Move(lunA, "b")
	require.NoError(t, err)
	require.Equal(t, "b", ch.To)
	require.Equal(t, alua.CauseManual, ch.Cause)
	require.Equal(t, "b", a2.arr.LUN(lunA).Owner().Name)
	require.Eventually(t, func() bool { return b.arr.LUN(lunA).Owner().Name == "b" }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(time.Second)
	require.Equal(t, "b", b.arr.LUN(lunA).Owner().Name, "the operator's move stays")
	_, err = a2.D.Move(lunA, "b")
	require.Error(t, err, "a move to where the LUN is")
	// And back, asked of the leader.
	_, err = b.D.Move(lunA, "a")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a2.arr.LUN(lunA).Owner().Name == "a" }, 5*time.Second, 10*time.Millisecond)

	for k, tg := range acked {
		var got []byte
		require.NoError(t, hostlab.Retry(5*time.Second, func() (err error) { got, err = hostA2.Read16(ctx, k[0], k[1], 8, 512); return err }))
		require.True(t, bytes.Equal(got, hostlab.Tagged(tg)), "acknowledged write lost: LUN %d LBA %d", k[0], k[1])
	}
	require.Zero(t, ck.done(), "two controllers served one LUN as owner")
}

// A query of the core asked of a controller that does not lead names the
// leader.
func TestCoreQueriesName(t *testing.T) {
	lab := coreLab(t)
	a, b := lab.pair(nil)
	_, err := b.D.Ctl().Reports()
	require.ErrorContains(t, err, "the cluster's leader, node a (this is node b)")
	_, _, err = b.D.Ctl().Rebalance()
	require.ErrorContains(t, err, "node a")
	_, err = a.D.Ctl().Reports()
	require.NoError(t, err)
}

// pair starts a, then b once a leads with its core running; both stop
// at the test's end (nothing for one the test killed or stopped). logA,
// if set, takes a's log.
func (l *lab) pair(logA *syncBuf) (a, b *Controller) {
	l.t.Helper()
	if logA != nil {
		a = l.startLogged("a", logA)
	} else {
		a = l.start("a")
	}
	l.t.Cleanup(func() { a.Stop(time.Second) })
	require.Eventually(l.t, func() bool { return a.core.Load() != nil }, 15*time.Second, 10*time.Millisecond, "a leads")
	b = l.start("b")
	l.t.Cleanup(func() { b.Stop(time.Second) })
	return a, b
}

// hostOnBoth logs host h1 in to both controllers' ports, asks RTPG for
// every LUN on both paths (its multipath driver discovering them), and
// waits until the leader a's core knows both paths.
func hostOnBoth(t *testing.T, lab *lab, a, b *Controller) (hostA, hostB *initiator.Session) {
	t.Helper()
	hostA, hostB = session(t, a, "a", "h1"), session(t, b, "b", "h1")
	for _, l := range lab.cfg.LUNs {
		rtpg(t, hostA, l.ID)
		rtpg(t, hostB, l.ID)
	}
	// Its multipath checker probes both paths (one RTPG discovers none).
	c := initiator.NewChecker(10*time.Millisecond, hostA, hostB)
	t.Cleanup(c.Stop)
	want := []string{"iqn.2026-11.test.aluad:h1@a", "iqn.2026-11.test.aluad:h1@b"}
	require.Eventually(t, func() bool { return slices.Equal(paths(t, a), want) }, 5*time.Second, 20*time.Millisecond,
		"the leader's core knows the host on both nodes (b's by its reports)")
	require.Eventually(t, func() bool {
		var on []string
		require.NoError(t, a.D.Ctl().Do(func(core *ownership.Core) {
			for _, p := range core.PathStates() {
				if p.Up && p.Discovered {
					on = append(on, p.Nexus.Host+"@"+p.Nexus.Node)
				}
			}
		}))
		slices.Sort(on)
		return slices.Equal(slices.Compact(on), want)
	}, 5*time.Second, 20*time.Millisecond, "the host's checker probes discovered both paths")
	return hostA, hostB
}

// preferring lists the LUNs whose preferred owner is node.
func (l *lab) preferring(node string) []uint64 {
	var out []uint64
	for _, lc := range l.cfg.LUNs {
		if lc.Preferred == node {
			out = append(out, lc.ID)
		}
	}
	return out
}

// probed runs a multipath path checker on ss until the test ends: the
// array counts a path as discovered only while commands keep arriving on
// it (one RTPG discovers none).
func probed(t *testing.T, ss ...*initiator.Session) {
	c := initiator.NewChecker(10*time.Millisecond, ss...)
	t.Cleanup(c.Stop)
}
