package array

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/media"
)

// testArray builds a 2-node array (ports 1,2 on a; 3,4 on b) with small LUNs.
func testArray(t *testing.T, wrap func(uint64, media.Store) media.Store, hosts ...HostConfig) *Array {
	t.Helper()
	cfg := Loopback(t.TempDir(), 1<<20)
	cfg.Interlink.Penalty = 0
	cfg.Hosts = hosts
	a, err := New(cfg, Options{WrapStore: wrap})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

func TestInitialStates(t *testing.T) {
	a := testArray(t, nil, HostConfig{Name: "h2", Type: "linux-standby", Initiators: []string{"iqn.2026-11.org.example:H2"}})
	tests := []struct {
		lun       uint64
		initiator string
		want      []alua.AccessState
	}{
		{0, "iqn.2026-11.org.example:h1", []alua.AccessState{alua.ActiveOptimized, alua.ActiveNonOptimized}},
		{1, "iqn.2026-11.org.example:h1", []alua.AccessState{alua.ActiveNonOptimized, alua.ActiveOptimized}},
		{0, "iqn.2026-11.org.example:h2", []alua.AccessState{alua.ActiveOptimized, alua.Standby}}, // initiator names are case-blind
		{1, "iqn.2026-11.org.example:h2", []alua.AccessState{alua.Standby, alua.ActiveOptimized}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("lun%d/%s", tc.lun, tc.initiator), func(t *testing.T) {
			var got []alua.AccessState
			for _, g := range a.LUN(tc.lun).Groups(tc.initiator) {
				got = append(got, g.State)
				require.Equal(t, g.Node == a.LUN(tc.lun).Owner(), g.Pref, "PREF marks the owner's group")
				require.Equal(t, g.Node.GroupID, g.ID)
			}
			require.Equal(t, tc.want, got)
		})
	}
	require.Equal(t, "h2", a.HostOf("IQN.2026-11.ORG.EXAMPLE:H2").Name)
	require.Equal(t, "default", a.HostOf("iqn.2026-11.org.example:nobody").Type.Name)
}

func TestMoveErrors(t *testing.T) {
	a := testArray(t, nil)
	tests := []struct {
		name string
		ids  []uint64
		to   string
		want string
	}{
		{"unknown node", []uint64{0}, "z", `no node "z"`},
		{"unknown LUN", []uint64{42}, "b", "no LUN 42"},
		{"already there", []uint64{1, 3}, "b", "already owned by node b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Move(tc.ids, tc.to, alua.CauseManual)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, a.SetNodeUp("b", false))
	_, err := a.Move([]uint64{0}, "b", alua.CauseManual)
	require.ErrorContains(t, err, "node b is down")
	require.Equal(t, alua.Unavailable, a.LUN(1).State("x", a.Node("b")))
	require.ErrorContains(t, a.SetNodeUp("q", true), "no node")
}

// orderStore logs the order of media operations and can hold a read.
type orderStore struct {
	media.Store
	mu        sync.Mutex
	log       []string
	holdRead  chan struct{}
	readEnter chan struct{}
	syncErr   error
}

func (o *orderStore) add(s string) {
	o.mu.Lock()
	o.log = append(o.log, s)
	o.mu.Unlock()
}

func (o *orderStore) ReadAt(p []byte, off int64) error {
	o.mu.Lock()
	hold, enter := o.holdRead, o.readEnter
	o.holdRead = nil
	o.mu.Unlock()
	if hold != nil {
		o.add("read-start")
		close(enter)
		<-hold
		defer o.add("read-end")
	}
	return o.Store.ReadAt(p, off)
}

func (o *orderStore) Sync() error {
	o.add("sync")
	if o.syncErr != nil {
		return o.syncErr
	}
	return o.Store.Sync()
}

// arrayWithHeldRead: LUN 0's next media read blocks until hold is closed.
func arrayWithHeldRead(t *testing.T) (*Array, *LUN, *orderStore, chan struct{}) {
	var st *orderStore
	a := testArray(t, func(lun uint64, s media.Store) media.Store {
		if lun == 0 {
			st = &orderStore{Store: s}
			return st
		}
		return s
	})
	st.holdRead, st.readEnter = make(chan struct{}), make(chan struct{})
	return a, a.LUN(0), st, st.holdRead
}

// An implicit move flushes while I/O goes on, then waits for commands
// already inside the media to finish (drain); a command arriving during
// that stop is held, not failed, and is served by the new owner.
func TestMoveDrainsAndHoldsIO(t *testing.T) {
	a, l, st, hold := arrayWithHeldRead(t)
	readDone := make(chan error)
	go func() { readDone <- l.ReadAt(3, make([]byte, 512), 0) }()
	<-st.readEnter
	moveDone := make(chan Change)
	go func() {
		c, err := a.Move([]uint64{0}, "b", alua.CauseManual)
		require.NoError(t, err)
		moveDone <- c
	}()
	for {
		st.mu.Lock()
		n := len(st.log)
		st.mu.Unlock()
		if n == 2 { // the flush phase synced while the read was in flight
			break
		}
		runtime.Gosched()
	}
	require.Equal(t, alua.ActiveOptimized, l.State("h", a.Node("a")), "an implicit move does not report TRANSITIONING")
	require.Equal(t, alua.ActiveNonOptimized, l.State("h", a.Node("b")))
	// The move now waits for the in-flight read (its lock request is
	// pending once TryRLock fails); a new read is held.
	for l.io.TryRLock() {
		l.io.RUnlock()
		runtime.Gosched()
	}
	heldDone := make(chan error)
	go func() { heldDone <- l.ReadAt(1, make([]byte, 512), 4096) }()
	select {
	case <-heldDone:
		t.Fatal("a read during the stop was not held")
	case <-time.After(20 * time.Millisecond):
	}
	require.Equal(t, a.Node("a"), l.Owner(), "no switch before the drain")
	missesB := a.Node("b").Cache.Stats().ReadMisses
	close(hold)
	require.NoError(t, <-readDone)
	c := <-moveDone
	require.NoError(t, <-heldDone)
	require.Equal(t, []string{"read-start", "sync", "read-end"}, st.log)
	require.Equal(t, "a", c.From)
	require.Equal(t, "b", c.To)
	require.Equal(t, a.Node("b"), l.Owner())
	require.Equal(t, uint64(1), l.Generation())
	require.Equal(t, missesB+1, a.Node("b").Cache.Stats().ReadMisses, "the held read was served by the new owner's cache")
	require.Positive(t, c.Stop)
}

// An STPG (explicit) move reports TRANSITIONING on both groups while it runs.
func TestSTPGMoveReportsTransitioning(t *testing.T) {
	a, l, st, hold := arrayWithHeldRead(t)
	go func() { _ = l.ReadAt(3, make([]byte, 512), 0) }()
	<-st.readEnter
	done := make(chan struct{})
	go func() {
		_, err := a.Move([]uint64{0}, "b", alua.CauseSTPG)
		require.NoError(t, err)
		close(done)
	}()
	for !l.Moving() {
		runtime.Gosched()
	}
	require.Equal(t, alua.Transitioning, l.State("h", a.Node("a")))
	require.Equal(t, alua.Transitioning, l.State("h", a.Node("b")))
	close(hold)
	<-done
	require.Equal(t, alua.ActiveOptimized, l.State("h", a.Node("b")))
}

func TestMoveFlushFailureRollsBack(t *testing.T) {
	var st *orderStore
	a := testArray(t, func(lun uint64, s media.Store) media.Store {
		if lun == 2 {
			st = &orderStore{Store: s, syncErr: errors.New("disk on fire")}
			return st
		}
		return s
	})
	var got []Change
	a.OnChange(func(c Change) { got = append(got, c) })
	c, err := a.Move([]uint64{0, 2}, "b", alua.CauseBalance)
	require.ErrorContains(t, err, "disk on fire")
	require.True(t, c.Failed)
	for _, id := range []uint64{0, 2} {
		require.Equal(t, a.Node("a"), a.LUN(id).Owner(), "LUN %d rolled back", id)
		require.False(t, a.LUN(id).Moving())
		require.Equal(t, uint64(0), a.LUN(id).Generation())
	}
	require.Len(t, got, 1)
	require.True(t, got[0].Failed)
	require.Equal(t, []uint64{0, 2}, got[0].LUNs)
}

// Randomised check against the simple model (CONVENTIONS 10): while
// readers and writers hit every port and a mover swaps owners, every
// snapshot of a LUN's groups is either one AO group and the rest ANO, or
// the two groups of a move TRANSITIONING; no write is lost; every command
// that arrived on a non-owner port is counted as forwarded.
func TestMovesUnderLoadKeepInvariants(t *testing.T) {
	a := testArray(t, nil)
	const workers, ops = 4, 300
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var bad []string
	var badMu sync.Mutex
	fail := func(s string) {
		badMu.Lock()
		bad = append(bad, s)
		badMu.Unlock()
	}
	// Observer: checks the group-state invariant continuously.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, l := range a.LUNs {
				var ao, ano, tr int
				for _, g := range l.Groups("h") {
					switch g.State {
					case alua.ActiveOptimized:
						ao++
					case alua.ActiveNonOptimized:
						ano++
					case alua.Transitioning:
						tr++
					}
				}
				if !(ao == 1 && ano == 1 && tr == 0) && !(ao == 0 && ano == 0 && tr == 2) {
					fail(fmt.Sprintf("LUN %d: AO=%d ANO=%d TRANSITIONING=%d", l.ID, ao, ano, tr))
				}
			}
		}
	}()
	// Mover.
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewSource(1))
		for i := 0; i < 60; i++ {
			id := uint64(r.Intn(len(a.LUNs)))
			to := a.Nodes[r.Intn(2)].Name
			if _, err := a.Move([]uint64{id}, to, alua.CauseManual); err != nil && !errors.Is(err, ErrNoChange) {
				fail(err.Error())
			}
		}
	}()
	// Workers: each owns distinct blocks, writes then reads back through random ports.
	var ioWG sync.WaitGroup
	for w := 0; w < workers; w++ {
		ioWG.Add(1)
		go func(w int) {
			defer ioWG.Done()
			r := rand.New(rand.NewSource(int64(w)))
			for i := 0; i < ops; i++ {
				l := a.LUNs[r.Intn(len(a.LUNs))]
				off := int64((w*ops + i) * 512)
				want := bytes.Repeat([]byte{byte(w), byte(i)}, 256)
				if err := l.WriteAt(uint16(1+r.Intn(4)), want, off, false); err != nil {
					fail(err.Error())
					return
				}
				got := make([]byte, 512)
				if err := l.ReadAt(uint16(1+r.Intn(4)), got, off); err != nil || !bytes.Equal(got, want) {
					fail(fmt.Sprintf("LUN %d offset %d: read back wrong data (%v)", l.ID, off, err))
				}
			}
		}(w)
	}
	ioWG.Wait()
	close(stop)
	wg.Wait()
	require.Empty(t, bad)
	var cmds uint64
	for _, l := range a.LUNs {
		for i := range l.Stats() {
			cmds += l.Stats()[i].Commands.Load()
			require.LessOrEqual(t, l.Stats()[i].Forwarded.Load(), l.Stats()[i].Commands.Load())
		}
	}
	require.Equal(t, uint64(2*workers*ops), cmds)
}

