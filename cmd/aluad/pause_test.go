package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/lab"
)

var (
	pauseRuns  = flag.Int("pause.runs", 1, "TestPause: scenarios per etcd layout")
	pauseMedia = flag.String("pause.media", "hdd", "TestPause: LUN 0's media latency profile (ram, ssd, hdd): "+
		"how long a destage spends between its fence check and its media write")
	pauseAim = flag.String("pause.aim", "any", "TestPause: the command the pause aims at: fua, sync, write (a plain write), "+
		"or any (FUA write or SYNCHRONIZE CACHE, at random)")
	pauseFencing = flag.String("pause.fencing", "process", "TestPause: the cluster's fencing (none shows the loss it prevents)")
	pauseJitter  = flag.Duration("pause.jitter", 3*time.Millisecond,
		"TestPause: SIGSTOP a at most this long after the FUA write or SYNCHRONIZE CACHE it aims at was sent")
)

// LUN 0 of the pause test: pauseBlocks tagged 4 KiB blocks, LBA step 8 at
// 512-byte blocks.
const (
	pauseBlocks = 256
	pauseBS     = 512
	pauseStep   = 8
	// bTags are the tags of the rewrite through b: every tag below was
	// sent to a.
	bTags = 1 << 32
)

// A controller paused (SIGSTOP: a VM paused, a process stalled) past its
// lease while it destages must not write the media once it runs again
// (SIGCONT): its partner took the LUN over meanwhile, and the host
// rewrote every block through the partner and synchronized its cache.
// The fence is checked before each media write of a destage (pkg/cache
// writeRuns); a destage that passed the check and was then frozen writes
// when the process resumes, over the new owner's newer data, until a
// notices its lease is gone and exits. The host then reads the right data
// through b only while b's cache holds the page; the test also reads the
// LUN's backing file once b has stopped (SIGTERM flushes its cache).
// Every block must hold the last acknowledged write: the rewrite through
// b.
//
// b fences a before it takes LUN 0 over (fencing: process, the default
// on one machine): a has exited, killed, by the time b serves, so it
// never runs again. The layouts: three `aluad witness` processes with the
// controllers as etcd clients only; each controller with its own member
// plus one witness, where the pause freezes a's member too (b's client
// must stop sending calls to it); and the external layout with a's file
// system slow (the media-delay fault: every media write of a waits 300 ms
// after its fence check), where the pause always lands between a
// destage's check and its write.
//
// -pause.runs N repeats the scenario N times per layout. The pause aims
// at a FUA write or a SYNCHRONIZE CACHE, a random 0 to -pause.jitter
// after it was sent. -pause.media sets LUN 0's latency profile: with hdd
// (the default) a destage waits 4 ms between its fence check and its
// write, and most pauses land there; with ram the window is a few
// microseconds and a run rarely hits it.
func TestPause(t *testing.T) {
	bin := buildAluad(t)
	for _, tt := range []struct {
		name     string
		embedded bool          // each controller runs its own etcd member (plus one witness)
		slowFS   time.Duration // a's media-delay before the pause
	}{
		{"external-etcd", false, 0},
		{"embedded-members", true, 0},
		{"external-etcd-slow-fs", false, 300 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for run := 1; run <= *pauseRuns; run++ {
				t.Run(fmt.Sprintf("run%d", run), func(t *testing.T) {
					seed := uint64(time.Now().UnixNano())
					r := pauseRun(t, bin, pauseLayout{embedded: tt.embedded, slowFS: tt.slowFS}, *pauseMedia, seed)
					t.Logf("%s run %d (seed %d, media %s): %d blocks differ on media, %d through b; takeover %v; run %v",
						tt.name, run, seed, *pauseMedia, r.media, r.viaB, r.takeover.Round(time.Millisecond), r.took.Round(time.Second))
					require.Zero(t, r.viaB, "blocks read through b that are not the last acknowledged write")
					require.Zero(t, r.media, "blocks on media that are not the last acknowledged write")
				})
			}
		})
	}
}

// pauseLayout is where the controllers' etcd runs.
type pauseLayout struct {
	embedded bool
	slowFS   time.Duration
}

