package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/state"
)

// dirState is every path under dir with its mode, size and content hash
// ("absent" when dir does not exist).
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			v += fmt.Sprintf(" %d %s mtime %d", fi.Size(), hex.EncodeToString(h[:8]), fi.ModTime().UnixNano())
		}
		out[p] = v
		return nil
	})
	if os.IsNotExist(err) {
		return map[string]string{dir: "absent"}
	}
	require.NoError(t, err)
	return out
}

// settled is dirState once two looks 200 ms apart agree.
func settled(t *testing.T, dir string) map[string]string {
	t.Helper()
	prev := dirState(t, dir)
	for range 50 {
		time.Sleep(200 * time.Millisecond)
		now := dirState(t, dir)
		if maps.Equal(prev, now) {
			return now
		}
		prev = now
	}
	t.Fatalf("%s keeps changing", dir)
	return nil
}

// serveConfig writes a two-node config with node b's port on bPort
// (0: any free port) and data under data.
func serveConfig(t *testing.T, data string, bPort int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "aluad.yaml")
	y := fmt.Sprintf(`data: %s
nodes:
  - name: a
    ports: [{name: a0, addr: "127.0.0.1:0"}]
  - name: b
    ports: [{name: b0, addr: "127.0.0.1:%d"}]
luns:
  - {id: 0, size: 1MiB, preferred: a}
  - {id: 1, size: 1MiB, preferred: b}
`, data, bPort)
	require.NoError(t, os.WriteFile(p, []byte(y), 0o644))
	return p
}

// One array per data directory: a second 'aluad serve' on a directory
// that a running one holds fails at once, names the holder's pid, and
// changes no file there (the running array's state, LUN files, array id
// and control socket stay as they were).
func TestServeRefusesABusyDataDirectory(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir()) // serve's link to its socket
	data := filepath.Join(t.TempDir(), "data")
	cfg := serveConfig(t, data, 0)
	first, err := startServe([]string{"--config", cfg, "--api", "off"})
	require.NoError(t, err)
	defer first.stop()
	// The running array saves its state once after it starts: what it
	// writes is not the second start's doing.
	require.NoError(t, first.d.SaveState())
	before := settled(t, data)
	require.Contains(t, before, filepath.Join(data, "state", state.IdentityFile))

	for _, args := range [][]string{
		{"--config", cfg, "--api", "off"},
		{"--config", cfg, "--api", "off", "--control", "off", "--state", "off"},
		{"--data", data, "--api", "off"}, // the embedded default's ports
	} {
		_, err := startServe(args)
		require.ErrorIs(t, err, state.ErrBusy, "%v", args)
		require.ErrorContains(t, err, "pid "+strconv.Itoa(os.Getpid()))
		require.Equal(t, before, dirState(t, data), "%v: nothing changed", args)
	}
	// A state directory of its own beside a held data directory: still
	// refused, and the new state directory is not created.
	other := filepath.Join(t.TempDir(), "state")
	_, err = startServe([]string{"--config", cfg, "--api", "off", "--state", other})
	require.ErrorIs(t, err, state.ErrBusy)
	require.Equal(t, map[string]string{other: "absent"}, dirState(t, other))

	// Once the first stops, the directory is free.
	require.NoError(t, first.stop())
	again, err := startServe([]string{"--config", cfg, "--api", "off"})
	require.NoError(t, err)
	require.NoError(t, again.stop())
}

// A start that fails after its claim (node b's portal is taken) leaves
// the directory as it found it: a new one is not created, and in an
// array's existing directory no file is added or changed.
func TestServeFailedStartLeavesTheDirectory(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port

	for _, existing := range []bool{false, true} {
		t.Run(fmt.Sprintf("existing=%v", existing), func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			if existing {
				sv, err := startServe([]string{"--config", serveConfig(t, data, 0), "--api", "off"})
				require.NoError(t, err)
				require.NoError(t, sv.stop())
			}
			before := dirState(t, data)
			_, err := startServe([]string{"--config", serveConfig(t, data, port), "--api", "off"})
			require.ErrorContains(t, err, strconv.Itoa(port))
			require.Equal(t, before, dirState(t, data))
		})
	}
}

// A busy API address fails the start before the data directory is
// claimed, let alone before hosts can reach the portals.
func TestServeBusyAPIFailsFirst(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	data := filepath.Join(t.TempDir(), "data")
	_, err = startServe([]string{"--config", serveConfig(t, data, 0), "--api", busy.Addr().String()})
	require.ErrorContains(t, err, "api: ")
	require.Equal(t, map[string]string{data: "absent"}, dirState(t, data))
}
