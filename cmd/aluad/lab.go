package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aluad/aluad/pkg/lab"
)

func labCmd(args []string) error {
	fs := newFlags("lab")
	scenario := fs.String("scenario", "", "a built-in run: default (the lab), rolling-reboot, light-move, flapping, crash, transition, mirror or cluster (embedded vs controllers as processes)")
	file := fs.String("file", "", "a scenario file to run (see pkg/lab/scenarios/default.txt)")
	repeat := fs.Int("repeat", 1, "run the scenario this many times and print the medians")
	out := fs.String("out", "", "directory for the report files (default aluad-lab/NAME-TIME)")
	iters := fs.Int("iterations", 20, "crash: node crashes to run")
	mirror := fs.String("mirror", "both", "crash: write-cache mirroring on, off or both")
	seed := fs.Uint64("seed", 1, "random seed")
	luns := fs.Int("luns", 8, "LUNs")
	qd := fs.Int("qd", 0, "queue depth per LUN (crash: writers per LUN, default 4; transition: 16; mirror: 16)")
	secs := fs.Int("seconds", 4, "mirror: seconds per round; transition: seconds of steady load between events")
	fault := fs.String("fault", "power-loss", "crash, transition: how a node fails: power-loss (silent), panic (reset) or crash (closed)")
	verbose := fs.Bool("v", false, "print progress")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	switch *scenario {
	case "transition":
		r, err := lab.RunTransition(ctx, lab.TransitionOptions{LUNs: *luns, QD: orDefault(*qd, 16), ReadPct: 70,
			Steady: time.Duration(*secs) * time.Second, Seed: *seed, Out: os.Stdout, Fault: *fault})
		if err != nil {
			return err
		}
		printTransition(r, *luns, orDefault(*qd, 16), *fault)
		return nil
	case "mirror":
		r, err := lab.RunMirror(ctx, lab.MirrorOptions{LUNs: *luns, QD: orDefault(*qd, 16), Rounds: 3,
			Duration: time.Duration(*secs) * time.Second, Seed: *seed, Out: os.Stdout})
		if err != nil {
			return err
		}
		on, off := lab.Median(r.On), lab.Median(r.Off)
		fmt.Printf("\n4 KiB random writes, QD %d on each of %d LUNs, 3 alternating rounds of %ds (median):\n", orDefault(*qd, 16), *luns, *secs)
		fmt.Printf("  mirroring on:  %.1f MB/s\n  mirroring off: %.1f MB/s\n  on/off: %.2fx (every write also crosses the interlink: 50 µs + 10 Gbit/s)\n", on, off, on/off)
		return nil
	case "cluster":
		return runCluster(ctx, *luns, *repeat, *seed, *verbose)
	case "crash":
		*qd = orDefault(*qd, 4)
		var modes []bool
		switch *mirror {
		case "on":
			modes = []bool{true}
		case "off":
			modes = []bool{false}
		case "both":
			modes = []bool{true, false}
		default:
			return fmt.Errorf("--mirror must be on, off or both")
		}
		for _, m := range modes {
			r, err := lab.RunCrash(ctx, lab.CrashOptions{Iterations: *iters, Mirror: m, Seed: *seed, LUNs: *luns, QD: *qd,
				Out: os.Stdout, Verbose: *verbose, Fault: *fault})
			if err != nil {
				return err
			}
			printCrash(r, m, *fault)
		}
		return nil
	case "", "default":
		if *file != "" && *scenario != "" {
			return fmt.Errorf("give --file or --scenario, not both")
		}
		text, _ := lab.BuiltinScenario("default")
		if *file != "" {
			b, err := os.ReadFile(*file)
			if err != nil {
				return err
			}
			text = string(b)
		}
		return runScenario(ctx, text, *out, *seed, *repeat, *verbose)
	}
	if text, ok := lab.BuiltinScenario(*scenario); ok {
		if *file != "" {
			return fmt.Errorf("give --file or --scenario, not both")
		}
		return runScenario(ctx, text, *out, *seed, *repeat, *verbose)
	}
	return fmt.Errorf("unknown scenario %q (default, rolling-reboot, light-move, flapping, crash, transition, mirror, cluster)", *scenario)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func printCrash(r lab.CrashResult, mirror bool, fault string) {
	var nodes []string
	for n, c := range r.Crashes {
		nodes = append(nodes, fmt.Sprintf("%s x%d", n, c))
	}
	sort.Strings(nodes)
	fmt.Printf("crash check (node failure: %s), write-cache mirroring %s: %d iterations, node failures: %s\n", fault,
		onOff(mirror), r.Iterations, strings.Join(nodes, ", "))
	fmt.Printf("  acknowledged writes verified through the survivor: %d\n", r.Acked)
	fmt.Printf("  mirrored pages replayed by takeovers: %d; failbacks after restart: %d\n", r.Replayed, r.Failbacks)
	fmt.Printf("  array-reported acknowledged data lost: %d blocks\n", r.ReportedLostBlocks)
	fmt.Printf("  acked writes lost: %d\n", r.Lost)
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func printTransition(r lab.TransitionResult, luns, qd int, fault string) {
	b := r.Baseline
	fmt.Printf("\ntransition benchmark: 4 KiB random I/O (70%% reads), QD %d on each of %d LUNs, 2 hosts, implicit ALUA\n", qd, luns)
	fmt.Printf("steady state: %.0f IOPS, latency p50 %s, p99 %s, max %s\n\n", b.IOPS, ms(b.P50), ms(b.P99), ms(b.Max))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "event\tLUNs moved\tflush (I/O on)\tstop (I/O held)\tworst I/O through the move\tI/Os in flight")
	for _, m := range r.Moments {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%d\n", m.Event, m.Batch, ms(m.Flush), ms(m.Stop), ms(m.Worst), m.InFlight)
	}
	tw.Flush()
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "window (event to 1 s after its last batch)\tI/Os\tp50\tp99\tmax\terrors")
	for _, w := range []struct {
		name string
		s    lab.Stats
	}{{"failover (node " + fault + ")", r.Failover}, {"failback (node restart)", r.Failback}, {"rebalance (load skew)", r.Rebalance}} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", w.name, w.s.Count, ms(w.s.P50), ms(w.s.P99), ms(w.s.Max), w.s.Errors)
	}
	tw.Flush()
	fmt.Printf("\nI/O errors seen by the hosts over the whole run: %d (the SNIA SDC 2017 NetApp talk reports 753 ms for its implicit failback)\n", r.Errors)
}

