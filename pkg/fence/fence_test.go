package fence

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// child starts a process that sleeps, and its identity as it would
// publish it.
func child(t *testing.T) (*exec.Cmd, Identity) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	self, err := Self()
	require.NoError(t, err)
	start, err := startTime(cmd.Process.Pid)
	require.NoError(t, err)
	id := self
	id.PID, id.Start, id.Instance = cmd.Process.Pid, start, "child"
	return cmd, id
}

// exited reports whether the process has exited (a zombie its parent,
// the test, has not reaped yet).
func exited(t *testing.T, cmd *exec.Cmd) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
	require.NoError(t, err)
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return f[0] == "Z"
}

// A process paused with SIGSTOP (a frozen controller) is killed and has
// exited when Fence returns; again is nothing.
func TestProcessFencesAPausedProcess(t *testing.T) {
	cmd, id := child(t)
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	self, err := Self()
	require.NoError(t, err)
	p := NewProcess(self)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.False(t, exited(t, cmd))
	require.NoError(t, p.Fence(ctx, "a", id))
	require.True(t, exited(t, cmd), "the process has exited when Fence returns")
	err = cmd.Wait()
	require.Error(t, err)
	require.Equal(t, syscall.SIGKILL, err.(*exec.ExitError).Sys().(syscall.WaitStatus).Signal())
	require.NoError(t, p.Fence(ctx, "a", id), "a process gone is fenced")
}

// The identities Process refuses or treats as gone.
func TestProcessIdentities(t *testing.T) {
	self, err := Self()
	require.NoError(t, err)
	const machine = "0123456789abcdef0123456789abcdef"
	self.Machine = machine // (whatever this machine's /etc/machine-id holds)
	p := NewProcess(self)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		edit  func(*Identity)
		err   string // "" fenced
		alive bool   // the child still runs afterwards
	}{
		{"another machine", func(id *Identity) { id.Machine, id.BootID = "fedcba9876543210fedcba9876543210", "other" }, "another machine", true},
		{"a clone: its machine id, another host", func(id *Identity) { id.Host, id.BootID = "clone", "other" }, "another machine", true},
		{"another boot, no machine id", func(id *Identity) { id.Machine, id.BootID = "", "other" }, "another machine", true},
		{"another boot, an image's machine id", func(id *Identity) { id.Machine, id.BootID = "uninitialized", "other" }, "another machine", true},
		{"another PID namespace", func(id *Identity) { id.PIDNS = "pid:[1]" }, "another PID namespace", true},
		// (the child stands for a process of the earlier boot, which
		// cannot exist: it is not signalled)
		{"this machine's earlier boot", func(id *Identity) { id.BootID = "earlier" }, "", true},
		{"no process published", func(id *Identity) { id.PID = 0 }, "published no process", true},
		{"its PID reused", func(id *Identity) { id.Start-- }, "", true},
		{"this process", func(id *Identity) { *id = self }, "this very process", true},
		{"the incarnation", func(*Identity) {}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, id := child(t)
			id.Machine = machine
			tc.edit(&id)
			err := p.Fence(ctx, "a", id)
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
			time.Sleep(10 * time.Millisecond)
			require.Equal(t, !tc.alive, exited(t, cmd))
		})
	}
}

// A fence command gets the node, host and PID in its arguments and
// environment; a non-zero exit is a failed fence, with its output.
func TestCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "fenced")
	ok := &Command{Argv: []string{"sh", "-c", `echo "{node} $ALUAD_FENCE_NODE $ALUAD_FENCE_HOST {machine} $ALUAD_FENCE_BOOT_ID" > ` + out}}
	require.NoError(t, ok.Fence(context.Background(), "a", Identity{Host: "ctl1", Machine: "m1", BootID: "b1", PID: 42}))
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "a a ctl1 m1 b1\n", string(b))

	bad := &Command{Argv: []string{"sh", "-c", "echo power off failed >&2; exit 3"}}
	require.ErrorContains(t, bad.Fence(context.Background(), "a", Identity{}), "power off failed")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.Error(t, (&Command{Argv: []string{"sleep", "10"}}).Fence(ctx, "a", Identity{}), "bounded by its context")
	require.ErrorContains(t, (&Command{}).Fence(context.Background(), "a", Identity{}), "no fence command")
}

func TestParseStart(t *testing.T) {
	for _, tc := range []struct {
		line string
		want uint64
		err  bool
	}{
		{"1234 (aluad) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 9 0 4242 1000 10", 4242, false},
		{"1234 (a) b) (c) R 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0", 77, false},
		{"1234 aluad S 1", 0, true},
		{"1234 (aluad) S 1 2 3", 0, true},
		{"1234 (aluad) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 9 0 x 1000", 0, true},
	} {
		got, err := parseStart(1, []byte(tc.line))
		if tc.err {
			require.Error(t, err, tc.line)
			continue
		}
		require.NoError(t, err, tc.line)
		require.Equal(t, tc.want, got)
	}
}

func FuzzParseStart(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 5 1000 10"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStart(1, b) // never panics
	})
}

// Which processes this machine's pidfd fencer takes on, so that a fence
// agent never acts on the machine it runs on and still fences what the
// pidfd cannot reach.
func TestReaches(t *testing.T) {
	self := Identity{Host: "h1", Machine: "0123456789abcdef0123456789abcdef", BootID: "b1", PIDNS: "pid:[1]", PID: 10}
	p := NewProcess(self)
	for _, tc := range []struct {
		name string
		id   Identity
		want bool
	}{
		{"this boot, this PID namespace", Identity{Host: "h1", Machine: self.Machine, BootID: "b1", PIDNS: "pid:[1]"}, true},
		{"this boot, a container's PID namespace", Identity{Host: "h1", Machine: self.Machine, BootID: "b1", PIDNS: "pid:[2]"}, false},
		{"this machine's earlier boot", Identity{Host: "h1", Machine: self.Machine, BootID: "b0", PIDNS: "pid:[1]"}, true},
		{"a clone", Identity{Host: "h2", Machine: self.Machine, BootID: "b9", PIDNS: "pid:[1]"}, false},
		{"another machine", Identity{Host: "h2", Machine: "fedcba9876543210fedcba9876543210", BootID: "b9"}, false},
	} {
		require.Equal(t, tc.want, p.Reaches(tc.id), tc.name)
	}
}