// The forwarded counters follow the owner: a command on a port of the
// owner is local, on another node's port it is forwarded with its bytes.
func TestForwardingFollowsOwner(t *testing.T) {
	slept := time.Duration(0)
	cfg := DefaultConfig()
	cfg.Data = t.TempDir()
	cfg.LUNs = cfg.LUNs[:1]
	cfg.LUNs[0].Size = 1 << 20
	a, err := New(cfg, Options{Sleep: func(d time.Duration) { slept += d }})
	require.NoError(t, err)
	defer a.Close()
	l := a.LUN(0)
	buf := make([]byte, 4096)
	require.NoError(t, l.ReadAt(1, buf, 0)) // node a: owner
	require.NoError(t, l.ReadAt(3, buf, 0)) // node b: forwarded
	require.Equal(t, uint64(0), l.Stats()[0].Forwarded.Load())
	require.Equal(t, uint64(1), l.Stats()[1].Forwarded.Load())
	require.Equal(t, uint64(4096), l.Stats()[1].ForwardedBytes.Load())
	require.Equal(t, cfg.Interlink.Penalty, slept, "one interlink penalty for one forwarded transfer")
	_, err = a.Move([]uint64{0}, "b", alua.CauseManual)
	require.NoError(t, err)
	require.NoError(t, l.ReadAt(1, buf, 0)) // node a is now the non-owner
	require.NoError(t, l.ReadAt(3, buf, 0))
	require.Equal(t, uint64(1), l.Stats()[0].Forwarded.Load())
	require.Equal(t, uint64(1), l.Stats()[1].Forwarded.Load())
}

