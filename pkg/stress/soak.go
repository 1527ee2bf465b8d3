// Package stress owns aluad's endurance and abuse runs. Soak drives many
// sessions of verified I/O against an in-process array while faults are
// injected on a schedule (node crash and restart, port and path cuts,
// ownership moves), and reports data mismatches, errors, recovery and the
// growth of goroutines, file descriptors and heap. Abuse attacks the
// iSCSI target with random and malformed PDUs, CmdSN outside the window,
// oversized segments, huge writes, login floods and half-open
// connections from many connections at once, while well-behaved sessions
// measure their latency. Both are bounded in time and count, and both
// talk only to loopback.
package stress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/initiator"
)

// SoakConfig bounds a soak run.
type SoakConfig struct {
	Sessions   int           // default 256
	Hosts      int           // initiator names the sessions share (default 32)
	Duration   time.Duration // default 30m
	FaultEvery time.Duration // default 30s
	Dir        string        // data directory (a temporary one when empty)
	LUNSize    int64         // default 64 MiB
	Seed       uint64
	Logger     *slog.Logger
	// Progress, if set, is called about once a second.
	Progress func(SoakProgress)
}

// SoakProgress is a running tally.
type SoakProgress struct {
	Elapsed    time.Duration
	Ops        uint64
	Mismatches uint64
	Faults     int
	Sessions   int64
}

// Resources is one sample of the process's resources.
type Resources struct {
	Goroutines int    `json:"goroutines"`
	FDs        int    `json:"fds"`
	HeapInUse  uint64 `json:"heap_in_use"`
}

func sample() Resources {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds := -1
	if es, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(es)
	}
	return Resources{Goroutines: runtime.NumGoroutine(), FDs: fds, HeapInUse: ms.HeapInuse}
}

// FaultRecord is one injected fault and what the sessions saw.
type FaultRecord struct {
	At   time.Duration `json:"at"`
	What string        `json:"what"`
	Err  string        `json:"err,omitempty"`
}

// SoakResult is the outcome of a soak run.
type SoakResult struct {
	Sessions    int           `json:"sessions"`
	Duration    time.Duration `json:"duration"`
	Reads       uint64        `json:"reads"`
	Writes      uint64        `json:"writes"`
	Verified    uint64        `json:"verified"`
	Mismatches  uint64        `json:"mismatches"`
	MismatchLog []string      `json:"mismatch_log,omitempty"`
	// Retried counts commands retried after a unit attention or a
	// transitioning/not-ready sense; Reconnects the logins after a lost
	// connection; Uncertain the writes whose outcome was unknown (their
	// connection died), which a later read resolved.
	Retried    uint64        `json:"retried"`
	Reconnects uint64        `json:"reconnects"`
	Uncertain  uint64        `json:"uncertain"`
	Faults     []FaultRecord `json:"faults"`
	// Resources before the sessions, at the steady-state baseline (after
	// the first fault cycle), the peak, at the end of the load and after
	// the sessions closed.
	Before, Baseline, Peak, EndOfLoad, After Resources
	// LatencyP50/P99 of the verified commands (µs).
	LatencyP50 float64 `json:"latency_p50_us"`
	LatencyP99 float64 `json:"latency_p99_us"`
}

// Bounds are what a soak run may grow by; Check applies them.
type Bounds struct {
	Goroutines int    // after the sessions closed, over Before
	FDs        int    // after the sessions closed, over Before
	Heap       uint64 // at the end of the load, over Baseline
}

// DefaultBounds are the bounds docs/security.md states ("The soak run").
var DefaultBounds = Bounds{Goroutines: 32, FDs: 16, Heap: 128 << 20}

