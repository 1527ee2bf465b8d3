package qemulab

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// Target is the iSCSI target name aluad serves in the lab.
const Target = "iqn.2026-11.org.aluad:lab"

// HostDecl is a host declared to the array.
type HostDecl struct {
	Name, Type, IQN string
}

// ArraySpec shapes the lab's aluad.
type ArraySpec struct {
	LUNs  int
	Hosts []HostDecl
	// Capacity is the core's node capacity in work units per 100 ms tick.
	Capacity float64
	// FailbackWindow: how long a repaired path must stay up before failback.
	FailbackWindow time.Duration
	// Port is the TCP port every portal listens on (default 3260): a
	// second array in the same lab listens on the same addresses.
	Port int
	// NoAPI runs it without the management API (a second array: the
	// first has the API's port).
	NoAPI bool
}

// Array is a running aluad process in the lab namespace.
type Array struct {
	Dir    string
	Client *api.Client
	cmd    *exec.Cmd
	done   chan error
	// guest runs aluad (the TCMU lab's storage guest) instead of cmd.
	guest *VM
	// ClockOffset is aluad's clock minus the lab's (0 on the host).
	ClockOffset time.Duration
}

// Config renders aluad's YAML for the lab: two nodes with a port on each
// fabric, LUN i preferred by node i%2, RAM media (the lab measures the
// host stacks, not disks).
func (s ArraySpec) Config(dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "target: %s\ndata: %s\nalua: implicit\ntransition_time: 10s\n", Target, filepath.Join(dir, "data"))
	fmt.Fprintf(&b, "cache: {mode: write-back, size: 64MiB, dirty_limit: 16MiB, mirror: true, destage_interval: 100ms}\n")
	fmt.Fprintf(&b, "ownership:\n  tick: 100ms\n  failback_window: %s\n  failback_cooldown: %s\n  discovery_window: 30s\n  cooldown: 5s\n  plan_interval: 1s\n  ship_window: 60s\n  node_capacity: %g\n",
		s.FailbackWindow, s.FailbackWindow, s.Capacity)
	if len(s.Hosts) > 0 {
		b.WriteString("hosts:\n")
		for _, h := range s.Hosts {
			fmt.Fprintf(&b, "  - {name: %s, type: %s, initiators: [%q]}\n", h.Name, h.Type, h.IQN)
		}
	}
	b.WriteString("nodes:\n")
	for node, name := range []string{"a", "b"} {
		fmt.Fprintf(&b, "  - name: %s\n    ports:\n", name)
		for f := range Fabrics {
			fmt.Fprintf(&b, "      - {name: %s%d, addr: \"%s:%d\"}\n", name, f, PortAddr(node, f), cmp.Or(s.Port, 3260))
		}
	}
	b.WriteString("luns:\n")
	for i := 0; i < s.LUNs; i++ {
		fmt.Fprintf(&b, "  - {id: %d, size: 256MiB, preferred: %c, media: ram}\n", i, 'a'+i%2)
	}
	return b.String()
}

// StartArray runs `aluad serve` (the binary bin) in the lab namespace.
func StartArray(ctx context.Context, n *Net, bin, dir string, s ArraySpec) (*Array, error) {
	cfg := filepath.Join(dir, "aluad.yaml")
	if err := os.WriteFile(cfg, []byte(s.Config(dir)), 0o644); err != nil {
		return nil, err
	}
	ctl := filepath.Join(dir, "aluad.sock")
	args := []string{"serve", "--config", cfg, "--control", ctl, "--stats-interval", "1s"}
	if s.NoAPI {
		args = append(args, "--api", "off")
	}
	cmd := n.Exec(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "aluad.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &Array{Dir: dir, Client: api.NewClient(ctl), cmd: cmd, done: make(chan error, 1)}
	go func() { a.done <- cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := a.Client.LUNs(); err == nil {
			return a, nil
		}
		select {
		case err := <-a.done:
			return nil, fmt.Errorf("aluad exited: %v: %s", err, tail(filepath.Join(dir, "aluad.log"), 10))
		case <-ctx.Done():
			a.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.Stop()
			return nil, fmt.Errorf("aluad did not answer on %s", ctl)
		}
	}
}

// Stop stops aluad (SIGTERM: it flushes and exits).
func (a *Array) Stop() {
	if a.guest != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		_, _ = a.guest.Sh(ctx, 25*time.Second, "pid=$(pidof aluad-tcmu) && kill -TERM $pid && while kill -0 $pid 2>/dev/null; do sleep 0.2; done")
		a.GuestLog(ctx)
		a.guest.Kill()
		return
	}
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	_ = a.cmd.Process.Signal(os.Interrupt)
	select {
	case <-a.done:
	case <-time.After(15 * time.Second):
		_ = a.cmd.Process.Kill()
	}
}
