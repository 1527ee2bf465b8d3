package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/aluad/aluad/pkg/lab"
)

// runCluster runs the embedded-vs-processes comparison repeat times and
// prints each figure's median with its range.
func runCluster(ctx context.Context, luns, repeat int, seed uint64, verbose bool) error {
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	if luns == 8 { // the lab's default is sized for the emulated hosts
		luns = 4
	}
	var out io.Writer = io.Discard
	if verbose {
		out = os.Stdout
	}
	var rs []lab.ClusterResult
	for i := 0; i < max(repeat, 1); i++ {
		r, err := lab.RunCluster(ctx, lab.ClusterOptions{Binary: bin, LUNs: luns, Seed: seed + uint64(i), Out: out})
		if err != nil {
			return err
		}
		fmt.Printf("run %d/%d: failover %v vs %v, lost %d+%d of %d+%d acknowledged writes, %d+%d stale reads\n", i+1, max(repeat, 1),
			r.Embedded.Failover.Round(time.Millisecond), r.Processes.Failover.Round(time.Millisecond),
			r.Embedded.Lost, r.Processes.Lost, r.Embedded.Acked, r.Processes.Acked, r.Embedded.Stale, r.Processes.Stale)
		rs = append(rs, r)
	}
	fmt.Printf("\n%d LUNs, per LUN a stream on the owner's port and one on the other node's, 100 commands/s each (4 KiB, half writes);\n", luns)
	fmt.Printf("node a fails hard at 3 s (the crash fault; kill -9 of its process) and comes back at 9 s; lease TTL 2 s.\n")
	fmt.Printf("Median of %d runs [min-max]:\n\n", len(rs))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tembedded (one process)\tcontrollers as processes")
	row := func(name string, f func(lab.ClusterMode) time.Duration) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, spread(rs, func(r lab.ClusterResult) time.Duration { return f(r.Embedded) }),
			spread(rs, func(r lab.ClusterResult) time.Duration { return f(r.Processes) }))
	}
	row("owner path p50", func(m lab.ClusterMode) time.Duration { return m.OwnerP50 })
	row("owner path p99", func(m lab.ClusterMode) time.Duration { return m.OwnerP99 })
	row("forwarded p50", func(m lab.ClusterMode) time.Duration { return m.ForwardedP50 })
	row("forwarded p99", func(m lab.ClusterMode) time.Duration { return m.ForwardedP99 })
	row("failover (fault to the last LUN served)", func(m lab.ClusterMode) time.Duration { return m.Failover })
	row("worst host I/O through the failover", func(m lab.ClusterMode) time.Duration { return m.WorstFailover })
	row("failback (restart to the last LUN back)", func(m lab.ClusterMode) time.Duration { return m.Failback })
	row("worst host I/O through the failback", func(m lab.ClusterMode) time.Duration { return m.WorstFailback })
	tw.Flush()
	lost, acked, errs, aborts := 0, 0, [2]int{}, 0
	for _, r := range rs {
		lost += r.Embedded.Lost + r.Processes.Lost
		acked += r.Embedded.Acked + r.Processes.Acked
		errs[0] += r.Embedded.Errors
		errs[1] += r.Processes.Errors
		aborts += r.Embedded.Aborts + r.Processes.Aborts
	}
	fmt.Printf("\nacknowledged writes read back: %d, lost: %d; commands retried on the other path: %d embedded, %d processes;\n",
		acked, lost, errs[0], errs[1])
	fmt.Printf("timed-out commands aborted before their retry: %d\n", aborts)
	if lost > 0 {
		return fmt.Errorf("%d acknowledged writes lost", lost)
	}
	return nil
}

// spread is the median [min-max] of f over the runs.
func spread(rs []lab.ClusterResult, f func(lab.ClusterResult) time.Duration) string {
	v := make([]time.Duration, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	r := func(d time.Duration) string {
		if d < 10*time.Millisecond {
			return fmt.Sprintf("%.2f ms", float64(d)/1e6)
		}
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	if len(v) == 1 {
		return r(v[0])
	}
	return fmt.Sprintf("%s [%s-%s]", r(v[len(v)/2]), r(v[0]), r(v[len(v)-1]))
}