// Check says what, if anything, broke the run's promises.
func (r *SoakResult) Check(b Bounds) []string {
	var out []string
	if r.Mismatches > 0 {
		out = append(out, fmt.Sprintf("%d data mismatches", r.Mismatches))
	}
	if r.Verified == 0 {
		out = append(out, "no read was verified")
	}
	if g := r.After.Goroutines - r.Before.Goroutines; g > b.Goroutines {
		out = append(out, fmt.Sprintf("goroutines grew by %d (bound %d)", g, b.Goroutines))
	}
	if f := r.After.FDs - r.Before.FDs; f > b.FDs {
		out = append(out, fmt.Sprintf("file descriptors grew by %d (bound %d)", f, b.FDs))
	}
	if r.EndOfLoad.HeapInUse > r.Baseline.HeapInUse+b.Heap {
		out = append(out, fmt.Sprintf("heap grew by %d MiB during the load (bound %d MiB)",
			(r.EndOfLoad.HeapInUse-r.Baseline.HeapInUse)>>20, b.Heap>>20))
	}
	return out
}

// slots per session; each slot is 8 blocks (4 KiB at 512 B).
const (
	slotsPerSession = 64
	slotBlocks      = 8
	blockSize       = 512
)

// Soak runs the soak.
func Soak(ctx context.Context, c SoakConfig) (*SoakResult, error) {
	if c.Sessions <= 0 {
		c.Sessions = 256
	}
	if c.Hosts <= 0 {
		c.Hosts = 32
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Minute
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 30 * time.Second
	}
	if c.LUNSize <= 0 {
		c.LUNSize = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	dir, cleanup, err := dataDir(c.Dir, "aluad-soak-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg := config.Loopback(dir, c.LUNSize)
	cfg.Ownership.Tick = 250 * time.Millisecond
	for h := 0; h < c.Hosts; h++ {
		cfg.Hosts = append(cfg.Hosts, array.HostConfig{Name: fmt.Sprintf("soak%02d", h), Type: "linux-dmmp",
			Initiators: []string{hostIQN(h)}})
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	res := &SoakResult{Sessions: c.Sessions, Before: sample()}
	d, err := daemon.Start(cfg, daemon.Options{Logger: c.Logger, StatsInterval: time.Second})
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Stop(5 * time.Second)
		}
	}()
	blocksPerLUN := c.LUNSize / blockSize
	perLUN := (c.Sessions + len(cfg.LUNs) - 1) / len(cfg.LUNs)
	if int64(perLUN*slotsPerSession*slotBlocks) > blocksPerLUN {
		return nil, fmt.Errorf("LUNs of %d bytes cannot hold %d sessions' regions", c.LUNSize, c.Sessions)
	}
	run := &soakRun{d: d, res: res, lat: make([]float64, 0, 1<<16)}
	runCtx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < c.Sessions; i++ {
		w := &worker{run: run, id: i, host: i % c.Hosts, lun: uint64(i % len(cfg.LUNs)),
			base: uint64((i / len(cfg.LUNs)) * slotsPerSession * slotBlocks), home: i % len(d.Portals()),
			rng: rand.New(rand.NewPCG(c.Seed, uint64(i))), exp: make([]slotState, slotsPerSession)}
		wg.Add(1)
		go func() { defer wg.Done(); w.loop(runCtx) }()
	}
	start := time.Now()
	var sampMu sync.Mutex
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		run.faults(runCtx, c, start, &sampMu)
	}()
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-tk.C:
			s := sample()
			sampMu.Lock()
			if s.Goroutines > res.Peak.Goroutines {
				res.Peak.Goroutines = s.Goroutines
			}
			res.Peak.FDs = max(res.Peak.FDs, s.FDs)
			res.Peak.HeapInUse = max(res.Peak.HeapInUse, s.HeapInUse)
			sampMu.Unlock()
			if c.Progress != nil {
				c.Progress(SoakProgress{Elapsed: time.Since(start), Ops: run.reads.Load() + run.writes.Load(),
					Mismatches: run.mismatches.Load(), Faults: run.faultCount(), Sessions: run.live.Load()})
			}
		}
	}
	runtime.GC()
	res.EndOfLoad = sample()
	wg.Wait()
	<-faultDone
	res.Duration = time.Since(start)
	d.Inject(api.Fault{Kind: api.FaultClear})
	err = d.Stop(10 * time.Second)
	stopped = true
	res.After = settle(res.Before)
	run.finish(res)
	if res.Baseline.Goroutines == 0 {
		res.Baseline = res.EndOfLoad
	}
	return res, err
}

