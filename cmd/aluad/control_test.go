package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
)

// The client subcommands against a running daemon's control socket: what
// works, and the message each mistake gets.
func TestClientCommands(t *testing.T) {
	cfg := config.Loopback(t.TempDir(), 1<<20)
	ctl := filepath.Join(cfg.Data, "aluad.sock")
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Control: ctl, StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(time.Second)

	require.NoError(t, move([]string{"--control", ctl, "--lun", "0", "--to", "b"}))
	require.Equal(t, "b", d.Array.LUN(0).Owner().Name)
	require.NoError(t, move([]string{"--data", cfg.Data, "--lun", "0", "--to", "a"}), "--data finds <data>/aluad.sock")
	out, err := capture(t, func() error { return move([]string{"--control", ctl, "--lun", "1", "--to", "a", "-o", "json"}) })
	require.NoError(t, err)
	var ch api.ChangeInfo
	require.NoError(t, json.Unmarshal([]byte(out), &ch), "move -o json: %s", out)
	require.Equal(t, []uint64{1}, ch.LUNs)
	require.Equal(t, "a", ch.To)
	out, err = capture(t, func() error { return fault([]string{"port-down", "--port", "b1", "--control", ctl, "-o", "json"}) })
	require.NoError(t, err)
	var fr api.FaultResult
	require.NoError(t, json.Unmarshal([]byte(out), &fr), "fault -o json: %s", out)
	_, err = capture(t, func() error { return fault([]string{"port-up", "--port", "b1", "--control", ctl}) })
	require.NoError(t, err)
	require.Equal(t, "a", d.Array.LUN(0).Owner().Name)
	require.NoError(t, luns([]string{"--control", ctl}))
	require.NoError(t, luns([]string{"--control", ctl, "--json"}))
	require.NoError(t, events([]string{"--control", ctl}))
	require.NoError(t, report([]string{"--control", ctl}))
	require.NoError(t, report([]string{"--control", ctl, "-o", "json"}))
	require.ErrorContains(t, report([]string{"--control", ctl, "-o", "yaml"}), `-o "yaml": want text or json`)
	require.ErrorContains(t, report([]string{"--control", ctl, "now"}), `unexpected argument "now"`)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no flags", []string{"--control", ctl}, "usage: aluad move --lun N --to NODE"},
		{"already there", []string{"--control", ctl, "--lun", "0", "--to", "a"}, "already owned by node a"},
		{"no such LUN", []string{"--control", ctl, "--lun", "99", "--to", "a"}, "no LUN 99"},
		{"no such node", []string{"--control", ctl, "--lun", "0", "--to", "c"}, `no node "c"`},
		{"stray argument", []string{"--control", ctl, "--lun", "0", "--to", "b", "extra"}, `unexpected argument "extra"`},
		{"no daemon", []string{"--control", filepath.Join(t.TempDir(), "none.sock"), "--lun", "0", "--to", "b"},
			"no aluad answering"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, move(tc.args), tc.want)
		})
	}
}

func TestFaultAndLabCommands(t *testing.T) {
	cfg := config.Loopback(t.TempDir(), 1<<20)
	ctl := filepath.Join(cfg.Data, "aluad.sock")
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Control: ctl})
	require.NoError(t, err)
	defer d.Stop(time.Second)
	require.NoError(t, fault([]string{"port-down", "--control", ctl, "--port", "a0"}))
	require.NoError(t, fault([]string{"clear", "--control", ctl}))
	require.NoError(t, fault([]string{"crash", "--control", ctl, "--node", "b"}))
	require.False(t, d.Array.Node("b").Up())
	require.NoError(t, fault([]string{"restart", "--control", ctl, "--node", "b"}))
	require.True(t, d.Array.Node("b").Up())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: aluad fault KIND"},
		{[]string{"--node", "a"}, "usage: aluad fault KIND"},
		{[]string{"melt", "--control", ctl}, "unknown fault"},
		{[]string{"crash", "--control", ctl, "--node", "q"}, `no node "q"`},
		{[]string{"delay", "--control", ctl, "--port", "a0", "--delay", "soon"}, "invalid value"},
	} {
		require.ErrorContains(t, fault(tc.args), tc.want, "%v", tc.args)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("hots h1 linux-dmmp\n"), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--repeat", "0"}, "--repeat must be from 1 to 20"},
		{[]string{"--file", filepath.Join(t.TempDir(), "none.txt")}, "no such file"},
		{[]string{"--file", bad}, "scenario: line 1: unknown directive"},
		{[]string{"--scenario", "default", "--file", bad}, "not both"},
		{[]string{"--scenario", "moon"}, `unknown scenario "moon"`},
		{[]string{"--scenario", "crash", "--mirror", "maybe"}, "--mirror must be on, off or both"},
		{[]string{"--scenario", "crash", "--iterations", "0"}, "must be positive"},
	} {
		require.ErrorContains(t, labCmd(tc.args), tc.want, "%v", tc.args)
	}
}

// A client given no --control, --data or --api finds a local daemon by
// itself: the default data directory's socket, the link 'aluad serve'
// leaves in the runtime directory, then the default API address; with
// none answering it says everywhere it looked.
func TestFindLocal(t *testing.T) {
	cfg := config.Loopback(t.TempDir(), 1<<20)
	ctl := filepath.Join(cfg.Data, "aluad.sock")
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Control: ctl, API: "127.0.0.1:0", StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(time.Second)
	dead := filepath.Join(t.TempDir(), "dead.sock")
	deadAPI := "http://127.0.0.1:1"
	noToken := func() (string, error) { return "", nil }
	tests := []struct {
		name     string
		l        local
		wantPath string // the client's socket or base URL; "" for an error
	}{
		{"the first socket answers", local{[]string{ctl, dead}, deadAPI, noToken}, ctl},
		{"the second socket answers", local{[]string{dead, ctl}, deadAPI, noToken}, ctl},
		{"no socket: the API", local{[]string{dead}, "http://" + d.APIAddr(), noToken}, "http://" + d.APIAddr()},
		{"nothing answers", local{[]string{dead}, deadAPI, noToken}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := findLocal(tc.l)
			if tc.wantPath == "" {
				require.ErrorContains(t, err, "no aluad answering on "+dead+", "+deadAPI)
				return
			}
			require.NoError(t, err)
			st, err := c.Status()
			require.NoError(t, err)
			require.Len(t, st.Nodes, 2)
		})
	}

	// End to end: serve's link in the runtime directory, a client run
	// from another directory with no flags.
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Chdir(t.TempDir())
	unpublish := publishLocal(ctl)
	dst, err := os.Readlink(localLink())
	require.NoError(t, err)
	require.Equal(t, ctl, dst)
	c, err := findLocal(local{[]string{defaultControl(""), localLink()}, deadAPI, noToken})
	require.NoError(t, err, "found through the link")
	_, err = c.Status()
	require.NoError(t, err)
	require.NoError(t, status(nil), "the status command with no flags")
	unpublish()
	_, err = os.Lstat(localLink())
	require.True(t, os.IsNotExist(err), "the link goes with the daemon")
}