// pauseResult is what one run saw.
type pauseResult struct {
	takeover time.Duration // from SIGSTOP to b serving LUN 0
	viaB     int           // blocks read through b that differ
	media    int           // blocks in the backing file that differ, b stopped
	took     time.Duration
}

// pauseProc is a controller the run pauses, resumes and waits for.
type pauseProc struct {
	*proc
	exited chan struct{}
	sock   string // its control socket
}

func startPauseProc(t *testing.T, bin string, p *proc) *pauseProc {
	t.Helper()
	p.start(t, bin)
	pp := &pauseProc{proc: p, exited: make(chan struct{})}
	go func() { p.cmd.Wait(); close(pp.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGKILL) // stopped or not
		<-pp.exited
	})
	return pp
}

func (p *pauseProc) signal(s syscall.Signal) error { return syscall.Kill(p.cmd.Process.Pid, s) }

// isStopped reports whether every thread of the process is stopped.
func (p *pauseProc) isStopped() error {
	dir := fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, task := range tasks {
		st, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			return err
		}
		// pid (comm) state ...: comm may hold spaces, not ')'.
		if i := bytes.LastIndexByte(st, ')'); i < 0 || i+2 >= len(st) || st[i+2] != 'T' {
			return fmt.Errorf("thread %s runs", task.Name())
		}
	}
	return nil
}

// waitExit waits up to d for the process to end.
func (p *pauseProc) waitExit(d time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// startPauseCluster starts controllers a and b (LUN 0 preferred on a,
// LUN 1 on b) and their etcd members, and waits for both to serve. It
// returns a, b, LUN 0's backing file (pkg/array names it lun<id>.img under
// data) and every process started. A
// port loopbackPort picked may be taken before the process binds it (by
// anything else on the machine): a controller that exits with "address
// already in use" before it serves starts the cluster afresh, twice at
// most.
func startPauseCluster(t *testing.T, bin string, l pauseLayout, media string) (a, b *pauseProc, lun0 string, all []*proc) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		a, b, lun0, all = startPauseProcs(t, bin, l, media)
		err := lab.Retry(60*time.Second, func() error {
			for _, p := range []*pauseProc{a, b} {
				p.mu.Lock()
				serving := len(p.portal) > 0
				p.mu.Unlock()
				select {
				case <-p.exited:
					return nil
				default:
				}
				if !serving {
					return fmt.Errorf("%s does not serve yet", p.args[4])
				}
			}
			return nil
		})
		var dead *pauseProc
		for _, p := range []*pauseProc{a, b} {
			select {
			case <-p.exited:
				dead = p
			default:
			}
		}
		switch {
		case err == nil && dead == nil:
			return a, b, lun0, all
		case dead != nil && attempt < 3 && slices.ContainsFunc(all, func(p *proc) bool {
			return strings.Contains(p.log.String(), "address already in use")
		}):
			t.Logf("a process could not listen; the cluster starts afresh")
			for _, p := range all {
				p.cmd.Process.Signal(syscall.SIGKILL)
			}
			<-a.exited
			<-b.exited
		case dead != nil:
			require.FailNow(t, "a controller exited before it served", "%s: %s", dead.args[4], dead.log)
		default:
			require.FailNow(t, "the controllers never served", "%v\na: %s\nb: %s", err, a.log, b.log)
		}
	}
}

