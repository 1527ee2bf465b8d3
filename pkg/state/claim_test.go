package state

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A data directory may hold what is not aluad's (a mount point's
// lost+found, a home directory's files): the claim neither reads it nor
// undoes it; only what aluad makes there is undone.
func TestClaimLeavesWhatIsNotAluads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "lost+found"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lost+found", "x"), []byte("x"), 0o600))
	c, err := ClaimDirs(dir, filepath.Join(dir, "state"))
	require.NoError(t, err)
	_, noted := c.before[filepath.Join(dir, "lost+found", "x")]
	require.False(t, noted, "not read")
	// During the failed start: aluad's files, and someone else's.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lun0.img"), make([]byte, 4096), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "state"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "state", "array-id"), []byte("id\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))
	c.Undo()
	for _, p := range []string{"lun0.img", "state", LockFile} {
		_, err := os.Stat(filepath.Join(dir, p))
		require.ErrorIs(t, err, os.ErrNotExist, "%s undone", p)
	}
	for _, p := range []string{"notes.txt", "lost+found/x"} {
		_, err := os.Stat(filepath.Join(dir, p))
		require.NoError(t, err, "%s left alone", p)
	}
}

// A failed start (A) removes the lock file it made, under its lock. A
// second start (B) that opened the file before the removal and takes the
// flock after A lets go holds a lock on a file no longer at the path:
// claim() checks that the locked file is the one at the path before it
// counts the lock as held (and opens the path again), so B never thinks
// it holds the directory while a third start (C) claims it.
func TestClaimUndoUnlinksAHeldLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	lock := filepath.Join(dir, LockFile)
	a, err := ClaimDirs(dir, "")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lun0.img"), make([]byte, 4096), 0o644))
	bf, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o644) // B: claim()'s open
	require.NoError(t, err)
	defer bf.Close()
	a.Undo()
	require.NoError(t, flockNB(bf), "granted: on the removed file")
	require.False(t, same(bf, lock), "so claim() does not count it")
	c, err := ClaimDirs(dir, "") // C
	require.NoError(t, err)
	defer c.Release()
	require.True(t, same(c.locks[0], lock))
	_, err = ClaimDirs(dir, "") // D
	require.ErrorIs(t, err, ErrBusy, "C holds the directory")
}

func flockNB(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) }
