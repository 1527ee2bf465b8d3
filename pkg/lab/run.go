package lab

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/hosts"
)

// RunOptions shape a scenario run.
type RunOptions struct {
	Seed uint64
	// Progress gets a progress line (a bar on a terminal).
	Progress io.Writer
	TTY      bool
	Verbose  bool
	Log      io.Writer
}

// Result is a scenario's outcome: one ModeResult per run (the scenario's
// own, then the comparison run).
type Result struct {
	Scenario string        `json:"scenario"`
	Modes    []*ModeResult `json:"modes"`
}

// ModeResult is one run of a scenario.
type ModeResult struct {
	Mode     string         `json:"mode"` // implicit or explicit
	Start    time.Time      `json:"start"`
	Duration time.Duration  `json:"duration_ns"`
	Baseline Stats          `json:"baseline"`
	Events   []EventResult  `json:"events"`
	Hosts    []HostResult   `json:"hosts"`
	Moves    []MoveRecord   `json:"moves"`
	Reports  []ReportRecord `json:"reports"`
	Hist     []HistBucket   `json:"histogram"`
	IOs      int            `json:"ios"`
	Errors   int            `json:"errors"`
	samples  []Sample
	hostEvts [][]hosts.Event
}

// MoveRecord is one ownership change the array made.
type MoveRecord struct {
	At    time.Duration `json:"at_ns"` // since the run's start
	LUNs  []uint64      `json:"luns"`
	From  string        `json:"from"`
	To    string        `json:"to"`
	Cause string        `json:"cause"`
	Flush time.Duration `json:"flush_ns"`
	Stop  time.Duration `json:"stop_ns"`
}

// ReportRecord is a report condition raised or cleared by the core.
type ReportRecord struct {
	At     time.Duration `json:"at_ns"`
	Raised bool          `json:"raised"`
	Text   string        `json:"text"`
}

// HostResult is one host's view of a run.
type HostResult struct {
	Name   string          `json:"name"`
	Stack  string          `json:"stack"`
	Stats  hosts.Stats     `json:"stats"`
	Paths  []PathResult    `json:"paths"`
	Follow []time.Duration `json:"follow_ns"` // per ownership move of a LUN it uses: move to switch
}

// PathResult is one path's counters at the end of a run.
type PathResult struct {
	Name     string         `json:"name"`
	Up       bool           `json:"up"`
	Counters hosts.Counters `json:"counters"`
}

// Run runs the scenario, then its comparison (explicit ALUA, every host
// the comparison stack) when it names one.
func Run(ctx context.Context, s *Scenario, o RunOptions) (*Result, error) {
	res := &Result{Scenario: s.Name}
	modes := []struct {
		alua  string
		stack string
		opts  map[string]string
	}{{s.ALUA, "", nil}}
	if s.Compare != "" {
		modes = append(modes, struct {
			alua  string
			stack string
			opts  map[string]string
		}{"explicit", s.Compare, s.CompareOpts})
	}
	for i, m := range modes {
		specs := s.Hosts
		if m.stack != "" {
			specs = nil
			for _, h := range s.Hosts {
				specs = append(specs, HostSpec{Name: h.Name, Stack: m.stack, Type: s.CompareType, Opts: m.opts})
			}
		}
		mr, err := runMode(ctx, s, m.alua, specs, o, fmt.Sprintf("run %d/%d", i+1, len(modes)))
		if err != nil {
			return res, fmt.Errorf("%s ALUA run: %w", m.alua, err)
		}
		res.Modes = append(res.Modes, mr)
	}
	return res, nil
}

// labOwnership is the core's tuning in the lab: 100 ms ticks so a run
// fits in minutes, a 2 s failback window, 5 s cooldown, and a ship
// window longer than a multipathd path check may take to follow.
func labEnv(s *Scenario, alua string, specs []HostSpec, o RunOptions) EnvConfig {
	return EnvConfig{LUNs: s.LUNs, LUNSize: s.LUNSize, Stacks: specs, ALUA: alua, Mirror: true,
		Tick: 100 * time.Millisecond, FailbackWindow: 2 * time.Second, Cooldown: 5 * time.Second,
		PlanInterval: time.Second, ShipWindow: 30 * time.Second, Penalty: 50 * time.Microsecond, NodeCapacity: 1e9,
		Verbose: o.Verbose, Log: o.Log}
}

func runMode(ctx context.Context, s *Scenario, alua string, specs []HostSpec, o RunOptions, tag string) (*ModeResult, error) {
	env, err := Start(ctx, labEnv(s, alua, specs, o))
	if err != nil {
		return nil, err
	}
	defer env.Close()
	w := StartStreams(env, streams(s, env), s.LUNSize, o.Seed)
	col := newCollector(env.D)
	t0 := time.Now()
	mr := &ModeResult{Mode: alua, Start: t0, Duration: s.Duration}
	prog := newProgress(o, fmt.Sprintf("%s %s ALUA", tag, alua), s.Duration, t0)
	defer prog.stop()
	var calibrated bool
	var runErr error
	actual := make([]time.Time, len(s.Events))
	for i, e := range s.Events {
		if !sleepUntil(ctx, t0.Add(e.At)) {
			runErr = ctx.Err()
			break
		}
		if !calibrated {
			calibrate(env, w, t0, s.Light)
			calibrated = true
		}
		prog.set(e.Label)
		actual[i] = time.Now()
		if err := apply(env, e); err != nil {
			runErr = fmt.Errorf("at %v %s: %w", e.At, e.Label, err)
			break
		}
	}
	if runErr == nil && !sleepUntil(ctx, t0.Add(s.Duration)) {
		runErr = ctx.Err()
	}
	mr.samples = w.Stop()
	prog.stop()
	col.stop()
	if runErr != nil {
		return nil, runErr
	}
	for _, h := range env.Hosts {
		mr.hostEvts = append(mr.hostEvts, h.Events())
	}
	mr.Moves, mr.Reports = col.records(t0)
	analyse(mr, s, env, actual)
	return mr, nil
}

