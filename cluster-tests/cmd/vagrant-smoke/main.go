// Command vagrant-smoke runs the Vagrant lab's smoke test against the
// machines vagrant up brought up (make vagrant-smoke; docs/vagrant.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/aluad/aluad/cluster-tests/vagrantlab"
)

func main() {
	o := vagrantlab.Options{}
	flag.StringVar(&o.Dir, "dir", ".", "the Vagrantfile's directory")
	flag.StringVar(&o.Out, "out", "results/vagrant-smoke", "where results.json and results.md go")
	flag.DurationVar(&o.Ready, "ready", 10*time.Minute, "how long the clients may take to show their multipath maps")
	flag.DurationVar(&o.Follow, "follow", 90*time.Second, "how long a move or a failover may take to be followed by every client")
	flag.DurationVar(&o.Restart, "restart", 6*time.Minute, "how long a controller VM may take to boot and get its LUNs back")
	flag.DurationVar(&o.Failback, "failback", 75*time.Second, "with a client that does not follow, how long LUN 0's owner is watched after every client reaches the restarted controller (past the failback window, 30 s, and failback_after, 10 s)")
	flag.DurationVar(&o.Settle, "settle", 5*time.Second, "quiet time after each step")
	flag.BoolVar(&o.Destroy, "destroy", false, "vagrant destroy -f at the end, and check that no domain, network or volume of the lab is left")
	flag.Parse()
	start := time.Now()
	o.Log = func(format string, args ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := vagrantlab.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vagrant-smoke:", err)
		os.Exit(1)
	}
	fmt.Print(res.Markdown())
	if len(res.Failures) > 0 {
		os.Exit(1)
	}
}
