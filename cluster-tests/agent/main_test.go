package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// handle runs what the lab asks: shell commands with their exit code and
// output, file writes, pings; a timeout kills the command; an unknown op
// is refused.
func TestHandle(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name    string
		req     Request
		rc      int
		out     string
		errPart string
	}{
		{"ping", Request{ID: 1, Op: "ping"}, 0, "", ""},
		{"shell output", Request{ID: 2, Cmd: "echo hello; echo oops >&2"}, 0, "hello\noops\n", ""},
		{"exit code", Request{ID: 3, Op: "sh", Cmd: "exit 7"}, 7, "", "exit status 7"},
		{"timeout", Request{ID: 4, Cmd: "sleep 5", TimeoutMS: 100}, -1, "", "killed"},
		{"write", Request{ID: 5, Op: "write", Path: filepath.Join(dir, "a/b.conf"), Data: []byte("x=1\n")}, 0, "", ""},
		{"write fails", Request{ID: 6, Op: "write", Path: "/proc/no/such/file", Data: []byte("x")}, 1, "", "no such file"},
		{"unknown op", Request{ID: 7, Op: "reboot"}, 2, "", `unknown op "reboot"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := handle(c.req)
			require.Equal(t, c.req.ID, rep.ID)
			require.Equal(t, c.rc, rep.RC)
			require.Equal(t, c.out, rep.Out)
			if c.errPart != "" {
				require.Contains(t, rep.Err, c.errPart)
			} else {
				require.Empty(t, rep.Err)
			}
		})
	}
	b, err := os.ReadFile(filepath.Join(dir, "a/b.conf"))
	require.NoError(t, err)
	require.Equal(t, "x=1\n", string(b))
}

func TestParseCmdline(t *testing.T) {
	got := parseCmdline("console=ttyS0 net.ifnames=0 aluad.name=c1 aluad.ip0=10.77.1.100/24 aluad.modules=a,b aluad.flag quiet\n")
	require.Equal(t, map[string]string{"name": "c1", "ip0": "10.77.1.100/24", "modules": "a,b"}, got)
	require.Empty(t, parseCmdline(""))
}

func TestSampler(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"sda", "sdb"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(dev string, r, w int) {
		s := fmt.Sprintf("%8d 0 0 0 %8d 0 0 0 0 0 0 0 0 0 0 0 0\n", r, w)
		if err := os.WriteFile(filepath.Join(dir, dev, "stat"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sda", 1, 2)
	write("sdb", 5, 0)
	out := filepath.Join(dir, "samples")
	if err := startSampler(filepath.Join(dir, "sd*", "stat"), out, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := startSampler(filepath.Join(dir, "sd*", "stat"), out, time.Millisecond); err == nil {
		t.Fatal("a second sampler started")
	}
	time.Sleep(20 * time.Millisecond)
	write("sda", 3, 2)
	time.Sleep(20 * time.Millisecond)
	n, err := stopSampler()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if n != 3 || len(lines) != 3 {
		t.Fatalf("want 3 lines (sda, sdb at first sight, sda again), got %d: %q", n, lines)
	}
	var last string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 5 || f[1] > f[0] {
			t.Fatalf("line %q: want NS PREV_NS DEV READS WRITES, PREV_NS before NS", l)
		}
		if f[2] == "sda" {
			last = f[3] + " " + f[4]
		}
	}
	if last != "3 2" {
		t.Fatalf("sda's last counts: %q", last)
	}
	if _, err := stopSampler(); err == nil {
		t.Fatal("stopped a sampler twice")
	}
}
