package qualify

import (
	"bytes"
	"context"
	"encoding/binary"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/lab"
)

// hostStall is the longest gap between a host's own completions of I/O to
// lun (the emulated host's clock) inside [from, to): what the host saw.
func hostStall(samples []lab.Sample, host int, lun uint64, from, to time.Time) time.Duration {
	var done []time.Time
	for _, s := range samples {
		if s.Host == host && s.LUN == lun && !s.Err {
			done = append(done, s.Start.Add(s.Latency))
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i].Before(done[j]) })
	var best time.Duration
	prev := time.Time{}
	for _, t := range done {
		if !prev.IsZero() && t.After(from) && prev.Before(to) {
			lo, hi := prev, t
			if lo.Before(from) {
				lo = from
			}
			if hi.After(to) {
				hi = to
			}
			best = max(best, hi.Sub(lo))
		}
		prev = t
	}
	if !prev.IsZero() && prev.Before(to) {
		lo := prev
		if lo.Before(from) {
			lo = from
		}
		best = max(best, to.Sub(lo))
	}
	return best
}

// roughly: a and b agree within half the larger or a second. The
// emulated host's completion is the array's plus the trip back, which a
// loaded machine (the race detector in CI) can stretch by hundreds of
// milliseconds for one command; a stall put in the wrong step or counted
// in the wrong unit is off by far more.
func roughly(a, b float64) bool {
	tol := max(0.5*max(a, b), 1000)
	return a-b <= tol && b-a <= tol
}

// TestQuickScheduleOnEmulatedHosts runs the quick schedule in process
// against one emulated host of each multipath stack, and checks the
// verdicts each stack's behaviour calls for, that the array-side stall of
// every host, LUN and step is the host's own (roughly: the real-guest
// check in the QEMU lab holds qualify to 20% or 100 ms), and that the
// JUnit output validates.
func TestQuickScheduleOnEmulatedHosts(t *testing.T) {
	ctx := context.Background()
	stacks := lab.QualifyStacks()
	q, err := lab.StartQualifyLab(ctx, stacks, 2, 100, t.TempDir())
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			q.Close()
		}
	}()
	s, err := LoadBuiltin("quick")
	require.NoError(t, err)
	s.Settle, s.Follow = 2*time.Second, 15*time.Second
	s.Events[2].Args["down"] = "5s"
	var prog bytes.Buffer
	rep, err := Run(ctx, Options{Source: q.Client, Schedule: s, Wait: time.Minute, Progress: &prog})
	require.NoError(t, err)
	samples := q.Close()
	closed = true
	t.Logf("progress:\n%s", prog.String())
	var tab bytes.Buffer
	WriteTable(&tab, rep)
	t.Logf("\n%s", tab.String())

	// The steps: discovery, two LUNs each way, a0 down and up, a's power
	// loss and restart.
	var names []string
	for _, st := range rep.Steps {
		names = append(names, st.Name)
	}
	assert.Equal(t, []string{"paths at the start", "move LUN 0 to b", "move LUN 0 to a", "move LUN 1 to a", "move LUN 1 to b",
		"port a0 down", "port a0 up", "node a power-loss (failover)", "node a restart (failback)"}, names)
	require.Len(t, rep.Hosts, len(stacks))
	idx := map[string]int{}
	for i, h := range stacks {
		idx[h.Name] = i
	}
	checks := map[string]map[string]bool{} // host -> failed checks
	for _, res := range rep.Results {
		st := rep.Steps[res.Step]
		assert.Equal(t, stacks[idx[res.Host]].Type, res.Type)
		if checks[res.Host] == nil {
			checks[res.Host] = map[string]bool{}
		}
		for _, f := range res.fails {
			checks[res.Host][f.check] = true
		}
		if st.Class == ClassDiscovery {
			assert.Equal(t, "pass", res.Verdict, "%s reaches both nodes", res.Host)
			continue
		}
		require.Len(t, res.LUNs, 2, "%s uses both LUNs", res.Host)
		for _, lr := range res.LUNs {
			host := hostStall(samples, idx[res.Host], lr.LUN, st.Start, st.End)
			assert.True(t, roughly(lr.StallMs, ms(host)), "%s LUN %d step %d %s: array-side stall %.1f ms, the host's own %.1f ms",
				res.Host, lr.LUN, st.Index, st.Name, lr.StallMs, ms(host))
		}
		if st.Class == ClassFailure {
			assert.Greater(t, res.StallMs, 1000.0, "%s: a silent controller stalls I/O until the host's NOP-Out times out", res.Host)
			assert.Positive(t, res.Drops, "%s: the sessions to the dead controller dropped", res.Host)
		}
	}
	for _, h := range []string{"dmmp", "windows", "vmware"} {
		assert.Empty(t, checks[h], "%s follows every move within the limits", h)
	}
	assert.True(t, checks["naive"]["follow"], "a host that ignores ALUA never follows: %v", checks["naive"])
	assert.True(t, checks["naive"]["rtpg"] || checks["naive"]["follow"], "naive reads no RTPG")
	assert.True(t, checks["followover"]["follow"] || checks["followover"]["follow time"],
		"dm-multipath with failback followover declared linux fails the planned moves: %v", checks["followover"])
	for _, f := range rep.Findings {
		assert.NotEmpty(t, f.Advice, "%+v", f)
	}
	for _, c := range rep.Array {
		assert.True(t, c.OK, "%s: %s", c.Name, c.Detail)
	}
	assert.False(t, rep.Pass)
	var junit bytes.Buffer
	require.NoError(t, WriteJUnit(&junit, rep))
	failed := 0
	for _, h := range rep.Hosts {
		failed += h.Failed
	}
	checkJUnit(t, junit.Bytes(), len(stacks)+1, failed, 0, 0)
}

