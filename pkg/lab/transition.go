package lab

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/daemon"
)

// TransitionOptions shape the transition benchmark.
type TransitionOptions struct {
	LUNs    int
	QD      int // per LUN
	ReadPct int
	Steady  time.Duration // steady load between events
	Seed    uint64
	Out     io.Writer
	// Fault is how node b fails: power-loss (the default), panic or crash.
	Fault string
}

// Moment is one ownership event of the run as the array recorded it.
type Moment struct {
	Event string // failover, failback, balance
	Batch []uint64
	Flush time.Duration
	Stop  time.Duration
	// Start and End bound the move (End is when it was announced).
	Start, End time.Time
	// Worst is the longest I/O in flight at any point of the move, and
	// InFlight how many I/Os overlapped it.
	Worst    time.Duration
	InFlight int
}

// TransitionResult is the benchmark's outcome.
type TransitionResult struct {
	Baseline Stats
	Moments  []Moment
	// Window stats: every I/O from the event to 1 s after the last batch.
	Failover, Failback, Rebalance Stats
	Errors                        int
}

// RunTransition runs a steady 4 KiB random workload and, under it, a node
// crash (failover), its restart (failback of the crashed node's LUNs once
// the stability window has passed) and a load skew (every LUN moved to
// one node by hand, after which the core rebalances once its ROI check
// says it pays). It reports per batch the flush and stop times and the
// worst I/O latency through the move.
func RunTransition(ctx context.Context, o TransitionOptions) (TransitionResult, error) {
	const lunSize = 64 << 20
	if err := CheckNodeFault(o.Fault); err != nil {
		return TransitionResult{}, err
	}
	env, err := Start(ctx, EnvConfig{LUNs: o.LUNs, LUNSize: lunSize, Hosts: 2, Mirror: true,
		Tick: 100 * time.Millisecond, FailbackWindow: time.Second, Cooldown: 5 * time.Second, PlanInterval: time.Second,
		Penalty: 50 * time.Microsecond, NodeCapacity: 1e9}) // never stressed until calibrated below
	if err != nil {
		return TransitionResult{}, err
	}
	defer env.Close()
	say := func(f string, a ...any) {
		if o.Out != nil {
			fmt.Fprintf(o.Out, f+"\n", a...)
		}
	}
	var res TransitionResult
	w := StartWorkload(env, o.QD, o.ReadPct, lunSize, o.Seed)
	time.Sleep(time.Second) // warm up
	t0, c0 := time.Now(), w.Completed()
	time.Sleep(o.Steady)
	t1, c1 := time.Now(), w.Completed()
	time.Sleep(200 * time.Millisecond) // the baseline's last I/Os finish before the fault
	seq := lastSeq(env.D)
	say("steady load for %v; node b fails (%s)", o.Steady, NodeFault(o.Fault))

	// Failover: node b fails; its LUNs move to a at once.
	if _, err := env.D.Inject(api.Fault{Kind: NodeFault(o.Fault), Node: "b"}); err != nil {
		w.Stop()
		return res, err
	}
	tf := time.Now()
	if !env.WaitOwners(10*time.Second, func(l *array.LUN) bool { return l.Owner().Name == "a" && !l.Moving() }) {
		w.Stop()
		return res, fmt.Errorf("failover did not complete within 10s")
	}
	time.Sleep(o.Steady / 2)
	say("restarting node b; failback after the stability window")
	if _, err := env.D.Inject(api.Fault{Kind: api.FaultRestart, Node: "b"}); err != nil {
		w.Stop()
		return res, err
	}
	tb := time.Now()
	if !env.WaitOwners(15*time.Second, AtPreferred) {
		w.Stop()
		return res, fmt.Errorf("failback did not complete within 15s: %s", owners(env))
	}
	time.Sleep(o.Steady / 2)

	// Rebalance: calibrate the core's node capacity to this run's load
	// (balanced: ~45% per node; all on one node: ~90%, stressed), then
	// skew the load by moving every LUN to node a by hand.
	iops := float64(c1-c0) / t1.Sub(t0).Seconds()
	work := iops * 0.1 * (1 + float64(blk4k)/65536) // work units per 100 ms tick
	for _, n := range env.D.Array.Nodes {
		env.D.SetNodeCapacity(n.Name, work*1.1)
	}
	say("skewing load: every LUN to node a (core capacity %.0f work units per tick per node)", work*1.1)
	for _, l := range env.D.Array.LUNs {
		if l.Owner().Name != "a" {
			if _, err := env.D.Array.Move([]uint64{l.ID}, "a", alua.CauseManual); err != nil {
				w.Stop()
				return res, err
			}
		}
	}
	tr := time.Now()
	balanced := env.WaitOwners(30*time.Second, func(l *array.LUN) bool {
		n := 0
		for _, m := range env.D.Array.LUNs {
			if m.Owner().Name == "b" {
				n++
			}
		}
		return n > 0 && !l.Moving()
	})
	time.Sleep(o.Steady / 2)
	samples := w.Stop()
	if !balanced {
		return res, fmt.Errorf("the core did not rebalance within 30s of the skew")
	}
	res.Baseline = Summarise(samples, t0, t1)
	res.Moments = moments(env.D, seq, samples)
	end := func(cause string, from time.Time) time.Time {
		last := from
		for _, m := range res.Moments {
			if m.Event == cause && m.End.After(last) {
				last = m.End
			}
		}
		return last.Add(time.Second)
	}
	res.Failover = Summarise(samples, tf, end("failover", tf))
	res.Failback = Summarise(samples, tb, end("failback", tb))
	res.Rebalance = Summarise(samples, tr, end("balance", tr))
	for _, s := range samples {
		if s.Err {
			res.Errors++
		}
	}
	return res, nil
}

func lastSeq(d *daemon.Daemon) uint64 {
	evs, _ := d.Events.Since(0)
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// moments turns the array's ALUA changes after seq into Moments.
func moments(d *daemon.Daemon, seq uint64, samples []Sample) []Moment {
	evs, _ := d.Events.Since(seq)
	var out []Moment
	for _, e := range evs {
		if e.Kind != api.EventALUA || e.Change == nil || e.Change.Failed {
			continue
		}
		switch e.Change.Cause {
		case "failover", "failback", "balance":
		default:
			continue
		}
		m := Moment{Event: e.Change.Cause, Batch: e.Change.LUNs, Flush: e.Change.Flush, Stop: e.Change.Stop,
			End: e.Time, Start: e.Time.Add(-e.Change.Flush - e.Change.Stop)}
		m.Worst, m.InFlight = WorstOverlapping(samples, m.Start, m.End)
		out = append(out, m)
	}
	return out
}

func owners(env *Env) string {
	s := ""
	for _, l := range env.D.Array.LUNs {
		s += fmt.Sprintf(" LUN %d on %s (preferred %s)", l.ID, l.Owner().Name, l.Preferred.Name)
	}
	return s
}