// startPauseProcs starts the processes of startPauseCluster (all of them
// in all, the witnesses first).
func startPauseProcs(t *testing.T, bin string, l pauseLayout, media string) (a, b *pauseProc, lun0 string, all []*proc) {
	t.Helper()
	var procs []*proc
	dir := t.TempDir()
	url := func() string { return fmt.Sprintf("http://127.0.0.1:%d", loopbackPort(t)) }
	type member struct{ name, client, peer string }
	ms := []member{{"w1", url(), url()}, {"w2", url(), url()}, {"w3", url(), url()}}
	if l.embedded {
		ms = []member{{"a", url(), url()}, {"b", url(), url()}, {"w", url(), url()}}
	}
	var peers, clients []string
	for _, m := range ms {
		peers, clients = append(peers, m.name+"="+m.peer), append(clients, m.client)
	}
	cluster := strings.Join(peers, ",")
	data := filepath.Join(dir, "data")
	il := [2]string{fmt.Sprintf("127.0.0.1:%d", loopbackPort(t)), fmt.Sprintf("127.0.0.1:%d", loopbackPort(t))}
	cfg := writeClusterConfig(t, filepath.Join(dir, "cluster.yaml"), "pause-test", data,
		fmt.Sprintf("  - {id: 0, size: 4MiB, preferred: a, media: %s}\n  - {id: 1, size: 4MiB, preferred: b}\n", media),
		clients, il, "  fencing: "+*pauseFencing+"\n")
	for _, m := range ms {
		if l.embedded && m.name != "w" {
			continue
		}
		w := &proc{args: []string{"witness", "--name", m.name, "--data", filepath.Join(dir, m.name), "--client-url", m.client,
			"--peer-url", m.peer, "--cluster", cluster}}
		w.start(t, bin)
		t.Cleanup(w.kill)
		procs = append(procs, w)
	}
	ctl := func(i int) *pauseProc {
		node := []string{"a", "b"}[i]
		args := []string{"controller", "--config", cfg, "--node", node, "--nop-interval", "0", "--join-timeout", "30s",
			"--control", filepath.Join(dir, node+".sock")}
		if l.embedded {
			m := ms[i]
			args = append(args, "--etcd-data", filepath.Join(dir, m.name), "--etcd-client-url", m.client,
				"--etcd-peer-url", m.peer, "--etcd-cluster", cluster)
		}
		pp := startPauseProc(t, bin, &proc{args: args})
		pp.sock = filepath.Join(dir, node+".sock")
		return pp
	}
	a, b = ctl(0), ctl(1)
	return a, b, filepath.Join(data, "lun0.img"), append(procs, a.proc, b.proc)
}