// dataDir is dir, or a temporary directory removed by cleanup.
func dataDir(dir, prefix string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return tmp, func() { os.RemoveAll(tmp) }, nil
}

// settle samples the resources once the run's goroutines have had a few
// seconds to end (at once when they are back within bounds).
func settle(before Resources) Resources {
	var s Resources
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
		runtime.GC()
		if s = sample(); s.Goroutines <= before.Goroutines+DefaultBounds.Goroutines {
			break
		}
	}
	return s
}

func hostIQN(h int) string { return fmt.Sprintf("iqn.2026-11.org.aluad:soak-host%02d", h) }

type soakRun struct {
	d                                            *daemon.Daemon
	res                                          *SoakResult
	reads, writes, verified, mismatches, retried atomic.Uint64
	reconnects, uncertain                        atomic.Uint64
	live                                         atomic.Int64
	mu                                           sync.Mutex
	lat                                          []float64
	mismatchLog                                  []string
	faultMu                                      sync.Mutex
	faultList                                    []FaultRecord
}

func (r *soakRun) faultCount() int {
	r.faultMu.Lock()
	defer r.faultMu.Unlock()
	return len(r.faultList)
}

func (r *soakRun) finish(res *SoakResult) {
	res.Reads, res.Writes, res.Verified = r.reads.Load(), r.writes.Load(), r.verified.Load()
	res.Mismatches, res.Retried, res.Reconnects, res.Uncertain = r.mismatches.Load(), r.retried.Load(), r.reconnects.Load(), r.uncertain.Load()
	r.mu.Lock()
	res.MismatchLog = r.mismatchLog
	sort.Float64s(r.lat)
	if n := len(r.lat); n > 0 {
		res.LatencyP50 = r.lat[n/2]
		res.LatencyP99 = r.lat[min(n-1, n*99/100)]
	}
	r.mu.Unlock()
	r.faultMu.Lock()
	res.Faults = r.faultList
	r.faultMu.Unlock()
}

func (r *soakRun) latency(d time.Duration) {
	r.mu.Lock()
	if len(r.lat) < cap(r.lat) {
		r.lat = append(r.lat, float64(d)/float64(time.Microsecond))
	} else {
		r.lat[rand.IntN(len(r.lat))] = float64(d) / float64(time.Microsecond) // reservoir-ish
	}
	r.mu.Unlock()
}

// faults injects one fault every FaultEvery, rotating through a node
// crash and restart, a port cut and repair, one host's path cut and
// repair, and a manual move. The first full cycle is the warm-up: the
// resource baseline is sampled after it.
func (r *soakRun) faults(ctx context.Context, c SoakConfig, start time.Time, sampMu *sync.Mutex) {
	d := r.d
	nodes := d.Array.Nodes
	ports := d.Portals()
	rng := rand.New(rand.NewPCG(c.Seed, 99))
	record := func(what string, err error) {
		fr := FaultRecord{At: time.Since(start).Round(time.Millisecond), What: what}
		if err != nil {
			fr.Err = err.Error()
		}
		r.faultMu.Lock()
		r.faultList = append(r.faultList, fr)
		r.faultMu.Unlock()
	}
	wait := func(dt time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(dt):
			return true
		}
	}
	hold := c.FaultEvery / 3
	for i := 0; ; i++ {
		if !wait(c.FaultEvery - hold) {
			return
		}
		// A fault and its repair a third of the interval later.
		cut := func(down, up api.Fault, what string) {
			_, err := d.Inject(down)
			record(down.Kind+" "+what, err)
			wait(hold)
			_, err = d.Inject(up)
			record(up.Kind+" "+what, err)
		}
		switch i % 4 {
		case 0:
			n := nodes[rng.IntN(len(nodes))].Name
			cut(api.Fault{Kind: api.FaultCrash, Node: n}, api.Fault{Kind: api.FaultRestart, Node: n}, "node "+n)
		case 1:
			p := ports[rng.IntN(len(ports))].Port
			cut(api.Fault{Kind: api.FaultPortDown, Port: p}, api.Fault{Kind: api.FaultPortUp, Port: p}, "port "+p)
		case 2:
			p := ports[rng.IntN(len(ports))].Port
			ini := hostIQN(rng.IntN(c.Hosts))
			cut(api.Fault{Kind: api.FaultPathDown, Port: p, Initiator: ini},
				api.Fault{Kind: api.FaultPathUp, Port: p, Initiator: ini}, ini+" -> "+p)
		case 3:
			l := d.Array.LUNs[rng.IntN(len(d.Array.LUNs))]
			to := nodes[(l.Owner().Index+1)%len(nodes)].Name
			_, err := d.Array.Move([]uint64{l.ID}, to, alua.CauseManual)
			record(fmt.Sprintf("move LUN %d to %s", l.ID, to), err)
			sampMu.Lock()
			if r.res.Baseline.Goroutines == 0 {
				runtime.GC()
				r.res.Baseline = sample()
			}
			sampMu.Unlock()
		}
	}
}

