package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/clustersim"
	"github.com/aluad/aluad/pkg/sim"
)

// simCmd runs the deterministic whole-array simulation: seeds, or one
// script (a shrunk failure, a regression script).
func simCmd(args []string) error {
	fs := newFlags("sim")
	seeds := fs.Int("seeds", 100, "how many seeds to run")
	seed := fs.Uint64("seed", 1, "the first seed")
	steps := fs.Int("steps", 400, "events per seed (besides the topology and the final read-back)")
	script := fs.String("script", "", "run this script file instead of seeds")
	logOut := fs.Bool("log", false, "print the event log (with --script, or of each failing seed)")
	shrink := fs.Duration("shrink", time.Minute, "time to spend shrinking each failing seed (0: do not shrink)")
	out := fs.String("out", "", "write each failing seed's shrunk script to this directory")
	jobs := fs.Int("jobs", runtime.GOMAXPROCS(0), "seeds run in parallel")
	clusterMode := fs.Bool("cluster", false, "run cluster seeds: the real controllers of a two-controller cluster (default --steps 24)")
	plant := fs.String("plant", "none", "with --cluster: plant a defect to see the seeds catch it ("+plantNames()+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *clusterMode {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["steps"] {
			*steps = 24
		}
		return simCluster(*seeds, *seed, *steps, *jobs, *plant, *out, set)
	}
	if *plant != "none" {
		return errors.New("--plant needs --cluster")
	}
	if *script != "" {
		return simScript(*script, *logOut)
	}
	if *seeds < 1 || *steps < 1 || *steps > 1_000_000 || *jobs < 1 {
		return errors.New("--seeds, --steps (up to 1000000) and --jobs must be positive")
	}
	start := time.Now()
	results := make([]sim.SeedResult, *seeds)
	errs := make([]error, *seeds)
	next := make(chan int)
	var wg sync.WaitGroup
	for range *jobs {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = sim.RunSeed(*seed+uint64(i), *steps)
			}
		})
	}
	for i := range *seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	events, cmds, verified, moves, takeovers, abandoned, crashes := 0, 0, 0, 0, 0, 0, 0
	mid := map[string]int{}
	var failed []sim.SeedResult
	for i, r := range results {
		if errs[i] != nil {
			return errs[i]
		}
		st := r.Result.Stats
		events += r.Events
		cmds, verified, moves, takeovers, abandoned, crashes = cmds+st.Commands, verified+st.Verified, moves+st.Moves,
			takeovers+st.Takeovers, abandoned+st.Abandoned, crashes+st.Crashes
		for k, v := range st.MidMove {
			mid[k] += v
		}
		if r.Result.Violation != nil {
			failed = append(failed, r)
		}
	}
	fmt.Printf("sim: %d seeds (%d-%d), %d events in %s: %.0f events/s, %d failed\n", *seeds, *seed, *seed+uint64(*seeds)-1,
		events, elapsed.Round(time.Millisecond), float64(events)/elapsed.Seconds(), len(failed))
	fmt.Printf("  %d commands, %d blocks verified, %d crashes, %d moves (%d takeovers, %d abandoned)\n",
		cmds, verified, crashes, moves, takeovers, abandoned)
	fmt.Printf("  events inside moves: flush %d, hold %d, destage %d, switch %d, takeover %d\n",
		mid["flush"], mid["hold"], mid["destage"], mid["switch"], mid["takeover"])
	byName := map[string]int{}
	for _, r := range failed {
		byName[r.Result.Violation.Name]++
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("  %-22s %d seeds\n", n, byName[n])
	}
	for _, r := range failed {
		v := r.Result.Violation
		fmt.Printf("\nseed %d: %v\n", r.Seed, v)
		s := r.Script
		if *shrink > 0 {
			s = sim.Shrink(s, v.Name, 100000, time.Now().Add(*shrink))
			fmt.Printf("shrunk from %d to %d lines:\n", len(r.Script), len(s))
		}
		fmt.Print(s.String())
		if *logOut {
			rr, _ := sim.Run(s)
			fmt.Printf("--- log\n%s", rr.Log)
		}
		if *out != "" {
			if err := os.MkdirAll(*out, 0o755); err != nil {
				return err
			}
			body := fmt.Sprintf("# seed %d: %v\n%s", r.Seed, v, s.String())
			if err := os.WriteFile(filepath.Join(*out, fmt.Sprintf("seed-%d.txt", r.Seed)), []byte(body), 0o644); err != nil {
				return err
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d seeds broke an invariant", len(failed), *seeds)
	}
	return nil
}

func simScript(path string, logOut bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s, err := sim.ParseScript(string(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	r, err := sim.Run(s)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if logOut {
		fmt.Print(r.Log)
	}
	fmt.Printf("sim: %s: %d events, %d commands, %d blocks verified, %d moves, %d crashes\n", path, r.Stats.Events,
		r.Stats.Commands, r.Stats.Verified, r.Stats.Moves, r.Stats.Crashes)
	if r.Violation != nil {
		return r.Violation
	}
	return nil
}

// simCluster runs cluster seeds (pkg/clustersim); it does not return.
func simCluster(seeds int, seed uint64, steps, jobs int, plant, out string, set map[string]bool) error {
	for _, f := range []string{"script", "log", "shrink"} {
		if set[f] {
			return fmt.Errorf("--%s is not for --cluster: a cluster seed is replayed by its number", f)
		}
	}
	p, ok := clustersim.Plants[plant]
	if !ok {
		return fmt.Errorf("--plant %q: one of %s", plant, plantNames())
	}
	if seeds < 1 || steps < 1 || steps > 10_000 || jobs < 1 {
		return errors.New("--seeds, --steps (up to 10000) and --jobs must be positive")
	}
	clustersim.Main(clustersim.Options{Seeds: seeds, Seed: seed, Steps: steps, Plant: p, Jobs: jobs, Out: out})
	return nil
}

func plantNames() string {
	var n []string
	for k := range clustersim.Plants {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}