func TestSetGroups(t *testing.T) {
	tests := []struct {
		name      string
		reqs      []alua.GroupRequest
		wantMoved bool
		wantOwner string
		wantErr   error
	}{
		{"ask for the other group", []alua.GroupRequest{{Group: 2, State: alua.ActiveOptimized}}, true, "b", nil},
		{"ask for the owner's group", []alua.GroupRequest{{Group: 1, State: alua.ActiveOptimized}}, false, "a", nil},
		{"demote the owner", []alua.GroupRequest{{Group: 1, State: alua.Standby}}, true, "b", nil},
		{"demote a non-owner", []alua.GroupRequest{{Group: 2, State: alua.ActiveNonOptimized}}, false, "a", nil},
		{"unknown group", []alua.GroupRequest{{Group: 9, State: alua.ActiveOptimized}}, false, "a", ErrBadRequest},
		{"two AO groups", []alua.GroupRequest{{Group: 1, State: alua.ActiveOptimized}, {Group: 2, State: alua.ActiveOptimized}}, false, "a", ErrBadRequest},
		{"transitioning asked", []alua.GroupRequest{{Group: 2, State: alua.Transitioning}}, false, "a", ErrBadRequest},
		{"nothing asked", nil, false, "a", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := testArray(t, nil)
			moved, err := a.SetGroups(0, tc.reqs)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantMoved, moved)
			require.Equal(t, tc.wantOwner, a.LUN(0).Owner().Name)
		})
	}
	a := testArray(t, nil)
	require.NoError(t, a.SetNodeUp("b", false))
	_, err := a.SetGroups(0, []alua.GroupRequest{{Group: 1, State: alua.Standby}})
	require.ErrorIs(t, err, ErrBadRequest, "no other group is up")
	_, err = a.SetGroups(42, nil)
	require.ErrorContains(t, err, "no LUN 42")
}

