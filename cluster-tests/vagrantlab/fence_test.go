package vagrantlab

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fenceAgent runs the witness's fence agent (cluster-tests/vagrant/
// nfs-fence.sh) in a directory of its own, with nft, rpc.nfsd and logger
// stubbed to record their calls.
type fenceAgent struct {
	t           *testing.T
	root, calls string
	env         []string // more of the agent's environment
}

func newFenceAgent(t *testing.T) *fenceAgent {
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	for _, d := range []string{"bin", "etc/aluad", "proc/fs/nfsd"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/aluad/fence-nodes"), []byte("a 10.77.3.10\nb 10.77.3.20\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc/fs/nfsd/threads"), []byte("8\n"), 0o644))
	calls := filepath.Join(root, "calls")
	for _, stub := range []string{"nft", "rpc.nfsd", "logger"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, stub), []byte("#!/bin/sh\necho \""+stub+" $*\" >>"+calls+"\n"), 0o755))
	}
	return &fenceAgent{t: t, root: root, calls: calls}
}

// run runs the agent as sshd runs it (the request in
// SSH_ORIGINAL_COMMAND) and returns its exit status, its output and the
// stubbed commands it called.
func (f *fenceAgent) run(request string) (int, string, []string) {
	os.Remove(f.calls)
	cmd := exec.Command("sh", "../vagrant/nfs-fence.sh")
	cmd.Env = []string{"PATH=" + filepath.Join(f.root, "bin") + ":" + os.Getenv("PATH"), "ALUAD_FENCE_ROOT=" + f.root,
		"SSH_ORIGINAL_COMMAND=" + request}
	cmd.Env = append(cmd.Env, f.env...)
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(f.t, err)
	}
	b, _ := os.ReadFile(f.calls)
	var calls []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" && !strings.HasPrefix(l, "logger ") {
			calls = append(calls, l)
		}
	}
	return code, string(out), calls
}

// The fence agent's rules, one request after another on one witness: a
// fence cuts the node's address and restarts nfsd's threads as the
// barrier; the fenced boot is never unfenced; a new boot is; a late
// fence of a boot the node has left cuts nothing; and a request that
// is not one of its four is refused before it touches anything.
func TestFenceAgent(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatalf("flock (util-linux) is needed by the fence agent: %v", err)
	}
	const old, reboot = "0b6c2f7e-1111-4aaa-8bbb-000000000001", "0b6c2f7e-2222-4aaa-8bbb-000000000002"
	f := newFenceAgent(t)
	steps := []struct {
		name, request string
		code          int
		out           string
		calls         []string
	}{
		{"not fenced yet", "check a " + old, 0, "is not fenced", nil},
		{"fence", "fence a " + old, 0, "fenced node a (10.77.3.10, boot " + old + ")",
			[]string{"nft add element inet aluad_fence fenced { 10.77.3.10 }", "rpc.nfsd 0", "rpc.nfsd 8"}},
		{"the fenced boot checks fenced", "check a " + old, 3, "is fenced", nil},
		{"b is untouched", "check b " + old, 0, "is not fenced", nil},
		{"the fenced boot is not let in", "unfence a " + old, 1, "refused", nil},
		{"a new boot is", "unfence a " + reboot, 0, "unfenced node a",
			[]string{"nft delete element inet aluad_fence fenced { 10.77.3.10 }"}},
		{"the old boot's late fence cuts nothing", "fence a " + old, 0, "nothing to cut", nil},
		{"the new boot runs", "check a " + reboot, 0, "is not fenced", nil},
		{"status", "status", 0, "a unfenced, boot " + reboot, []string{"nft list set inet aluad_fence fenced"}},
		{"unknown node", "fence c " + old, 2, "unknown node", nil},
		{"injection", "fence a " + old + ";reboot", 2, "bad boot id", nil},
		{"a path for a node", "fence ../a " + old, 2, "bad node name", nil},
		{"unknown operation", "wipe a " + old, 2, "unknown operation", nil},
		{"too few words", "fence a", 2, "usage", nil},
	}
	for _, s := range steps {
		code, out, calls := f.run(s.request)
		require.Equal(t, s.code, code, "%s: %s", s.name, out)
		require.Contains(t, out, s.out, s.name)
		require.Equal(t, s.calls, calls, s.name)
	}
	rec, err := os.ReadFile(filepath.Join(f.root, "var/lib/aluad-fence/a.up"))
	require.NoError(t, err)
	require.Equal(t, reboot+"\n", string(rec))

	// Run by sshd, the agent takes no root from the environment: here it
	// then finds no node list of its own (/etc/aluad/fence-nodes is the
	// witness's) and refuses, having cut nothing.
	_, err = os.Stat("/etc/aluad/fence-nodes")
	require.True(t, os.IsNotExist(err), "this test assumes a machine that is not the lab's witness")
	f.env = []string{"SSH_CONNECTION=10.77.3.10 40000 10.77.3.30 22"}
	code, out, calls := f.run("fence a " + old)
	require.NotEqual(t, 0, code, out)
	require.Empty(t, calls)
}
