package stress

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/iscsi"
)

// AbuseConfig bounds an abuse run.
type AbuseConfig struct {
	// Attackers is how many connections attack at once (default 48).
	Attackers int
	// Good is how many well-behaved sessions run verified I/O (default 8).
	Good     int
	Duration time.Duration // the attack (default 60s); a calm phase of a quarter of it comes first
	Dir      string
	Seed     uint64
	Logger   *slog.Logger
}

// LatencySummary is a set of command latencies (µs).
type LatencySummary struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_us"`
	P99 float64 `json:"p99_us"`
	Max float64 `json:"max_us"`
}

func summarise(xs []float64) LatencySummary {
	if len(xs) == 0 {
		return LatencySummary{}
	}
	sort.Float64s(xs)
	n := len(xs)
	return LatencySummary{N: n, P50: xs[n/2], P99: xs[min(n-1, n*99/100)], Max: xs[n-1]}
}

// AbuseResult is the outcome of an abuse run.
type AbuseResult struct {
	Calm, Attack LatencySummary
	// GoodErrors counts the well-behaved sessions' failed commands and
	// lost connections during the attack; Mismatches their bad reads.
	GoodErrors   int64    `json:"good_errors"`
	GoodErrorLog []string `json:"good_error_log,omitempty"`
	Mismatches   int64    `json:"mismatches"`
	// Attacks counts each attack by kind.
	Attacks map[string]int64 `json:"attacks"`
	// Limits is what the target's limits turned away.
	Limits iscsi.LimitStats `json:"limits"`
	// AliveAfter: a new session logged in and did I/O after the attack.
	AliveAfter            bool `json:"alive_after"`
	Before, Peak, After   Resources
	SessionsDuringAttack  int `json:"peak_sessions"`
	ConnectionsDuringPeak int `json:"peak_connections"`
}

// Check says what broke the promises: good sessions failing or seeing
// bad data, the target not serving afterwards, or leaked goroutines.
func (r *AbuseResult) Check() []string {
	var out []string
	if r.GoodErrors > 0 {
		out = append(out, fmt.Sprintf("well-behaved sessions saw %d errors", r.GoodErrors))
	}
	if r.Mismatches > 0 {
		out = append(out, fmt.Sprintf("%d data mismatches", r.Mismatches))
	}
	if !r.AliveAfter {
		out = append(out, "the target did not serve a new session after the attack")
	}
	if r.Attack.N == 0 {
		out = append(out, "no good I/O completed during the attack")
	}
	if g := r.After.Goroutines - r.Before.Goroutines; g > DefaultBounds.Goroutines {
		out = append(out, fmt.Sprintf("goroutines grew by %d", g))
	}
	return out
}

