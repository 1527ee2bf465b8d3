// Command aluad-agent is PID 1 of a QEMU lab guest (cluster-tests). The
// small initrd mounts the Debian root and switch_roots into it; the agent
// then mounts the kernel file systems, names the guest and brings up its
// lab network from the kernel command line (aluad.name=, aluad.ip0=,
// aluad.ip1=, ...), and serves the lab orchestrator on the virtio-serial
// port named "agent": one JSON request per line, one JSON reply per line,
// requests run concurrently. It is the only code of the project that runs
// inside a guest; everything a scenario does is a command the host sends.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aluad/aluad/cluster-tests/agentproto"
)

// Request and Reply are the lab's wire protocol.
type (
	Request = agentproto.Request
	Reply   = agentproto.Reply
)

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "aluad-agent: "+format+"\n", a...)
}

func mounts() {
	for _, m := range []struct{ src, dst, fs, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"devpts", "/dev/pts", "devpts", ""},
		{"tmpfs", "/tmp", "tmpfs", ""},
		{"tmpfs", "/dev/shm", "tmpfs", ""},
		{"configfs", "/sys/kernel/config", "configfs", ""},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := syscall.Mount(m.src, m.dst, m.fs, 0, m.data); err != nil && err != syscall.EBUSY {
			logf("mount %s: %v", m.dst, err)
		}
	}
	_ = os.MkdirAll("/run/lock/iscsi", 0o755) // iscsid needs it
}

// cmdline returns the aluad.* parameters of the kernel command line.
func cmdline() map[string]string {
	b, _ := os.ReadFile("/proc/cmdline")
	return parseCmdline(string(b))
}

// parseCmdline returns the aluad.* parameters of a kernel command line,
// without the prefix.
func parseCmdline(line string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "aluad.") {
			out[strings.TrimPrefix(k, "aluad.")] = v
		}
	}
	return out
}

func run(name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		logf("%s %s: %v %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

func network(p map[string]string) {
	run("ip", "link", "set", "lo", "up")
	for i := 0; i < 8; i++ {
		addr, ok := p[fmt.Sprintf("ip%d", i)]
		if !ok {
			continue
		}
		dev := fmt.Sprintf("eth%d", i)
		run("ip", "addr", "add", addr, "dev", dev)
		run("ip", "link", "set", dev, "up")
	}
}

// port finds the virtio-serial port named "agent".
func port() (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
		for _, n := range names {
			b, _ := os.ReadFile(n)
			if strings.TrimSpace(string(b)) == "agent" {
				return "/dev/" + filepath.Base(filepath.Dir(n)), nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("no virtio-serial port named agent")
}

func handle(r Request) Reply {
	start := time.Now()
	rep := Reply{ID: r.ID}
	switch r.Op {
	case "ping":
	case "clock":
		rep.Out = strconv.FormatInt(time.Now().UnixNano(), 10)
	case "sample":
		// Cmd is the globs (space-separated), Path the output file,
		// TimeoutMS the interval.
		every := time.Duration(max(r.TimeoutMS, 1)) * time.Millisecond
		glob := r.Cmd
		if glob == "" {
			glob = "/sys/block/sd*/stat /sys/block/dm-*/stat"
		}
		if err := startSampler(glob, r.Path, every); err != nil {
			rep.RC, rep.Err = 1, err.Error()
		}
	case "sample-stop":
		n, err := stopSampler()
		rep.Out = strconv.Itoa(n)
		if err != nil {
			rep.RC, rep.Err = 1, err.Error()
		}
	case "write":
		if err := os.MkdirAll(filepath.Dir(r.Path), 0o755); err != nil {
			rep.RC, rep.Err = 1, err.Error()
		} else if err := os.WriteFile(r.Path, r.Data, 0o644); err != nil {
			rep.RC, rep.Err = 1, err.Error()
		}
	case "", "sh":
		ctx := context.Background()
		if r.TimeoutMS > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(r.TimeoutMS)*time.Millisecond)
			defer cancel()
		}
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", r.Cmd)
		// A timeout kills the whole process group, and the output is
		// given up on shortly after, even if a child still holds it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "TERM=dumb")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		children.Lock()
		err := cmd.Start()
		if err == nil {
			children.pids[cmd.Process.Pid] = true
		}
		children.Unlock()
		if err == nil {
			err = cmd.Wait()
			children.Lock()
			delete(children.pids, cmd.Process.Pid)
			children.Unlock()
		}
		rep.Out = out.String()
		if err != nil {
			rep.RC, rep.Err = 1, err.Error()
			if ee, ok := err.(*exec.ExitError); ok {
				rep.RC = ee.ExitCode()
			}
		}
	default:
		rep.RC, rep.Err = 2, fmt.Sprintf("unknown op %q", r.Op)
	}
	rep.MS = time.Since(start).Milliseconds()
	return rep
}

func serve(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	enc := json.NewEncoder(f)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var r Request
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			mu.Lock()
			_ = enc.Encode(Reply{ID: -1, RC: 2, Err: "bad request: " + err.Error()})
			mu.Unlock()
			continue
		}
		go func() {
			rep := handle(r)
			mu.Lock()
			defer mu.Unlock()
			if err := enc.Encode(rep); err != nil {
				logf("reply %d: %v", r.ID, err)
			}
		}()
	}
	return sc.Err()
}

// children are the processes handle started and waits for itself.
var children = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// reap collects orphans re-parented to PID 1 that no exec.Cmd waits for.
// It polls /proc for zombies whose parent is PID 1 and skips the children
// handle tracks (Start and registration happen under the same lock).
func reap() {
	for range time.Tick(5 * time.Second) {
		children.Lock()
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || i+4 >= len(s) || s[i+2] != 'Z' {
				continue
			}
			f := strings.Fields(s[i+2:])
			var pid int
			fmt.Sscan(e.Name(), &pid)
			if len(f) > 1 && f[1] == "1" && !children.pids[pid] {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			}
		}
		children.Unlock()
	}
}

func main() {
	if os.Getpid() == 1 {
		mounts()
		p := cmdline()
		if n := p["name"]; n != "" {
			_ = syscall.Sethostname([]byte(n))
		}
		for _, m := range strings.Split(p["modules"], ",") {
			if m != "" {
				run("modprobe", m)
			}
		}
		network(p)
		go reap()
	}
	path, err := port()
	if err != nil {
		logf("%v", err)
		select {}
	}
	logf("serving on %s", path)
	for {
		if err := serve(path); err != nil {
			logf("serve: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
