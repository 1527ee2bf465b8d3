package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/stress"
)

// soakCmd runs the soak: sessions of verified I/O under a fault every
// interval, in one process.
func soakCmd(args []string) error {
	fs := newFlags("soak")
	sessions := fs.Int("sessions", 256, "sessions (spread over every port)")
	hostsN := fs.Int("hosts", 32, "initiator names the sessions share")
	dur := fs.Duration("duration", 30*time.Minute, "how long")
	every := fs.Duration("fault-every", 30*time.Second, "inject a fault this often (crash+restart, port cut, path cut, move, in turn)")
	seed := fs.Uint64("seed", 1, "random seed")
	jsonOut := fs.String("json", "", "write the full result as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sessions < 1 || *sessions > 4096 || *dur <= 0 || *every <= 0 || *hostsN < 1 {
		return fmt.Errorf("--sessions must be 1-4096, --hosts at least 1, --duration and --fault-every positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("soak: %d sessions from %d hosts for %v, a fault every %v\n", *sessions, *hostsN, *dur, *every)
	last := time.Now()
	res, err := stress.Soak(ctx, stress.SoakConfig{Sessions: *sessions, Hosts: *hostsN, Duration: *dur, FaultEvery: *every, Seed: *seed,
		Progress: func(p stress.SoakProgress) {
			if time.Since(last) >= 10*time.Second {
				last = time.Now()
				fmt.Printf("  %6s  ops %-10d mismatches %d  faults %d  sessions up %d\n", p.Elapsed.Round(time.Second), p.Ops, p.Mismatches, p.Faults, p.Sessions)
			}
		}})
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := writeJSONFile(*jsonOut, res); err != nil {
			return err
		}
	}
	printSoak(res)
	if bad := res.Check(stress.DefaultBounds); len(bad) > 0 {
		return fmt.Errorf("soak FAILED: %s", strings.Join(bad, "; "))
	}
	fmt.Println("soak PASSED: no data mismatch; goroutines, descriptors and heap within the stated bounds")
	return nil
}

func printSoak(r *stress.SoakResult) {
	fmt.Printf("ran %v: %d reads (%d verified), %d writes, %d mismatches\n", r.Duration.Round(time.Second), r.Reads, r.Verified, r.Writes, r.Mismatches)
	fmt.Printf("command latency p50 %.0f µs, p99 %.0f µs; retried %d (UA, transitioning, busy), reconnects %d, writes of unknown outcome %d\n",
		r.LatencyP50, r.LatencyP99, r.Retried, r.Reconnects, r.Uncertain)
	fmt.Printf("faults: %d\n", len(r.Faults))
	for _, f := range r.Faults {
		e := ""
		if f.Err != "" {
			e = " (" + f.Err + ")"
		}
		fmt.Printf("  %8v  %s%s\n", f.At, f.What, e)
	}
	row := func(name string, s stress.Resources) {
		fmt.Printf("  %-12s goroutines %5d  fds %5d  heap %6.1f MiB\n", name, s.Goroutines, s.FDs, float64(s.HeapInUse)/(1<<20))
	}
	fmt.Println("resources:")
	row("before", r.Before)
	row("baseline", r.Baseline)
	row("peak", r.Peak)
	row("end of load", r.EndOfLoad)
	row("after", r.After)
	b := stress.DefaultBounds
	fmt.Printf("bounds: goroutines after <= before + %d, fds after <= before + %d, heap at the end of the load <= baseline + %d MiB\n",
		b.Goroutines, b.FDs, b.Heap>>20)
	for _, m := range r.MismatchLog {
		fmt.Println("  MISMATCH", m)
	}
}

// abuseCmd attacks an in-process array and reports what the well-behaved
// sessions saw.
func abuseCmd(args []string) error {
	fs := newFlags("abuse")
	attackers := fs.Int("attackers", 48, "connections attacking at once")
	good := fs.Int("good", 8, "well-behaved sessions doing verified I/O")
	dur := fs.Duration("duration", time.Minute, "how long the attack lasts (a calm phase of a quarter of it comes first)")
	seed := fs.Uint64("seed", 1, "random seed")
	jsonOut := fs.String("json", "", "write the full result as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *attackers < 1 || *attackers > 1024 || *good < 1 || *good > 256 || *dur <= 0 {
		return fmt.Errorf("--attackers must be 1-1024, --good 1-256, --duration positive")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fmt.Printf("abuse: %d attackers against %d well-behaved sessions for %v\n", *attackers, *good, *dur)
	r, err := stress.Abuse(ctx, stress.AbuseConfig{Attackers: *attackers, Good: *good, Duration: *dur, Seed: *seed})
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		if err := writeJSONFile(*jsonOut, r); err != nil {
			return err
		}
	}
	fmt.Println("attacks:")
	for _, k := range []string{"garbage", "bad-login", "random-pdus", "cmdsn-out-of-window", "oversized-segment", "huge-write",
		"immediate-flood", "login-flood", "half-open", "bad-digest-header"} {
		fmt.Printf("  %-20s %d\n", k, r.Attacks[k])
	}
	l := r.Limits
	fmt.Printf("turned away: %d connections, %d sessions, %d TASK SET FULL, %d oversized writes, %d immediate rejects, %d protocol errors, %d login timeouts, %d write timeouts\n",
		l.ConnectionsRefused, l.SessionsRefused, l.TaskSetFull, l.OversizedWrites, l.ImmediateRejected, l.ProtocolErrors, l.LoginTimeouts, l.WriteTimeouts)
	fmt.Printf("well-behaved I/O, calm:   %d commands, p50 %.0f µs, p99 %.0f µs, max %.0f µs\n", r.Calm.N, r.Calm.P50, r.Calm.P99, r.Calm.Max)
	fmt.Printf("well-behaved I/O, attack: %d commands, p50 %.0f µs, p99 %.0f µs, max %.0f µs\n", r.Attack.N, r.Attack.P50, r.Attack.P99, r.Attack.Max)
	if r.Calm.P99 > 0 {
		fmt.Printf("p99 under attack / calm: %.2fx\n", r.Attack.P99/r.Calm.P99)
	}
	fmt.Printf("errors %d, mismatches %d, served a new session afterwards: %v; peak %d sessions, %d connections, %d goroutines\n",
		r.GoodErrors, r.Mismatches, r.AliveAfter, r.SessionsDuringAttack, r.ConnectionsDuringPeak, r.Peak.Goroutines)
	for _, e := range r.GoodErrorLog {
		fmt.Println("  ERROR", e)
	}
	if bad := r.Check(); len(bad) > 0 {
		return fmt.Errorf("abuse FAILED: %s", strings.Join(bad, "; "))
	}
	fmt.Println("abuse PASSED: no panic, no error or bad data for well-behaved sessions, served afterwards")
	return nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