// TestRollingUpgradeKeepsWrites runs the rolling upgrade under verified
// writes: each controller drained, restarted and failed back, no
// acknowledged write lost, every LUN back on its preferred owner, and
// hosts that follow pass every step.
func TestRollingUpgradeKeepsWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const size = 64 << 20
	env, err := lab.Start(ctx, lab.EnvConfig{LUNs: 2, LUNSize: size, Mirror: true,
		Stacks: []lab.HostSpec{{Name: "dmmp", Stack: alua.HostLinuxDMMP, Type: alua.HostLinuxDMMP}, {Name: "windows", Stack: alua.HostWindows, Type: alua.HostWindows}},
		Tick:   100 * time.Millisecond, FailbackWindow: 2 * time.Second, Cooldown: 5 * time.Second, PlanInterval: time.Second,
		ShipWindow: 30 * time.Second, NodeCapacity: 1e9, Dir: dir, Control: filepath.Join(dir, "aluad.sock")})
	require.NoError(t, err)
	defer env.Close()
	var streams []lab.Stream
	for h := range env.Hosts {
		for _, l := range env.LUNs {
			streams = append(streams, lab.Stream{Host: h, LUN: l, BS: 4096, ReadPct: 100, QD: 2, Rate: 100})
		}
	}
	load := lab.StartStreams(env, streams, size, 7)
	// The verified writer: host windows writes tagged blocks in turn to
	// each LUN; a block's tag is acknowledged when its WRITE returns GOOD.
	wctx, stop := context.WithCancel(ctx)
	type ack struct {
		lun, lba, tag uint64
	}
	var acked []ack
	var unsure = map[[2]uint64][]uint64{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h := env.Hosts[1]
		buf := make([]byte, 4096)
		for tag := uint64(1); wctx.Err() == nil; tag++ {
			lun := env.LUNs[tag%uint64(len(env.LUNs))]
			lba := (tag % 2048) * 8
			for i := 0; i < len(buf); i += 8 {
				binary.LittleEndian.PutUint64(buf[i:], tag)
			}
			if err := h.Write(wctx, lun, lba, buf, false); err == nil {
				acked = append(acked, ack{lun, lba, tag})
			} else {
				unsure[[2]uint64{lun, lba}] = append(unsure[[2]uint64{lun, lba}], tag)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	s, err := ParseSchedule(strings.NewReader("name upgrade\nsettle 2s\nfollow 15s\nupgrade down=3s\n"))
	require.NoError(t, err)
	// The verdicts keep every check but the clock's: timings are measured
	// in lab runs, not asserted here (on a loaded machine the emulated
	// checker's 5 s interval outgrows the default 5 s follow limit).
	lim := DefaultLimits()
	for typ, l := range lim {
		l.PlannedFollow, l.PlannedStall, l.FailoverStall, l.PortStall = s.Follow, s.Follow, s.Follow, s.Follow
		lim[typ] = l
	}
	rep, err := Run(ctx, Options{Source: apiClient(dir), Schedule: s, Wait: time.Minute, Limits: lim})
	stop()
	wg.Wait()
	load.Stop()
	require.NoError(t, err)
	var tab bytes.Buffer
	WriteTable(&tab, rep)
	t.Logf("\n%s", tab.String())

	require.Len(t, rep.Steps, 7)
	for _, c := range rep.Array {
		assert.True(t, c.OK, "%s: %s", c.Name, c.Detail)
	}
	require.NotEmpty(t, rep.Array)
	assert.Contains(t, rep.Array[0].Name, "every LUN is on its preferred owner")
	for _, res := range rep.Results {
		assert.Equal(t, "pass", res.Verdict, "%s step %d %s: %v", res.Host, res.Step, rep.Steps[res.Step].Name, res.Failures)
	}
	// Every acknowledged write reads back (the last tag written to each
	// block, or a later one that was sent but not acknowledged).
	last := map[[2]uint64]uint64{}
	for _, a := range acked {
		last[[2]uint64{a.lun, a.lba}] = a.tag
	}
	require.Greater(t, len(acked), 1000, "the writer ran through the upgrade")
	lost := 0
	for k, tag := range last {
		got, err := env.Hosts[0].Read(ctx, k[0], k[1], 8)
		require.NoError(t, err)
		v := binary.LittleEndian.Uint64(got)
		ok := v == tag
		for _, u := range unsure[k] {
			ok = ok || (v == u && u > tag)
		}
		if !ok {
			lost++
		}
	}
	assert.Zero(t, lost, "acknowledged writes lost of %d blocks (%d writes)", len(last), len(acked))
}

func apiClient(dir string) *api.Client { return api.NewClient(filepath.Join(dir, "aluad.sock")) }
