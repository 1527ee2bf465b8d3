package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"

	"github.com/aluad/aluad/pkg/lab"
)


func labCmd(args []string) error {
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	scenario := fs.String("scenario", "", "crash, transition or mirror")
	iters := fs.Int("iterations", 20, "crash: node crashes to run")
	mirror := fs.String("mirror", "both", "crash: write-cache mirroring on, off or both")
	seed := fs.Uint64("seed", 1, "random seed")
	luns := fs.Int("luns", 8, "LUNs")
	qd := fs.Int("qd", 4, "crash: writers per LUN; transition and mirror: queue depth per LUN")
	_ = fs.Int("seconds", 4, "mirror: seconds per round; transition: seconds of steady load between events")
	verbose := fs.Bool("v", false, "print progress")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	switch *scenario {
	case "crash":
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
				Out: os.Stdout, Verbose: *verbose})
			if err != nil {
				return err
			}
			printCrash(r, m)
		}
		return nil
	case "":
		return fmt.Errorf("--scenario is required for now (crash, transition, mirror); the default lab run comes with the emulated host stacks")
	}
	return fmt.Errorf("unknown scenario %q (crash, transition, mirror)", *scenario)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func printCrash(r lab.CrashResult, mirror bool) {
	var nodes []string
	for n, c := range r.Crashes {
		nodes = append(nodes, fmt.Sprintf("%s x%d", n, c))
	}
	sort.Strings(nodes)
	fmt.Printf("crash check, write-cache mirroring %s: %d iterations, node crashes: %s\n", onOff(mirror), r.Iterations,
		strings.Join(nodes, ", "))
	fmt.Printf("  acknowledged writes verified through the survivor: %d\n", r.Acked)
	fmt.Printf("  mirrored pages replayed by takeovers: %d; failbacks after restart: %d\n", r.Replayed, r.Failbacks)
	fmt.Printf("  array-reported acknowledged data lost: %d blocks\n", r.ReportedLostBlocks)
	fmt.Printf("  acked writes lost: %d\n", r.Lost)
}
