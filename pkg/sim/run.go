package sim

import (
	"fmt"
	"time"
)

// Result is what running a script gave.
type Result struct {
	// Log is the event log: every event with its outcome, the core's
	// moves and reports; byte-identical for the same script.
	Log       string
	Violation *Violation
	Stats     Stats
}

// Run executes a script in a fresh world.
func Run(s Script) (Result, error) {
	w, err := newWorld(s)
	if err != nil {
		return Result{}, err
	}
	w.run()
	return Result{Log: w.log.String(), Violation: w.viol, Stats: w.stats}, nil
}

// Shrink removes events from a failing script for as long as it still
// breaks the same invariant (delta debugging: halves, then smaller chunks,
// down to single lines), within budget runs, and returns the shortest.
func Shrink(s Script, name string, budget int, deadline time.Time) Script {
	return shrinkWith(s, name, budget, deadline, func(c Script) bool {
		r, err := Run(c)
		return err == nil && r.Violation != nil && r.Violation.Name == name
	})
}

func shrinkWith(s Script, name string, budget int, deadline time.Time, failsRun func(Script) bool) Script {
	fails := func(c Script) bool {
		budget--
		return failsRun(c)
	}
	var top, evs Script
	for _, e := range s {
		if isTopology(e.Verb) {
			top = append(top, e)
		} else {
			evs = append(evs, e)
		}
	}
	join := func(e Script) Script { return append(append(Script{}, top...), e...) }
	for chunk := max(len(evs)/2, 1); ; chunk = max(chunk/2, 1) {
		removed := false
		for i := 0; i < len(evs) && budget > 0 && time.Now().Before(deadline); {
			cand := append(append(Script{}, evs[:i]...), evs[min(i+chunk, len(evs)):]...)
			if fails(join(cand)) {
				evs, removed = cand, true
				continue
			}
			i += chunk
		}
		if budget <= 0 || !time.Now().Before(deadline) || (chunk == 1 && !removed) {
			break
		}
	}
	// Drop hosts that no event names any more.
	used := map[string]bool{}
	for _, e := range evs {
		used[e.arg(0)] = true
	}
	var keep Script
	for _, e := range top {
		if e.Verb == "host" && !used[e.arg(0)] {
			continue
		}
		keep = append(keep, e)
	}
	if fails(append(append(Script{}, keep...), evs...)) {
		top = keep
	}
	return join(evs)
}

// SeedResult is one seed's outcome.
type SeedResult struct {
	Seed   uint64
	Events int
	Result Result
	Script Script
}

// RunSeed generates and runs a seed's script.
func RunSeed(seed uint64, steps int) (SeedResult, error) {
	s := Generate(seed, steps)
	r, err := Run(s)
	if err != nil {
		return SeedResult{}, fmt.Errorf("seed %d: %w", seed, err)
	}
	return SeedResult{Seed: seed, Events: r.Stats.Events, Result: r, Script: s}, nil
}
