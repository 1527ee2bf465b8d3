package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// syncBuffer is a process's stderr, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func loopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildOut  []byte
)

// buildAluad builds the binary once for the tests that run it as processes.
func buildAluad(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "aluad-bin")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "aluad")
		buildOut, buildErr = exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
	})
	require.NoError(t, buildErr, "%s", buildOut)
	return builtBin
}

// Three `aluad witness` processes form an etcd cluster. Killing one
// (SIGKILL) leaves a quorum; with two gone nothing can be written; one
// restarted from its data directory brings the quorum back.
func TestWitnessProcesses(t *testing.T) {
	bin := buildAluad(t)
	type member struct {
		args []string
		cmd  *exec.Cmd
		log  *syncBuffer
	}
	var ms []*member
	var peers, clients []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("w%d", i)
		c, p := fmt.Sprintf("http://127.0.0.1:%d", loopbackPort(t)), fmt.Sprintf("http://127.0.0.1:%d", loopbackPort(t))
		peers, clients = append(peers, name+"="+p), append(clients, c)
		ms = append(ms, &member{args: []string{"witness", "--name", name, "--data", filepath.Join(t.TempDir(), name),
			"--client-url", c, "--peer-url", p}})
	}
	start := func(m *member) {
		m.log = &syncBuffer{}
		m.cmd = exec.Command(bin, append(m.args, "--cluster", strings.Join(peers, ","))...)
		m.cmd.Stderr = m.log
		require.NoError(t, m.cmd.Start())
	}
	kill := func(m *member) {
		m.cmd.Process.Signal(syscall.SIGKILL)
		m.cmd.Wait()
	}
	for _, m := range ms {
		start(m)
	}
	defer func() {
		for _, m := range ms {
			if m.cmd.ProcessState == nil {
				kill(m)
			}
		}
	}()
	cli, err := clientv3.New(clientv3.Config{Endpoints: clients, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer cli.Close()
	put := func(v string, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := cli.Put(ctx, "/aluad/test/k", v)
		return err
	}
	require.Eventually(t, func() bool { return put("0", 2*time.Second) == nil }, 60*time.Second, 200*time.Millisecond,
		"the three witnesses never formed a cluster: %s", ms[0].log)
	for _, m := range ms {
		require.Eventually(t, func() bool { return strings.Contains(m.log.String(), "witness serving") }, 10*time.Second,
			50*time.Millisecond, "%s", m.log)
	}

	kill(ms[2])
	// Two of three are a quorum: writes go on, after an election if the
	// killed member led (a write in flight then times out and is retried).
	require.Eventually(t, func() bool { return put("1", 2*time.Second) == nil }, 20*time.Second, 100*time.Millisecond,
		"two of three are a quorum")
	kill(ms[1])
	require.Error(t, put("2", 2*time.Second), "one of three is none")
	start(ms[1]) // from its data directory
	require.Eventually(t, func() bool { return put("3", 2*time.Second) == nil }, 60*time.Second, 200*time.Millisecond,
		"the quorum never came back: %s", ms[1].log)
	r, err := cli.Get(context.Background(), "/aluad/test/k")
	require.NoError(t, err)
	require.Equal(t, "3", string(r.Kvs[0].Value))
}

// Bad flags are clear errors, before anything listens.
func TestWitnessFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--client-url", "127.0.0.1:2379", "--data", t.TempDir()}, "want http://host:port"},
		{[]string{"--peer-url", "ftp://x", "--data", t.TempDir()}, "want http://host:port"},
		{[]string{"--name", "", "--data", t.TempDir()}, "needs a name"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		require.ErrorContains(t, witnessCmd(tt.args), tt.want, "%v", tt.args)
	}
}