// pauseLogin logs the test's host in to p's portal.
func pauseLogin(t *testing.T, p *pauseProc) *initiator.Session {
	t.Helper()
	addr, target := p.portalOf(t)
	s, err := initiator.Dial(context.Background(), initiator.Config{Addr: addr, Target: target,
		InitiatorName: "iqn.2026-11.org.aluad.test:h1", DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// pauseCmd is a command the host sends a.
type pauseCmd struct {
	kind string // write, FUA write, SYNCHRONIZE CACHE
	blk  int
	tag  uint64
	sent time.Time
}

// at describes the command as in flight at t.
func (c pauseCmd) at(t time.Time) string {
	switch c.kind {
	case "":
		return "nothing"
	case "SYNCHRONIZE CACHE":
		return fmt.Sprintf("%s, sent %v before", c.kind, t.Sub(c.sent).Round(time.Microsecond))
	}
	return fmt.Sprintf("%s of block %d (tag %d), sent %v before", c.kind, c.blk, c.tag, t.Sub(c.sent).Round(time.Microsecond))
}

// pauseRun is one scenario: writes through a, SIGSTOP of a as it
// destages, b's takeover, the rewrite through b, SIGCONT of a, and the
// check of what the host reads and of what the media holds.
func pauseRun(t *testing.T, bin string, l pauseLayout, media string, seed uint64) pauseResult {
	began := time.Now()
	var res pauseResult
	rng := rand.New(rand.NewPCG(seed, 0x51605))
	a, b, lun0, _ := startPauseCluster(t, bin, l, media)
	ctx := context.Background()
	onA, onB := pauseLogin(t, a), pauseLogin(t, b)
	lba := func(blk int) uint64 { return uint64(blk * pauseStep) }
	// b may take LUN 0 over while a starts, and then fail it back: the
	// writes start once a's port group (1) is active/optimized.
	require.NoError(t, lab.Retry(30*time.Second, func() error {
		return within(ctx, 2*time.Second, func(ctx context.Context) error {
			onB.ClearUA(ctx, 0, 8)
			if _, err := onA.ClearUA(ctx, 0, 8); err != nil {
				return err
			}
			if g, err := lab.AOGroup(ctx, onA, 0); err != nil || g != 1 {
				return fmt.Errorf("LUN 0 active/optimized on group %d (%v)", g, err)
			}
			return onA.Write16(ctx, 0, 0, lab.Tagged(0), pauseBS, false)
		})
	}), "a never served LUN 0\na: %s\nb: %s", a.log, b.log)

	// The host writes through a from a goroutine, at queue depth 1: plain
	// writes (write-back, mirrored to b), FUA writes (destaged in the
	// command) and every 48 writes SYNCHRONIZE CACHE (the LUN's dirty
	// pages destaged). It notes each FUA write and SYNCHRONIZE CACHE as it
	// sends it, for the pause to aim at.
	var mu sync.Mutex
	acked := make([]uint64, pauseBlocks) // the last acknowledged tag of each block
	var cur pauseCmd                     // the command in flight
	lat := map[string][]time.Duration{}  // latencies by kind
	sent := make(chan pauseCmd, 1)
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	writerDone := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 0x9a05e))
		run := func(c pauseCmd, f func(ctx context.Context) error) error {
			mu.Lock()
			c.sent = time.Now()
			cur = c
			mu.Unlock()
			if c.kind != "write" || *pauseAim == "write" {
				select {
				case sent <- c:
				default:
				}
			}
			// A command that fails before the pause (a transition, a
			// unit attention) is sent again, for up to 5 s.
			err := within(wctx, 3*time.Second, f)
			for t0 := time.Now(); err != nil && wctx.Err() == nil && time.Since(t0) < 5*time.Second; {
				time.Sleep(20 * time.Millisecond)
				onA.ClearUA(wctx, 0, 8)
				err = within(wctx, 3*time.Second, f)
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				lat[c.kind] = append(lat[c.kind], time.Since(c.sent))
				cur = pauseCmd{}
				if c.kind != "SYNCHRONIZE CACHE" {
					acked[c.blk] = c.tag
				}
			}
			return err
		}
		tag := uint64(0)
		for i := 0; wctx.Err() == nil; i++ {
			tag++
			c := pauseCmd{kind: "write", blk: i % pauseBlocks, tag: tag}
			if rng.IntN(4) == 0 {
				c.kind = "FUA write"
			}
			if err := run(c, func(ctx context.Context) error {
				return onA.Write16(ctx, 0, lba(c.blk), lab.Tagged(c.tag), pauseBS, c.kind == "FUA write")
			}); err != nil {
				writerDone <- err
				return
			}
			if i%48 == 47 {
				if err := run(pauseCmd{kind: "SYNCHRONIZE CACHE"}, func(ctx context.Context) error {
					return onA.SyncCache(ctx, 0)
				}); err != nil {
					writerDone <- err
					return
				}
			}
		}
		writerDone <- nil
	}()

	if l.slowFS > 0 {
		_, err := api.NewClient(a.sock).Inject(api.Fault{Kind: api.FaultMediaDelay, Delay: l.slowFS})
		require.NoError(t, err, "media-delay on a")
	}
	// After a second of writes, the pause aims at the next FUA write or
	// SYNCHRONIZE CACHE (one or the other, at random): SIGSTOP a a random
	// 0 to -pause.jitter after it was sent, timed on the clock (a timer
	// fires no sooner than about 1 ms).
	time.Sleep(time.Second)
	aim := []string{"FUA write", "SYNCHRONIZE CACHE"}[rng.IntN(2)]
	switch *pauseAim {
	case "fua":
		aim = "FUA write"
	case "sync":
		aim = "SYNCHRONIZE CACHE"
	case "write":
		aim = "write"
	}
	if l.slowFS > 0 {
		aim = "FUA write" // one every few writes; a slow SYNCHRONIZE CACHE only every 48
	}
	var target pauseCmd
	aiming := time.Now()
	for deadline := time.After(5 * time.Second); target.kind != aim || target.sent.Before(aiming); {
		select {
		case target = <-sent: // the first may be older, sent to a full channel
		case err := <-writerDone:
			require.FailNow(t, "the writer stopped before the pause", "%v\na: %s", err, a.log)
		case <-deadline:
			require.FailNow(t, "no "+aim+" in 5 s")
		}
	}
	jitter := time.Duration(rng.Int64N(int64(*pauseJitter) + 1))
	for time.Since(target.sent) < jitter {
	}
	require.NoError(t, a.signal(syscall.SIGSTOP))
	stopped := time.Now()
	mu.Lock()
	inflight, nAcked := cur, len(lat["write"])+len(lat["FUA write"])
	mu.Unlock()
	// kill(2) returns before every thread has stopped: on a loaded
	// machine a runs on for a while (up to 0.2 s seen), and may even
	// complete the command in flight.
	require.NoError(t, lab.Retry(5*time.Second, a.isStopped), "a never stopped")
	aStopped := time.Since(stopped)
	stopWriter()
	select {
	case <-writerDone: // the command then in flight is not acknowledged
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the writer did not stop")
	}
	onA.Close() // the host gives the path up (the command's PDU may be in a's socket)
	mu.Lock()
	ackedA := slices.Clone(acked) // what a acknowledged last, per block
	late := len(lat["write"]) + len(lat["FUA write"]) - nAcked
	if cur.kind == "" || cur.sent.After(stopped) {
		inflight = cur // what a was still doing once it had stopped
	}
	t.Logf("latency through a (median, count): %s", medians(lat))
	mu.Unlock()
	t.Logf("SIGSTOP a %v after a %s was sent (aimed at %v); every thread stopped %v later, %d writes acknowledged meanwhile; "+
		"in flight: %s", stopped.Sub(target.sent).Round(time.Microsecond), target.kind, jitter.Round(time.Microsecond),
		aStopped.Round(time.Microsecond), late, inflight.at(stopped))

	// b takes LUN 0 over once a's lease (2 s) has run out: its port
	// group (2) is active/optimized. Until then a read through b is
	// forwarded to the paused a and times out.
	require.NoError(t, lab.Retry(20*time.Second, func() error {
		return within(ctx, time.Second, func(ctx context.Context) error {
			if _, err := onB.ClearUA(ctx, 0, 8); err != nil {
				return err
			}
			if g, err := lab.AOGroup(ctx, onB, 0); err != nil || g != 2 {
				return fmt.Errorf("LUN 0 active/optimized on group %d (%v)", g, err)
			}
			_, err := onB.Read16(ctx, 0, 0, 8, pauseBS)
			return err
		})
	}), "b never served LUN 0 (a paused)\nb: %s", b.log)
	res.takeover = time.Since(stopped)
	t.Logf("b serves LUN 0 %v after the SIGSTOP", res.takeover.Round(time.Millisecond))
	// b fenced a first: a was killed (SIGKILL through a pidfd) and has
	// exited, so it never runs again (the test reaps it a moment later).
	if *pauseFencing == "process" {
		require.True(t, a.waitExit(5*time.Second), "b serves LUN 0 while a, paused, still exists\nb: %s", b.log)
		ws, ok := a.cmd.ProcessState.Sys().(syscall.WaitStatus)
		require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "a ended by SIGKILL: %v", a.cmd.ProcessState)
		require.Contains(t, b.log.String(), "fenced the node's last process")
	}

	// The host rewrites every block through b, each write acknowledged,
	// and synchronizes b's cache: the media holds the rewrite.
	want := make([]uint64, pauseBlocks)
	for blk := range want {
		tag := uint64(bTags + blk)
		require.NoError(t, lab.Retry(10*time.Second, func() error {
			return within(ctx, 2*time.Second, func(ctx context.Context) error {
				return onB.Write16(ctx, 0, lba(blk), lab.Tagged(tag), pauseBS, false)
			})
		}), "write through b, block %d\nb: %s", blk, b.log)
		want[blk] = tag
	}
	require.NoError(t, within(ctx, 10*time.Second, func(ctx context.Context) error { return onB.SyncCache(ctx, 0) }),
		"b: %s", b.log)
	diff := func() pauseDiff { return mediaDiff(t, lun0, want, ackedA, inflight) }
	synced := diff()
	require.Zero(t, synced.n, "the media after b's SYNCHRONIZE CACHE, a still paused: %s", synced)

	// What SIGCONT would have let a do, it cannot: it is gone. (Unfenced,
	// it resumes with the write it checked before the pause.)
	if a.signal(syscall.SIGCONT) == nil {
		t.Logf("SIGCONT a: exited %v", a.waitExit(5*time.Second))
	}
	resumed := diff()

	// What the host reads through b.
	for blk := range want {
		var got []byte
		require.NoError(t, lab.Retry(10*time.Second, func() error {
			return within(ctx, 2*time.Second, func(ctx context.Context) (err error) {
				got, err = onB.Read16(ctx, 0, lba(blk), pauseStep, pauseBS)
				return err
			})
		}), "read through b, block %d\nb: %s", blk, b.log)
		if !bytes.Equal(got, lab.Tagged(want[blk])) {
			res.viaB++
			t.Logf("block %d through b: tag %d, want %d", blk, binary.LittleEndian.Uint64(got), want[blk])
		}
	}

	// What the media holds once b has stopped (SIGTERM flushes its cache).
	termed := time.Now()
	require.NoError(t, b.signal(syscall.SIGTERM))
	t.Logf("SIGTERM b: exited %v, %v later", b.waitExit(20*time.Second), time.Since(termed).Round(time.Millisecond))
	final := diff()
	res.media = final.n
	t.Logf("media: %s after b's SYNCHRONIZE CACHE; %s after SIGCONT of a; %s after b stopped", synced, resumed, final)
	if final.n > 0 || resumed.n > 0 || res.viaB > 0 {
		t.Logf("a from the SIGSTOP on:\n%s", logSince(a.log.String(), stopped))
		t.Logf("b from the SIGSTOP on:\n%s", logSince(b.log.String(), stopped))
	}
	res.took = time.Since(began)
	return res
}