// TestExplicitTakeoverByHost: in the explicit baseline, a failed owner's
// LUNs wait for a host: the surviving group is standby (not
// transitioning, which refuses STPG), and the STPG that makes it
// active/optimized takes the LUN over with the mirrored writes. The
// implicit array reports transitioning until its own takeover.
func TestExplicitTakeoverByHost(t *testing.T) {
	for _, mode := range []string{"implicit", "explicit"} {
		t.Run(mode, func(t *testing.T) {
			cfg := Loopback(t.TempDir(), 1<<20)
			cfg.ALUA = mode
			a, err := New(cfg, Options{})
			require.NoError(t, err)
			defer a.Close()
			l := a.LUN(0)
			require.Equal(t, a.Node("a"), l.Owner())
			data := bytes.Repeat([]byte{0xab}, 4096)
			require.NoError(t, l.WriteAt(1, data, 0, false))
			_, err = a.CrashNode("a")
			require.NoError(t, err)
			b := a.Node("b")
			if mode == "implicit" {
				require.Equal(t, alua.Transitioning, l.State("h", b), "the array's takeover is pending")
				return
			}
			require.Equal(t, alua.Standby, l.State("h", b))
			require.Equal(t, alua.Unavailable, l.State("h", a.Node("a")))
			_, err = a.SetGroups(0, []alua.GroupRequest{{Group: a.Node("a").GroupID, State: alua.ActiveOptimized}})
			require.ErrorIs(t, err, ErrBadRequest, "the failed group cannot be made active")
			moved, err := a.SetGroups(0, []alua.GroupRequest{{Group: b.GroupID, State: alua.ActiveOptimized}})
			require.NoError(t, err)
			require.True(t, moved)
			require.Equal(t, b, l.Owner())
			require.Equal(t, alua.ActiveOptimized, l.State("h", b))
			got := make([]byte, len(data))
			require.NoError(t, l.ReadAt(3, got, 0))
			require.Equal(t, data, got, "the acknowledged write survived the takeover")
		})
	}
}

