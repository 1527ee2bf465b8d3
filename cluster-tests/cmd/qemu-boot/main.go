// Command qemu-boot boots one lab guest and runs shell commands in it: a
// debugging aid for the QEMU lab (cluster-tests).
//
//	go run ./cluster-tests/cmd/qemu-boot 'uname -a' 'lsmod | grep dm_'
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/aluad/aluad/cluster-tests/qemulab"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "qemu-boot:", err)
		os.Exit(1)
	}
}

func run(cmds []string) error {
	ctx := context.Background()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	img, err := qemulab.BuildImage(ctx, "cluster-tests", "client", logf)
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
	start := time.Now()
	vm, err := qemulab.StartVM(ctx, n, img, initrd, dir, qemulab.VMSpec{Name: "dbg", CPUs: 2, Mem: 1024})
	if err != nil {
		return err
	}
	defer vm.Kill()
	logf("booted in %v (console %s)", time.Since(start).Round(time.Millisecond), vm.Console)
	for _, c := range cmds {
		out, err := vm.Sh(ctx, 5*time.Minute, c)
		fmt.Printf("$ %s\n%s", c, out)
		if err != nil {
			fmt.Println("error:", err)
		}
	}
	return nil
}
