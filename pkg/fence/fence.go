// Package fence owns STONITH for controllers as processes: the identity
// a controller process publishes when it joins the cluster, and the
// fencers that make sure the process behind such an identity can never
// write again before a survivor serves what it owned.
//
// A lease that expired says the owner stopped renewing it, not that it
// stopped writing: a process paused with SIGSTOP, a frozen VM or a write
// stuck in a slow file system wakes up later with a write it checked
// before its lease ran out. So a survivor fences the old incarnation
// first, as Pacemaker's STONITH does, and only then takes its LUNs:
//
//   - Process (one machine): SIGKILL through a pidfd (pidfd_open(2)), so a
//     PID reused by another process is never signalled, then a wait until
//     the process has exited. A process exits only once every thread has
//     left the kernel, so a write it had under way has landed by then, and
//     the survivor's writes come after it. A stopped process dies on
//     SIGKILL without running again.
//   - Command (several machines): a fence agent the user configures
//     (fence_virsh, an IPMI agent, a script that holds the partner in
//     reset); exit status 0 means fenced.
//   - None: the user's explicit choice to run without fencing, where no
//     process or machine can be fenced; a paused owner may then write
//     over a survivor's newer data.
package fence

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Identity is one controller process: where it runs and which process it
// is. Instance tells two incarnations apart even in one process (tests).
type Identity struct {
	Host string `json:"host"`
	// Machine is /etc/machine-id: the same machine booted again has a
	// new BootID, and none of its earlier processes.
	Machine  string `json:"machine"`
	BootID   string `json:"boot_id"`
	PIDNS    string `json:"pid_ns"`
	PID      int    `json:"pid"`
	Start    uint64 `json:"start"` // clock ticks after boot (proc(5): stat, field 22)
	Instance string `json:"instance"`
}

func (id Identity) String() string {
	return fmt.Sprintf("pid %d on %s", id.PID, id.Host)
}

// Self is the identity of this process, with a new instance.
func Self() (Identity, error) {
	host, _ := os.Hostname()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return Identity{}, fmt.Errorf("fence: the machine's boot id: %w", err)
	}
	machine, _ := os.ReadFile("/etc/machine-id") // (none: a different boot is another machine)
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return Identity{}, fmt.Errorf("fence: the PID namespace: %w", err)
	}
	pid := os.Getpid()
	start, err := startTime(pid)
	if err != nil {
		return Identity{}, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	return Identity{Host: host, Machine: strings.TrimSpace(string(machine)), BootID: strings.TrimSpace(string(boot)), PIDNS: ns,
		PID: pid, Start: start, Instance: hex.EncodeToString(nonce[:])}, nil
}

// errGone is a process that no longer exists.
var errGone = errors.New("fence: no such process")

// startTime reads a process's start time from /proc.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return 0, errGone
	}
	if err != nil {
		return 0, fmt.Errorf("fence: %w", err)
	}
	return parseStart(pid, b)
}

// parseStart reads field 22 of a /proc/PID/stat line.
func parseStart(pid int, b []byte) (uint64, error) {
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses of its own.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("fence: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 { // field 3 is f[0]; field 22 is f[19]
		return 0, fmt.Errorf("fence: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence: /proc/%d/stat: start time: %w", pid, err)
	}
	return v, nil
}

// Fencer makes sure the process behind an identity never writes again.
type Fencer interface {
	// Fence returns nil once the process of node's incarnation id can
	// no longer write, or says why it could not make sure of it.
	Fence(ctx context.Context, node string, id Identity) error
	// Method names the method, for logs and the status.
	Method() string
}

// Process fences processes on this machine.
type Process struct {
	self Identity
}

// NewProcess is the fencer of processes on the machine self runs on.
func NewProcess(self Identity) *Process { return &Process{self: self} }

// Method is "process".
func (p *Process) Method() string { return "process" }

// Here reports whether id ran on this machine: the same boot, or the
// same machine id and host name (a boot since included). A machine id
// that is missing or malformed on either side ("uninitialized", an
// image's) proves nothing, and clones share theirs: then only the same
// boot counts.
func (p *Process) Here(id Identity) bool {
	if id.BootID == p.self.BootID {
		return true
	}
	return validMachine(id.Machine) && id.Machine == p.self.Machine && id.Host == p.self.Host
}