// TestGroupsAfterCrashAndRestart: the groups whose state a crash, a
// takeover or a restart changed report status code 02h (implicit), and
// PREF is on the owner's group only while that group is up.
func TestGroupsAfterCrashAndRestart(t *testing.T) {
	a := testArray(t, nil)
	const h1 = "iqn.2026-11.org.example:h1"
	type grp struct {
		State  alua.AccessState
		Pref   bool
		Status byte
	}
	groups := func(lun uint64) []grp {
		var out []grp
		for _, g := range a.LUN(lun).Groups(h1) {
			out = append(out, grp{g.State, g.Pref, g.Status})
		}
		return out
	}
	steps := []struct {
		name       string
		do         func() error
		lun0, lun1 []grp
	}{
		{"start", func() error { return nil },
			[]grp{{alua.ActiveOptimized, true, alua.StatusNone}, {alua.ActiveNonOptimized, false, alua.StatusNone}},
			[]grp{{alua.ActiveNonOptimized, false, alua.StatusNone}, {alua.ActiveOptimized, true, alua.StatusNone}}},
		{"crash a", func() error { _, err := a.CrashNode("a"); return err },
			[]grp{{alua.Unavailable, false, alua.StatusImplicit}, {alua.Transitioning, false, alua.StatusImplicit}},
			[]grp{{alua.Unavailable, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusNone}}},
		{"takeover of LUN 0 by b", func() error { _, err := a.Move([]uint64{0}, "b", alua.CauseFailover); return err },
			[]grp{{alua.Unavailable, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusImplicit}},
			[]grp{{alua.Unavailable, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusNone}}},
		{"restart a", func() error { return a.RestartNode("a") },
			[]grp{{alua.ActiveNonOptimized, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusImplicit}},
			[]grp{{alua.ActiveNonOptimized, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusNone}}},
		{"crash b, then restart it before any takeover", func() error {
			if _, err := a.CrashNode("b"); err != nil {
				return err
			}
			return a.RestartNode("b")
		},
			[]grp{{alua.ActiveNonOptimized, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusImplicit}},
			[]grp{{alua.ActiveNonOptimized, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusImplicit}}},
		{"planned move of LUN 1 to a", func() error { _, err := a.Move([]uint64{1}, "a", alua.CauseManual); return err },
			[]grp{{alua.ActiveNonOptimized, false, alua.StatusImplicit}, {alua.ActiveOptimized, true, alua.StatusImplicit}},
			[]grp{{alua.ActiveOptimized, true, alua.StatusImplicit}, {alua.ActiveNonOptimized, false, alua.StatusImplicit}}},
	}
	for _, st := range steps {
		require.NoError(t, st.do(), st.name)
		require.Equal(t, st.lun0, groups(0), "%s: LUN 0", st.name)
		require.Equal(t, st.lun1, groups(1), "%s: LUN 1", st.name)
	}
}

