// Command qemulab runs the QEMU cluster lab (cluster-tests): aluad on the
// host, real Linux multipath clients in QEMU guests, ownership moves under
// fio, and writes results.md and results.json. It needs root (network
// namespace, taps), qemu-system-x86, debootstrap and busybox-static
// (scripts/deps.sh qemu installs them).
//
//	go run ./cluster-tests/cmd/qemulab                 # the smoke scenario (CI)
//	go run ./cluster-tests/cmd/qemulab --scenario full # every client, every move
//	go run ./cluster-tests/cmd/qemulab --release trixie # the smoke with a Debian 13 guest
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aluad/aluad/cluster-tests/qemulab"
	"github.com/aluad/aluad/pkg/qualify"
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
	release := flag.String("release", qemulab.DefaultRelease, "the client guests' Debian release: "+strings.Join(qemulab.Releases, ", "))
	fabric := flag.String("fabric", "iscsi", "iscsi: aluad's own target on the host; tcmu: LIO + aluad --fabric tcmu in a storage guest")
	var mo matrixFlags
	flag.BoolVar(&mo.on, "matrix", false, "run the interoperability matrix instead of a scenario (docs/matrix.md)")
	flag.StringVar(&mo.releases, "releases", strings.Join(qemulab.Releases, ","), "--matrix: the releases, comma-separated")
	flag.StringVar(&mo.configs, "configs", "", "--matrix: the multipath configurations, comma-separated (default all: "+matrixConfigNames()+")")
	flag.IntVar(&mo.runs, "runs", 3, "--matrix: runs of each row")
	flag.IntVar(&mo.perRun, "per-run", 4, "--matrix: guests in one lab run")
	flag.BoolVar(&mo.noWrong, "no-wrong", false, "--matrix: only the rows declared with the right host type")
	flag.DurationVar(&mo.budget, "budget", 0, "--matrix: start no lab run after this long (0: none); the matrix is built from the runs that ran")
	flag.StringVar(&mo.from, "matrix-from", "", "rebuild the matrix from the lab runs under this directory, run nothing (--runs: the runs a cell needs to count)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flag.Arg(0))
	}
	if mo.on || mo.from != "" {
		return runMatrix(mo, *root, *out, *timeout)
	}
	sc, ok := qemulab.Scenarios[*scenario]
	if !ok {
		return fmt.Errorf("no scenario %q (have %s)", *scenario, strings.Join(names, ", "))
	}
	if err := qemulab.ValidRelease(*release); err != nil {
		return fmt.Errorf("--release: %w", err)
	}
	sc.Clients = slices.Clone(sc.Clients)
	for i := range sc.Clients {
		sc.Clients[i].Release = *release
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
		if *release != qemulab.DefaultRelease {
			name += "-" + *release
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

type matrixFlags struct {
	on                bool
	releases, configs string
	runs, perRun      int
	noWrong           bool
	budget            time.Duration
	from              string
}

func matrixConfigNames() string {
	var n []string
	for _, c := range qemulab.MatrixConfigs {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

// runMatrix runs (or, with --matrix-from, rebuilds) the interoperability
// matrix and prints it.
func runMatrix(mo matrixFlags, root, out string, timeout time.Duration) error {
	var rels []string
	for _, r := range strings.Split(mo.releases, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if err := qemulab.ValidRelease(r); err != nil {
			return fmt.Errorf("--releases: %w", err)
		}
		rels = append(rels, r)
	}
	if mo.from != "" {
		m, err := qemulab.ReadMatrix(mo.from, rels)
		if err != nil {
			return err
		}
		if err := qemulab.WriteMatrix(mo.from, filepath.Join(root, "cluster-tests", "guest"), m, mo.runs); err != nil {
			return err
		}
		fmt.Print(matrixText(m, mo.runs))
		fmt.Printf("matrix: %s\n", filepath.Join(mo.from, "matrix.html"))
		return nil
	}
	var cfgs []qemulab.MatrixConfig
	if mo.configs != "" {
		for _, n := range strings.Split(mo.configs, ",") {
			c, err := qemulab.MatrixConfigByName(strings.TrimSpace(n))
			if err != nil {
				return fmt.Errorf("--configs: %w", err)
			}
			cfgs = append(cfgs, c)
		}
	}
	if mo.runs < 1 || mo.perRun < 1 {
		return fmt.Errorf("--runs and --per-run must be at least 1")
	}
	if _, err := os.Stat(filepath.Join(root, "cluster-tests", "build-image.sh")); err != nil {
		return fmt.Errorf("--root %s is not the aluad repository: %v", root, err)
	}
	if out == "" {
		out = filepath.Join(root, "results", "matrix-"+time.Now().Format("20060102-150405"))
	}
	timeoutSet := false
	flag.Visit(func(f *flag.Flag) { timeoutSet = timeoutSet || f.Name == "timeout" })
	if !timeoutSet {
		timeout = 24 * time.Hour // the scenario's default is no bound for a matrix
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, timeout)
	defer cancel2()
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	m, err := qemulab.RunMatrix(ctx, qemulab.MatrixOptions{Root: root, Out: out, Releases: rels, Configs: cfgs, NoWrong: mo.noWrong,
		Runs: mo.runs, PerRun: mo.perRun, Budget: mo.budget, Log: logf})
	if err != nil {
		return err
	}
	fmt.Print(matrixText(m, mo.runs))
	fmt.Printf("matrix: %s (%v)\n", filepath.Join(out, "matrix.html"), time.Since(start).Round(time.Second))
	return nil
}

func matrixText(m qualify.Matrix, runs int) string {
	var b strings.Builder
	qualify.WriteMatrixMarkdown(&b, m)
	fmt.Fprintf(&b, "\nRecommended per release (the rows declared with the right type, cells of %d runs or more):\n", runs)
	for _, r := range qualify.Recommend(m, runs) {
		switch {
		case r.Unmeasured:
			fmt.Fprintf(&b, "- %s: not measured enough\n", r.Release)
		case r.Green:
			fmt.Fprintf(&b, "- %s: %s, declared %s (every cell passed)\n", r.Release, r.Row.Config, r.Row.Type)
		default:
			fmt.Fprintf(&b, "- %s: none passed every cell; closest %s, declared %s, did not pass %s\n", r.Release, r.Row.Config, r.Row.Type, strings.Join(r.Failing, "; "))
		}
	}
	return b.String()
}
