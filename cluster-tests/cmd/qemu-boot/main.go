// Command qemu-boot boots one lab guest and runs shell commands in it: a
// debugging aid for the QEMU lab (cluster-tests).
//
//	go run ./cluster-tests/cmd/qemu-boot 'uname -a' 'lsmod | grep dm_'
//	go run ./cluster-tests/cmd/qemu-boot --array --setup multipath-alua.conf 'multipath -ll'
//	go run ./cluster-tests/cmd/qemu-boot --release bullseye 'multipath -t | grep find_multipaths'
//
// --array runs aluad (2 nodes, 2 LUNs) in the lab namespace; --setup runs
// cluster-tests/guest/setup-client.sh with that multipath.conf, logging in.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/aluad/aluad/cluster-tests/qemulab"
)

var (
	withArray = flag.Bool("array", false, "run aluad in the lab namespace")
	setup     = flag.String("setup", "", "multipath conf (cluster-tests/guest/) to set the guest up with and log in")
	hostType  = flag.String("type", "linux", "host type the array is told for the guest")
	put       = flag.String("put", "", "a file (of cluster-tests/guest/) to copy to the guest's /run/lab/ before the commands")
	release   = flag.String("release", qemulab.DefaultRelease, "the guest's Debian release")
	arrays    = flag.Int("arrays", 1, "with --array: how many arrays, each at its default configuration (the second listens on port 3270 of the same addresses)")
)

func main() {
	flag.Parse()
	if err := run(flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "qemu-boot:", err)
		os.Exit(1)
	}
}

func run(cmds []string) error {
	ctx := context.Background()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	img, err := qemulab.BuildImage(ctx, "cluster-tests", "client", *release, logf)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "qemu-boot")
	if err != nil {
		return err
	}
	agent := filepath.Join(dir, "aluad-agent")
	b := exec.Command("go", "build", "-o", agent, "./cluster-tests/agent")
	b.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := b.CombinedOutput(); err != nil {
		return fmt.Errorf("build agent: %v %s", err, out)
	}
	initrd := filepath.Join(dir, "initrd.gz")
	if err := qemulab.BuildInitrd(img, agent, "/bin/busybox", initrd); err != nil {
		return err
	}
	n, err := qemulab.NewNet(2)
	if err != nil {
		return err
	}
	defer n.Close()
	const iqn = "iqn.2026-11.org.example:dbg"
	if *withArray {
		bin := filepath.Join(dir, "aluad")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/aluad").CombinedOutput(); err != nil {
			return fmt.Errorf("build aluad: %v %s", err, out)
		}
		for i := range *arrays {
			adir := dir
			if i > 0 {
				adir = filepath.Join(dir, fmt.Sprintf("array%d", i+1))
				if err := os.MkdirAll(adir, 0o755); err != nil {
					return err
				}
			}
			a, err := qemulab.StartArray(ctx, n, bin, adir, qemulab.ArraySpec{LUNs: 2, Capacity: 1000, Port: 3260 + 10*i, NoAPI: i > 0,
				FailbackWindow: 5 * time.Second, Hosts: []qemulab.HostDecl{{Name: "dbg", Type: *hostType, IQN: iqn}}})
			if err != nil {
				return err
			}
			defer a.Stop()
			logf("aluad %d running on port %d; control %s", i+1, 3260+10*i, filepath.Join(adir, "aluad.sock"))
		}
	}
	start := time.Now()
	vm, err := qemulab.StartVM(ctx, n, img, initrd, dir, qemulab.VMSpec{Name: "dbg", CPUs: 2, Mem: 1024})
	if err != nil {
		return err
	}
	defer vm.Kill()
	logf("booted in %v (console %s)", time.Since(start).Round(time.Millisecond), vm.Console)
	if *setup != "" {
		for _, f := range []string{"setup-client.sh", *setup} {
			b, err := os.ReadFile(filepath.Join("cluster-tests/guest", f))
			if err != nil {
				return err
			}
			if err := vm.Write(ctx, "/run/lab/"+f, b); err != nil {
				return err
			}
		}
		t := time.Now()
		out, err := vm.Sh(ctx, 3*time.Minute, fmt.Sprintf("sh /run/lab/setup-client.sh /run/lab/%s %s %s", *setup, iqn, qemulab.PortAddr(0, 0)))
		fmt.Print(out)
		if err != nil {
			return err
		}
		logf("set up in %v", time.Since(t).Round(time.Millisecond))
	}
	if *put != "" {
		b, err := os.ReadFile(filepath.Join("cluster-tests/guest", *put))
		if err != nil {
			return err
		}
		if err := vm.Write(ctx, "/run/lab/"+filepath.Base(*put), b); err != nil {
			return err
		}
	}
	for _, c := range cmds {
		out, err := vm.Sh(ctx, 5*time.Minute, c)
		fmt.Printf("$ %s\n%s", c, out)
		if err != nil {
			fmt.Println("error:", err)
		}
	}
	return nil
}
