package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A data directory that is a symbolic link (data on another disk) is
// claimed where it really is: a failed start leaves nothing behind there.
func TestServeFailedStartSymlinkedData(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	real := filepath.Join(t.TempDir(), "real")
	require.NoError(t, os.Mkdir(real, 0o755))
	link := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Symlink(real, link))
	before := dirState(t, real)
	_, err = startServe([]string{"--config", serveConfig(t, link, port), "--api", "off"})
	require.ErrorContains(t, err, strconv.Itoa(port))
	require.Equal(t, before, dirState(t, real))
}

// A state file the start rejects (given another --target by mistake) is
// moved aside; when the start then fails (a portal is taken), it is put
// back, so the next start (target fixed) has the array's owners and
// reservations.
func TestServeFailedStartMovesStateAside(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	data := filepath.Join(t.TempDir(), "data")
	sv, err := startServe([]string{"--config", serveConfig(t, data, 0), "--api", "off"})
	require.NoError(t, err)
	require.NoError(t, sv.stop())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	before := dirState(t, data)
	_, err = startServe([]string{"--config", serveConfig(t, data, port), "--api", "off",
		"--target", "iqn.2026-11.org.example:typo"})
	require.Error(t, err)
	require.Equal(t, before, dirState(t, data))
}

// --data . (and a relative --state): a failed start leaves the working
// directory as it found it.
func TestServeFailedStartDot(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	wd := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(wd, "notes.txt"), []byte("mine"), 0o644))
	cfg := serveConfig(t, ".", port)
	t.Chdir(wd)
	before := dirState(t, ".")
	_, err = startServe([]string{"--config", cfg, "--api", "off", "--state", "st"})
	require.ErrorContains(t, err, strconv.Itoa(port))
	require.Equal(t, before, dirState(t, "."))
}