// streams expands the workload lines.
func streams(s *Scenario, env *Env) []Stream {
	var out []Stream
	for _, l := range s.Loads {
		luns := l.LUNs
		if luns == nil {
			luns = env.LUNs
		}
		for hi, h := range env.Hosts {
			if l.Hosts != nil && !contains(l.Hosts, h.Name) {
				continue
			}
			for _, lun := range luns {
				out = append(out, Stream{Host: hi, LUN: lun, BS: l.BS, ReadPct: l.ReadPct, QD: l.QD, Rate: l.Rate})
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(t)):
		return true
	}
}

// calibrate sets the core's node capacity from the load so far so that
// the scenario's balanced placement runs each node at about 45% and all
// LUNs on one node at about 90% (stressed): the rebalance after a skew is
// then decided by the core's own ROI check, on this machine's speed.
func calibrate(env *Env, w *Workload, t0 time.Time, light bool) {
	el := time.Since(t0).Seconds()
	if el <= 0 {
		return
	}
	iops := float64(w.Completed()) / el
	tick := 0.1 // the lab's core ticks every 100 ms
	work := iops * tick * (1 + float64(blk4k)/65536)
	all := 0.9 // every LUN on one node: 90%, stressed
	if light {
		all = 0.3 // a light load: no node reaches the stress floor
	}
	for _, n := range env.D.Array.Nodes {
		env.D.SetNodeCapacity(n.Name, max(work/all, 1))
	}
}

// apply injects one scenario event.
func apply(env *Env, e EventSpec) error {
	inject := func(f api.Fault) error {
		_, err := env.D.Inject(f)
		return err
	}
	ports := func(node string) []api.PortalInfo {
		var out []api.PortalInfo
		for _, p := range env.D.Portals() {
			if p.Node == node {
				out = append(out, p)
			}
		}
		return out
	}
	switch e.Kind {
	case "cut", "restore":
		kind := api.FaultPathDown
		if e.Kind == "restore" {
			kind = api.FaultPathUp
		}
		for _, p := range ports(e.Node) {
			if err := inject(api.Fault{Kind: kind, Port: p.Port, Initiator: env.IQN[e.Host]}); err != nil {
				return err
			}
		}
		return nil
	case "power-loss", "panic", "crash", "restart":
		return inject(api.Fault{Kind: e.Kind, Node: e.Node})
	case "port-down", "port-up", "cable-pull", "cable-plug":
		return inject(api.Fault{Kind: e.Kind, Port: e.Port})
	case "delay":
		for _, p := range ports(e.Node) {
			if err := inject(api.Fault{Kind: api.FaultDelay, Port: p.Port, Initiator: env.IQN[e.Host], Delay: e.Delay}); err != nil {
				return err
			}
		}
		return nil
	case "clear":
		return inject(api.Fault{Kind: api.FaultClear})
	case "move":
		_, err := env.D.Array.Move([]uint64{e.LUN}, e.Node, alua.CauseManual)
		return err
	case "reboot":
		for _, h := range env.Hosts {
			if h.Name == e.Host {
				return h.Reboot(context.Background(), e.Down, e.Gap)
			}
		}
		return fmt.Errorf("no host %q", e.Host)
	case "skew":
		for _, l := range env.D.Array.LUNs {
			if l.Owner().Name != e.Node {
				if _, err := env.D.Array.Move([]uint64{l.ID}, e.Node, alua.CauseManual); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return fmt.Errorf("unknown event %q", e.Kind)
}

// collector reads the daemon's event log while a run goes on, so that
// busy logs (I/O statistics every tick) cannot overwrite the ownership
// changes before the run ends.
type collector struct {
	d    *daemon.Daemon
	seq  uint64
	mu   sync.Mutex
	evs  []api.Event
	done chan struct{}
	wg   sync.WaitGroup
}

func newCollector(d *daemon.Daemon) *collector {
	c := &collector{d: d, seq: lastSeq(d), done: make(chan struct{})}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			c.poll()
			select {
			case <-c.done:
				c.poll()
				return
			case <-t.C:
			}
		}
	}()
	return c
}

func (c *collector) poll() {
	evs, _ := c.d.Events.Since(c.seq)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range evs {
		c.seq = e.Seq
		if e.Kind == api.EventALUA || e.Kind == api.EventReport {
			c.evs = append(c.evs, e)
		}
	}
}

func (c *collector) stop() {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	c.wg.Wait()
}

// records turns the collected events into moves and reports.
func (c *collector) records(t0 time.Time) ([]MoveRecord, []ReportRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var moves []MoveRecord
	var reps []ReportRecord
	for _, e := range c.evs {
		switch {
		case e.Kind == api.EventALUA && e.Change != nil && !e.Change.Failed && e.Change.To != "" && e.Change.From != "" && e.Change.To != e.Change.From:
			ch := e.Change
			moves = append(moves, MoveRecord{At: e.Time.Sub(t0), LUNs: ch.LUNs, From: ch.From, To: ch.To, Cause: ch.Cause,
				Flush: ch.Flush, Stop: ch.Stop})
		case e.Kind == api.EventReport && e.Report != nil:
			reps = append(reps, ReportRecord{At: e.Time.Sub(t0), Raised: e.Report.Raised,
				Text: strings.TrimSpace(e.Report.Condition + ": " + e.Report.Cause)})
		}
	}
	return moves, reps
}