// Abuse runs an in-process array and attacks it.
func Abuse(ctx context.Context, c AbuseConfig) (*AbuseResult, error) {
	if c.Attackers <= 0 {
		c.Attackers = 48
	}
	if c.Good <= 0 {
		c.Good = 8
	}
	if c.Duration <= 0 {
		c.Duration = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	dir, cleanup, err := dataDir(c.Dir, "aluad-abuse-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg := config.Loopback(dir, 16<<20)
	// Small data budgets, so that the huge writes reach them quickly.
	cfg.Limits = iscsi.LimitsConfig{MaxSessionData: 16 << 20, MaxTotalData: 128 << 20, LoginTimeout: 3 * time.Second}
	res := &AbuseResult{Before: sample(), Attacks: map[string]int64{}}
	d, err := daemon.Start(cfg, daemon.Options{Logger: c.Logger, StatsInterval: time.Second, NopInterval: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	defer d.Stop(5 * time.Second)
	ports := d.Portals()

	// The well-behaved sessions: verified I/O, one command at a time.
	run := &soakRun{d: d, res: &SoakResult{}, lat: make([]float64, 0, 1<<16)}
	goodCtx, stopGood := context.WithCancel(ctx)
	var goodWG sync.WaitGroup
	var phase atomic.Int32 // 0 calm, 1 attack
	var latMu sync.Mutex
	lat := [2][]float64{}
	var goodErr atomic.Int64
	for i := 0; i < c.Good; i++ {
		w := &worker{run: run, id: i, host: i, lun: uint64(i % len(cfg.LUNs)), base: uint64((i / len(cfg.LUNs)) * slotsPerSession * slotBlocks),
			home: i % len(ports), rng: rand.New(rand.NewPCG(c.Seed, uint64(i))), exp: make([]slotState, slotsPerSession)}
		goodWG.Add(1)
		go func() {
			defer goodWG.Done()
			if w.connect(goodCtx) != nil {
				return
			}
			defer w.sess.Close()
			w.clearUAs(goodCtx)
			for goodCtx.Err() == nil {
				slot := w.rng.IntN(slotsPerSession)
				t0 := time.Now()
				var err error
				if w.rng.IntN(2) == 0 {
					err = w.write(goodCtx, slot)
				} else {
					err = w.read(goodCtx, slot)
				}
				if goodCtx.Err() != nil {
					return
				}
				if err != nil {
					goodErr.Add(1)
					latMu.Lock()
					if len(res.GoodErrorLog) < 10 {
						res.GoodErrorLog = append(res.GoodErrorLog, fmt.Sprintf("session %d: %v", w.id, err))
					}
					latMu.Unlock()
					w.sess.Close()
					if w.connect(goodCtx) != nil {
						return
					}
					continue
				}
				latMu.Lock()
				p := phase.Load()
				lat[p] = append(lat[p], float64(time.Since(t0))/float64(time.Microsecond))
				latMu.Unlock()
			}
		}()
	}
	calm := c.Duration / 4
	select {
	case <-time.After(calm):
	case <-ctx.Done():
	}
	phase.Store(1)
	attackCtx, stopAttack := context.WithTimeout(ctx, c.Duration)
	var mu sync.Mutex
	count := func(kind string) {
		mu.Lock()
		res.Attacks[kind]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for i := 0; i < c.Attackers; i++ {
		a := &attacker{ports: ports, rng: rand.New(rand.NewPCG(c.Seed+1, uint64(i))), id: i, count: count}
		wg.Add(1)
		go func() { defer wg.Done(); a.loop(attackCtx) }()
	}
	tk := time.NewTicker(500 * time.Millisecond)
	for attackCtx.Err() == nil {
		select {
		case <-attackCtx.Done():
		case <-tk.C:
			s := sample()
			res.Peak.Goroutines = max(res.Peak.Goroutines, s.Goroutines)
			res.Peak.FDs = max(res.Peak.FDs, s.FDs)
			res.Peak.HeapInUse = max(res.Peak.HeapInUse, s.HeapInUse)
			res.SessionsDuringAttack = max(res.SessionsDuringAttack, d.Target.SessionCount())
			res.ConnectionsDuringPeak = max(res.ConnectionsDuringPeak, d.Target.ConnCount())
		}
	}
	tk.Stop()
	stopAttack()
	wg.Wait()
	stopGood()
	goodWG.Wait()
	res.GoodErrors = goodErr.Load()
	res.Mismatches = int64(run.mismatches.Load())
	latMu.Lock()
	res.Calm, res.Attack = summarise(lat[0]), summarise(lat[1])
	latMu.Unlock()

	// Alive: a fresh session logs in and reads.
	w := &worker{run: run, id: 999, host: 99, lun: 0, home: 0, rng: rand.New(rand.NewPCG(1, 1)), exp: make([]slotState, slotsPerSession)}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if w.connect(actx) == nil {
		w.clearUAs(actx)
		r, err := w.sess.Execute(actx, 0, rw10(0x28, 0, 1), nil, 512)
		res.AliveAfter = err == nil && r.Status == 0
		w.sess.Close()
	}
	cancel()
	res.Limits = d.Target.LimitStats()
	if err := d.Stop(5 * time.Second); err != nil {
		return res, err
	}
	res.After = settle(res.Before)
	return res, nil
}

// attacker misbehaves in one of several ways, over and over.
type attacker struct {
	ports []api.PortalInfo
	rng   *rand.Rand
	id    int
	count func(string)
	// halfOpen holds connections that never finish a PDU.
	halfOpen []net.Conn
}

var attackKinds = []string{"garbage", "bad-login", "random-pdus", "cmdsn-out-of-window", "oversized-segment",
	"huge-write", "immediate-flood", "login-flood", "half-open", "bad-digest-header"}

func (a *attacker) loop(ctx context.Context) {
	defer func() {
		for _, c := range a.halfOpen {
			c.Close()
		}
	}()
	for ctx.Err() == nil {
		kind := attackKinds[a.rng.IntN(len(attackKinds))]
		a.count(kind)
		a.one(ctx, kind)
	}
}

func (a *attacker) dial(ctx context.Context) (net.Conn, *api.PortalInfo, error) {
	p := &a.ports[a.rng.IntN(len(a.ports))]
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", p.Addr)
	if err == nil {
		c.SetDeadline(time.Now().Add(3 * time.Second))
	}
	return c, p, err
}

func (a *attacker) initiatorName() string {
	return "iqn.2026-11.org.aluad:attacker" + strconv.Itoa(a.id)
}

// login does a one-PDU login (straight to the operational stage) and
// returns the reader, or nil.
func (a *attacker) login(c net.Conn, p *api.PortalInfo, isid byte) *bufio.Reader {
	var h iscsi.BHS
	h.SetOpcode(iscsi.OpLoginReq)
	h[0] |= iscsi.FlagImmediate
	h.SetFlags(iscsi.FlagTransit | 1<<2 | 3)
	h.SetISID([6]byte{0x80, 0xaa, byte(a.id), 0, 0, isid})
	h.SetCmdSN(1)
	kv := []iscsi.KV{{Key: "InitiatorName", Value: a.initiatorName()}, {Key: "TargetName", Value: p.Target},
		{Key: "SessionType", Value: "Normal"}, {Key: "MaxRecvDataSegmentLength", Value: "65536"},
		{Key: "ImmediateData", Value: "Yes"}, {Key: "InitialR2T", Value: "No"}}
	if _, err := c.Write(iscsi.AppendPDU(nil, &iscsi.PDU{BHS: h, Data: iscsi.AppendText(nil, kv)}, iscsi.Digests{})); err != nil {
		return nil
	}
	br := bufio.NewReader(c)
	r, err := iscsi.ReadPDU(br, iscsi.Digests{}, 1<<20, nil)
	if err != nil || r.BHS[36] != 0 {
		return nil
	}
	return br
}

func (a *attacker) scsiCmd(cmdSN uint32, itt uint32, cdb []byte, edtl uint32, write, immediate bool, data []byte) []byte {
	var h iscsi.BHS
	h.SetOpcode(iscsi.OpSCSICmd)
	if immediate {
		h[0] |= iscsi.FlagImmediate
	}
	f := byte(iscsi.FlagFinal)
	if write {
		f |= iscsi.FlagWrite
	} else if edtl > 0 {
		f |= iscsi.FlagRead
	}
	h.SetFlags(f | 0x01) // SIMPLE task attribute
	h.SetITT(itt)
	h.SetCmdSN(cmdSN)
	h.SetExpectedDataLen(edtl)
	copy(h[32:48], cdb)
	return iscsi.AppendPDU(nil, &iscsi.PDU{BHS: h, Data: data}, iscsi.Digests{})
}

// drain reads whatever comes back until the deadline or the close.
func drain(c net.Conn, br *bufio.Reader, d time.Duration) {
	c.SetReadDeadline(time.Now().Add(d))
	for {
		if _, err := iscsi.ReadPDU(br, iscsi.Digests{}, 1<<24, nil); err != nil {
			return
		}
	}
}

func (a *attacker) one(ctx context.Context, kind string) {
	if kind == "half-open" {
		if len(a.halfOpen) >= 16 {
			a.halfOpen[0].Close()
			a.halfOpen = a.halfOpen[1:]
		}
		c, _, err := a.dial(ctx)
		if err == nil {
			c.Write(make([]byte, 20)) // part of a BHS, then silence
			c.SetDeadline(time.Time{})
			a.halfOpen = append(a.halfOpen, c)
		}
		return
	}
	if kind == "login-flood" {
		var cs []net.Conn
		for i := 0; i < 16 && ctx.Err() == nil; i++ {
			c, p, err := a.dial(ctx)
			if err != nil {
				break
			}
			cs = append(cs, c)
			a.login(c, p, byte(i))
		}
		for _, c := range cs {
			c.Close()
		}
		return
	}
	c, p, err := a.dial(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	switch kind {
	case "garbage":
		b := make([]byte, 48+a.rng.IntN(4096))
		for i := range b {
			b[i] = byte(a.rng.Uint32())
		}
		c.Write(b)
		drain(c, bufio.NewReader(c), 200*time.Millisecond)
	case "bad-login":
		var h iscsi.BHS
		for i := range h {
			h[i] = byte(a.rng.Uint32())
		}
		h.SetOpcode(iscsi.OpLoginReq)
		data := make([]byte, a.rng.IntN(512))
		for i := range data {
			data[i] = byte(a.rng.IntN(128))
		}
		c.Write(iscsi.AppendPDU(nil, &iscsi.PDU{BHS: h, Data: data}, iscsi.Digests{}))
		drain(c, bufio.NewReader(c), 200*time.Millisecond)
	default:
		br := a.login(c, p, byte(a.rng.IntN(200)))
		if br == nil {
			return
		}
		var out []byte
		switch kind {
		case "random-pdus":
			for i := 0; i < 8; i++ {
				var h iscsi.BHS
				for j := range h {
					h[j] = byte(a.rng.Uint32())
				}
				h.SetDataLen(0)
				h[4] = 0 // no AHS
				out = append(out, h[:]...)
			}
		case "cmdsn-out-of-window":
			for i := 0; i < 32; i++ {
				out = append(out, a.scsiCmd(1+1<<20+uint32(i), uint32(i), []byte{0x00}, 0, false, false, nil)...)
				out = append(out, a.scsiCmd(uint32(0x7fffffff+i), uint32(100+i), []byte{0x00}, 0, false, false, nil)...)
			}
		case "oversized-segment":
			var h iscsi.BHS
			h.SetOpcode(iscsi.OpSCSICmd)
			h.SetFlags(iscsi.FlagFinal | iscsi.FlagWrite)
			h.SetCmdSN(1)
			h.SetExpectedDataLen(1 << 24)
			h[32] = 0x2a
			h.SetDataLen(1<<24 - 1)
			out = append(out, h[:]...)
			out = append(out, make([]byte, 4096)...)
		case "huge-write":
			// One write larger than any command may be, then more 4 MiB
			// writes than a session's data budget holds, none with data.
			out = append(out, a.scsiCmd(1, 0, rw10(0x2a, 0, 0xffff), 1<<30, true, false, nil)...)
			for i := 1; i <= 24; i++ {
				out = append(out, a.scsiCmd(1+uint32(i), uint32(i), rw10(0x2a, 0, 8192), 4<<20, true, false, nil)...)
			}
		case "immediate-flood":
			for i := 0; i < 400; i++ {
				out = append(out, a.scsiCmd(1, uint32(i), []byte{0x00}, 0, false, true, nil)...)
			}
		case "bad-digest-header":
			var h iscsi.BHS
			h.SetOpcode(iscsi.OpSCSICmd)
			h.SetFlags(iscsi.FlagFinal)
			h.SetCmdSN(1)
			h[4] = 255 // an AHS longer than anything that follows
			out = append(out, h[:]...)
		}
		c.Write(out)
		drain(c, br, 300*time.Millisecond)
	}
}