// within runs one command with a timeout: a command to the paused a (or
// forwarded to it) must not hang the test.
func within(parent context.Context, d time.Duration, f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, d)
	defer cancel()
	return f(ctx)
}

// medians is each kind's median latency, and count.
func medians(lat map[string][]time.Duration) string {
	var out []string
	for _, k := range []string{"write", "FUA write", "SYNCHRONIZE CACHE"} {
		l := slices.Clone(lat[k])
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		out = append(out, fmt.Sprintf("%s %v (%d)", k, l[len(l)/2].Round(time.Microsecond), len(l)))
	}
	return strings.Join(out, ", ")
}

// pauseDiff is the blocks of the backing file that do not hold their last
// acknowledged write, by what they hold instead.
type pauseDiff struct {
	n        int
	blocks   []int
	inflight int // the write in flight to a at the pause (never acknowledged)
	ackedA   int // the last write a acknowledged
	olderA   int // an older write sent to a
	other    int // no tag, or another
}

func (d pauseDiff) String() string {
	if d.n == 0 {
		return "0 blocks differ"
	}
	return fmt.Sprintf("%d blocks differ (%d hold the write in flight to a at the pause, %d a's last acknowledged write, "+
		"%d an older write to a, %d something else) at %v", d.n, d.inflight, d.ackedA, d.olderA, d.other, d.blocks)
}

