// Command qemulab runs the QEMU cluster lab (cluster-tests): aluad on the
// host, real Linux multipath clients in QEMU guests, ownership moves under
// fio, and writes results.md and results.json. It needs root (network
// namespace, taps), qemu-system-x86, debootstrap and busybox-static
// (scripts/deps.sh qemu installs them).
//
//	go run ./cluster-tests/cmd/qemulab                 # the smoke scenario (CI)
//	go run ./cluster-tests/cmd/qemulab --scenario full # every client, every move
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aluad/aluad/cluster-tests/qemulab"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "qemulab:", err)
		os.Exit(1)
	}
}

func run() error {
	var names []string
	for n := range qemulab.Scenarios {
		names = append(names, n)
	}
	sort.Strings(names)
	scenario := flag.String("scenario", "smoke", "scenario: "+strings.Join(names, ", "))
	out := flag.String("out", "", "results directory (default results/qemu-lab/<scenario>-<time>)")
	root := flag.String("root", ".", "the aluad repository")
	follow := flag.Duration("follow", 40*time.Second, "how long clients get to switch after each move")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after this long")
	fabric := flag.String("fabric", "iscsi", "iscsi: aluad's own target on the host; tcmu: LIO + aluad --fabric tcmu in a storage guest")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	sc, ok := qemulab.Scenarios[*scenario]
	if !ok {
		return fmt.Errorf("no scenario %q (have %s)", *scenario, strings.Join(names, ", "))
	}
	if *fabric != "iscsi" && *fabric != "tcmu" {
		return fmt.Errorf("--fabric must be iscsi or tcmu, not %q", *fabric)
	}
	if *follow < time.Second {
		return fmt.Errorf("--follow must be at least 1s")
	}
	if _, err := os.Stat(filepath.Join(*root, "cluster-tests", "build-image.sh")); err != nil {
		return fmt.Errorf("--root %s is not the aluad repository: %v", *root, err)
	}
	if *out == "" {
		name := sc.Name
		if *fabric == "tcmu" {
			name += "-tcmu"
		}
		*out = filepath.Join(*root, "results", "qemu-lab", name+"-"+time.Now().Format("20060102-150405"))
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, *timeout)
	defer cancel2()
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	res, err := qemulab.Run(ctx, qemulab.Options{Scenario: sc, Root: *root, Out: *out, Follow: *follow, Log: logf, TCMU: *fabric == "tcmu"})
	if res != nil {
		for _, c := range res.Checks {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Printf("%s %s: %s\n", mark, c.Name, c.Detail)
		}
		fmt.Printf("results: %s\n", filepath.Join(*out, "results.md"))
	}
	if err != nil {
		return err
	}
	if !res.Pass {
		return fmt.Errorf("scenario %s failed (see %s)", sc.Name, filepath.Join(*out, "results.md"))
	}
	fmt.Printf("scenario %s passed in %v\n", sc.Name, time.Since(start).Round(time.Second))
	return nil
}