// slotState is what a slot must hold: gen, or (uncertain) either gen or
// alt, when the write of alt may or may not have landed.
type slotState struct {
	gen, alt  uint64
	uncertain bool
}

type worker struct {
	run  *soakRun
	id   int
	host int
	lun  uint64
	base uint64
	home int
	rng  *rand.Rand
	exp  []slotState
	sess *initiator.Session
	port int
}

func (w *worker) pattern(slot int, gen uint64) []byte {
	b := make([]byte, slotBlocks*blockSize)
	for i := 0; i+32 <= len(b); i += 32 {
		binary.BigEndian.PutUint64(b[i:], uint64(w.id))
		binary.BigEndian.PutUint64(b[i+8:], w.lun)
		binary.BigEndian.PutUint64(b[i+16:], uint64(slot))
		binary.BigEndian.PutUint64(b[i+24:], gen)
	}
	return b
}

// decode returns the generation a slot's data carries, or false when the
// data is not a whole pattern of this worker and slot (0: never written).
func (w *worker) decode(slot int, b []byte) (uint64, bool) {
	zero := true
	for _, x := range b {
		if x != 0 {
			zero = false
			break
		}
	}
	if zero {
		return 0, true
	}
	gen := binary.BigEndian.Uint64(b[24:])
	want := w.pattern(slot, gen)
	return gen, string(want) == string(b)
}

func (w *worker) connect(ctx context.Context) error {
	ports := w.run.d.Portals()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		p := ports[(w.home+attempt)%len(ports)]
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := initiator.Dial(dctx, initiator.Config{Addr: p.Addr, Target: p.Target, InitiatorName: hostIQN(w.host),
			ISID: [6]byte{0x80, byte(w.id >> 8), byte(w.id), 0, 0, byte(attempt)}})
		cancel()
		if err == nil {
			w.sess, w.port = s, (w.home+attempt)%len(ports)
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50+w.rng.IntN(200)) * time.Millisecond):
		}
	}
	return ctx.Err()
}

func (w *worker) loop(ctx context.Context) {
	defer func() {
		if w.sess != nil {
			w.sess.Close()
			w.run.live.Add(-1)
		}
	}()
	for ctx.Err() == nil {
		if w.sess == nil {
			if w.connect(ctx) != nil {
				return
			}
			w.run.live.Add(1)
			w.clearUAs(ctx)
		}
		slot := w.rng.IntN(slotsPerSession)
		var err error
		if w.rng.IntN(2) == 0 {
			err = w.write(ctx, slot)
		} else {
			err = w.read(ctx, slot)
		}
		if err != nil {
			w.sess.Close()
			w.sess = nil
			w.run.live.Add(-1)
			if ctx.Err() == nil {
				w.run.reconnects.Add(1)
			}
		}
		// A new home after a reconnect elsewhere: back home now and then.
		if w.sess != nil && w.port != w.home && w.rng.IntN(200) == 0 {
			w.sess.Close()
			w.sess = nil
			w.run.live.Add(-1)
		}
	}
}