// mediaDiff reads LUN 0's backing file and compares every block with its
// last acknowledged tag (want).
func mediaDiff(t *testing.T, path string, want, ackedA []uint64, inflight pauseCmd) pauseDiff {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var d pauseDiff
	const size = pauseStep * pauseBS
	for blk, tag := range want {
		got := raw[blk*size : (blk+1)*size]
		if bytes.Equal(got, lab.Tagged(tag)) {
			continue
		}
		d.n++
		d.blocks = append(d.blocks, blk)
		switch g := binary.LittleEndian.Uint64(got); {
		case !bytes.Equal(got, lab.Tagged(g)) || g >= bTags:
			d.other++
		case strings.HasSuffix(inflight.kind, "write") && inflight.blk == blk && inflight.tag == g:
			d.inflight++
		case g == ackedA[blk]:
			d.ackedA++
		default:
			d.olderA++
		}
	}
	return d
}

var logTime = regexp.MustCompile(`^time=(\S+)`)

// logSince is the lines of a slog text log from a second before t on.
func logSince(log string, t time.Time) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		m := logTime.FindStringSubmatch(l)
		if m == nil || strings.Contains(l, "msg=report") {
			continue
		}
		if ts, err := time.Parse(time.RFC3339Nano, m[1]); err == nil && !ts.Before(t.Add(-time.Second)) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