const statusHost = "iqn.2026-11.org.example:h1"

func statuses(a *Array, lun uint64) (st []byte, state []alua.AccessState, pref []bool) {
	for _, g := range a.LUN(lun).Groups(statusHost) {
		st = append(st, g.Status)
		state = append(state, g.State)
		pref = append(pref, g.Pref)
	}
	return
}

// An STPG move a->b whose source a crashes mid-move completes as a
// replay onto b; a's group is UNAVAILABLE because of the crash, and the
// switch does not change its state, so it keeps the crash's 02h (an
// adversarial review found it re-stamped 01h).
func TestSTPGMoveWhoseSourceCrashesKeepsItsStatus(t *testing.T) {
	done := false
	a := midMoveArray(t, true, func(a *Array, p MovePoint) {
		if done || p.Phase != PhaseHold {
			return
		}
		done = true
		_, err := a.CrashNode("a")
		require.NoError(t, err)
		st, state, _ := statuses(a, 0)
		t.Logf("after crash, mid-move: states %v status %v", state, st)
	})
	_, err := a.Move([]uint64{0}, "b", alua.CauseSTPG)
	require.NoError(t, err)
	require.True(t, done)
	st, state, pref := statuses(a, 0)
	t.Logf("after move: states %v status %v pref %v", state, st, pref)
	require.Equal(t, alua.Unavailable, state[0])
	require.Equal(t, alua.StatusImplicit, st[0], "a's group: UNAVAILABLE since the crash, not altered by the STPG")
}

// An STPG move a->b abandoned because b crashed: a's group went
// AO -> TRANSITIONING (01h, the host's request) -> AO, the last change
// implicit (2A/07 announced): 02h.
func TestAbandonedSTPGMoveSourceStatus(t *testing.T) {
	done := false
	a := midMoveArray(t, true, func(a *Array, p MovePoint) {
		if done || p.Phase != PhaseHold {
			return
		}
		done = true
		st, state, _ := statuses(a, 0)
		require.Equal(t, []alua.AccessState{alua.Transitioning, alua.Transitioning}, state)
		require.Equal(t, []byte{alua.StatusExplicit, alua.StatusExplicit}, st, "TRANSITIONING at the host's request")
		_, err := a.CrashNode("b")
		require.NoError(t, err)
	})
	_, err := a.Move([]uint64{0}, "b", alua.CauseSTPG)
	require.ErrorIs(t, err, ErrMoveAbandoned)
	st, state, pref := statuses(a, 0)
	t.Logf("after abandoned move: states %v status %v pref %v", state, st, pref)
	require.Equal(t, alua.ActiveOptimized, state[0])
	require.Equal(t, alua.StatusImplicit, st[0], "a's group changed TRANSITIONING -> AO implicitly")
}

// Explicit mode: the owner a crashed, a host's STPG makes b's group
// active/optimized (a takeover): b's group changed because of the STPG,
// so 01h; a's stays UNAVAILABLE with the crash's 02h.
func TestExplicitSTPGTakeoverStatus(t *testing.T) {
	cfg := Loopback(t.TempDir(), 1<<20)
	cfg.Interlink.Penalty = 0
	cfg.ALUA = "explicit"
	a, err := New(cfg, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	_, err = a.CrashNode("a")
	require.NoError(t, err)
	moved, err := a.SetGroups(0, []alua.GroupRequest{{Group: a.Node("b").GroupID, State: alua.ActiveOptimized}})
	require.NoError(t, err)
	require.True(t, moved)
	st, state, _ := statuses(a, 0)
	t.Logf("after STPG takeover: states %v status %v", state, st)
	require.Equal(t, alua.StatusExplicit, st[1], "b's group was made AO by SET TARGET PORT GROUPS")
	require.Equal(t, alua.StatusImplicit, st[0])
}