func (w *worker) clearUAs(ctx context.Context) {
	for i := 0; i < 8; i++ {
		r, err := w.sess.Execute(ctx, w.lun, make([]byte, 6), nil, 0)
		if err != nil || r.Status == 0 {
			return
		}
	}
}

// errRetryable: the command got a unit attention, or the LUN is in
// transition or not ready: try again.
var errRetryable = errors.New("retryable")

// exec runs a command, retrying unit attentions and transient senses; a
// connection error or any other failure is returned.
func (w *worker) exec(ctx context.Context, cdb, out []byte, in int) (*initiator.Result, error) {
	for try := 0; ; try++ {
		t0 := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := w.sess.Execute(cctx, w.lun, cdb, out, in)
		cancel()
		if err != nil {
			return nil, err
		}
		if r.Status == 0 {
			w.run.latency(time.Since(t0))
			return r, nil
		}
		if try >= 50 || !retryable(r) {
			return r, fmt.Errorf("status 0x%02x sense %x", r.Status, r.Sense)
		}
		w.run.retried.Add(1)
		if r.Status != 2 || r.Sense[2]&0xf != 6 { // not a UA: back off
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func retryable(r *initiator.Result) bool {
	switch r.Status {
	case 0x08, 0x28: // BUSY, TASK SET FULL
		return true
	case 0x02:
	default:
		return false
	}
	if len(r.Sense) < 14 {
		return false
	}
	key := r.Sense[2] & 0xf
	return key == 6 || key == 2 || (key == 0xb) // UA, NOT READY (transitioning, unavailable), ABORTED COMMAND
}

func rw10(op byte, lba uint64, blocks int) []byte {
	cdb := make([]byte, 10)
	cdb[0] = op
	binary.BigEndian.PutUint32(cdb[2:], uint32(lba))
	binary.BigEndian.PutUint16(cdb[7:], uint16(blocks))
	return cdb
}

func (w *worker) write(ctx context.Context, slot int) error {
	e := &w.exp[slot]
	gen := max(e.gen, e.alt) + 1
	r, err := w.exec(ctx, rw10(0x2a, w.base+uint64(slot*slotBlocks), slotBlocks), w.pattern(slot, gen), 0)
	w.run.writes.Add(1)
	if err != nil || r == nil || r.Status != 0 {
		// Unknown outcome: the slot holds the old or the new data.
		if !e.uncertain {
			e.alt, e.uncertain = gen, true
		} else {
			e.alt = gen // the older uncertain write is superseded by ordering on one session
		}
		w.run.uncertain.Add(1)
		if err == nil {
			return nil
		}
		return err
	}
	*e = slotState{gen: gen}
	return nil
}

func (w *worker) read(ctx context.Context, slot int) error {
	r, err := w.exec(ctx, rw10(0x28, w.base+uint64(slot*slotBlocks), slotBlocks), nil, slotBlocks*blockSize)
	w.run.reads.Add(1)
	if err != nil {
		return err
	}
	if r.Status != 0 {
		return nil
	}
	e := &w.exp[slot]
	gen, whole := w.decode(slot, r.Data)
	ok := whole && (gen == e.gen || (e.uncertain && (gen == e.alt || gen > e.gen && gen <= e.alt)))
	if !ok {
		w.run.mismatches.Add(1)
		w.run.mu.Lock()
		if len(w.run.mismatchLog) < 20 {
			w.run.mismatchLog = append(w.run.mismatchLog, fmt.Sprintf("session %d LUN %d slot %d: read gen %d (whole pattern %v), expected %d (or %d: %v)",
				w.id, w.lun, slot, gen, whole, e.gen, e.alt, e.uncertain))
		}
		w.run.mu.Unlock()
		return nil
	}
	w.run.verified.Add(1)
	*e = slotState{gen: gen}
	return nil
}