// runScenario runs a lab scenario, prints the comparison table and
// writes the report files.
func runScenario(ctx context.Context, text, out string, seed uint64, repeat int, verbose bool) error {
	s, err := lab.ParseScenarioText(text)
	if err != nil {
		return fmt.Errorf("scenario: %w", err)
	}
	if out == "" {
		out = filepath.Join("aluad-lab", fmt.Sprintf("%s-%s", s.Name, time.Now().Format("20060102-150405")))
	}
	fi, _ := os.Stderr.Stat()
	tty := fi != nil && fi.Mode()&os.ModeCharDevice != 0
	var logw io.Writer
	if verbose {
		logw = os.Stderr
	}
	fmt.Printf("aluad lab %q: %d hosts (%s), %d LUNs, %v per run\n", s.Name, len(s.Hosts), stacks(s), s.LUNs, s.Duration)
	if repeat < 1 || repeat > 20 {
		return fmt.Errorf("--repeat must be from 1 to 20")
	}
	var all []*lab.Result
	var r *lab.Result
	for i := 0; i < repeat; i++ {
		var err error
		r, err = lab.Run(ctx, s, lab.RunOptions{Seed: seed + uint64(i), Progress: os.Stderr, TTY: tty, Verbose: verbose, Log: logw})
		if err != nil {
			return err
		}
		all = append(all, r)
		fmt.Println()
		if repeat > 1 {
			fmt.Printf("repeat %d/%d:\n", i+1, repeat)
		}
		r.Table(os.Stdout)
	}
	if repeat > 1 {
		fmt.Printf("\nmedians over %d repeats:\n", repeat)
		lab.MedianTable(os.Stdout, all)
	}
	for _, m := range r.Modes {
		fmt.Printf("\n%s ALUA, hosts:\n", m.Mode)
		m.HostTable(os.Stdout)
	}
	files, err := lab.WriteReport(out, r, s, text)
	if err != nil {
		return err
	}
	if repeat > 1 {
		var b strings.Builder
		lab.MedianTable(&b, all)
		p := filepath.Join(out, "medians.txt")
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			return err
		}
		files = append(files, p)
	}
	fmt.Printf("\nreport (last run): %s\n", strings.Join(files, ", "))
	return nil
}

func stacks(s *lab.Scenario) string {
	var out []string
	for _, h := range s.Hosts {
		out = append(out, h.Name+" "+h.Stack)
	}
	return strings.Join(out, ", ")
}