// validMachine reports whether s looks like a machine id (machine-id(5):
// 32 lower-case hex digits).
func validMachine(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Reaches reports whether this fencer can fence id: a process of this
// boot in this PID namespace, or one of this machine's earlier boot.
func (p *Process) Reaches(id Identity) bool {
	return p.Here(id) && (id.BootID != p.self.BootID || id.PIDNS == p.self.PIDNS)
}

// Fence kills the process with SIGKILL through a pidfd and waits until it
// has exited. A process of this machine's earlier boot is gone already.
func (p *Process) Fence(ctx context.Context, node string, id Identity) error {
	switch {
	case id.PID <= 0:
		return fmt.Errorf("fence: node %s published no process to fence", node)
	case !p.Here(id):
		return fmt.Errorf("fence: node %s ran as %v, on another machine: "+
			"process fencing cannot reach it (set cluster.fence_command)", node, id)
	case id.BootID != p.self.BootID:
		return nil // this machine booted since: every process of then is gone
	case id.PIDNS != p.self.PIDNS:
		return fmt.Errorf("fence: node %s ran as %v, in another PID namespace of this machine: "+
			"process fencing cannot reach it (run the controllers in one PID namespace, or set cluster.fence_command)", node, id)
	}
	fd, err := unix.PidfdOpen(id.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // gone, and its PID not taken yet
	}
	if err != nil {
		return fmt.Errorf("fence: node %s (%v): pidfd_open: %w", node, id, err)
	}
	defer unix.Close(fd)
	// The pidfd holds the process: if it still started when the record
	// says, it is the incarnation; otherwise the PID was reused and the
	// incarnation is gone. Whether it lives is the pidfd's to say: a
	// /proc that hides it (hidepid) is no proof it is gone.
	start, err := startTime(id.PID)
	if err == nil && start != id.Start {
		return nil
	}
	if err != nil {
		if errors.Is(unix.PidfdSendSignal(fd, 0, nil, 0), unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("fence: node %s (%v): its start time cannot be read, so it cannot be told from another "+
			"process with its PID: %w", node, id, err)
	}
	if id.PID == p.self.PID {
		return fmt.Errorf("fence: node %s ran in this very process (%v): not killing it", node, id)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("fence: node %s (%v): SIGKILL: %w", node, id, err)
	}
	// The pidfd becomes readable once the whole process has exited.
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 50)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("fence: node %s (%v): waiting for its exit: %w", node, id, err)
		}
		if n > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("fence: node %s (%v) killed but not exited yet (a write stuck in the kernel?): %w",
				node, id, ctx.Err())
		}
	}
}

// Command fences with a fence agent: Argv[0] run with Argv[1:], each
// "{node}", "{host}", "{machine}" and "{boot_id}" replaced, and the same
// in the environment as ALUAD_FENCE_NODE, ALUAD_FENCE_HOST,
// ALUAD_FENCE_MACHINE and ALUAD_FENCE_BOOT_ID. Exit status 0 means the
// node's machine is fenced: powered off, held in reset, or cut from the
// storage. Killing the process alone is not enough on a shared file
// system, whose client may still flush what the process wrote.
type Command struct {
	Argv []string
}

// Method is "command".
func (c *Command) Method() string { return "command" }

// Fence runs the agent and waits for it (bounded by ctx).
func (c *Command) Fence(ctx context.Context, node string, id Identity) error {
	if len(c.Argv) == 0 {
		return errors.New("fence: no fence command")
	}
	r := strings.NewReplacer("{node}", node, "{host}", id.Host, "{machine}", id.Machine, "{boot_id}", id.BootID)
	argv := make([]string, len(c.Argv))
	for i, a := range c.Argv {
		argv[i] = r.Replace(a)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "ALUAD_FENCE_NODE="+node, "ALUAD_FENCE_HOST="+id.Host,
		"ALUAD_FENCE_MACHINE="+id.Machine, "ALUAD_FENCE_BOOT_ID="+id.BootID)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 200 {
			msg = "..." + msg[len(msg)-200:]
		}
		return fmt.Errorf("fence: %s for node %s: %w: %s", argv[0], node, err, msg)
	}
	return nil
}

// None fences nothing: the user said so.
type None struct{}

// Method is "none".
func (None) Method() string { return "none" }

// Fence returns at once.
func (None) Fence(context.Context, string, Identity) error { return nil }
