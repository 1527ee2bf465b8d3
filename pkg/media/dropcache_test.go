package media

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// resident counts the file's pages in this machine's page cache.
func resident(t *testing.T, path string, size int) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(m)
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(size), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, errno)
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// A new owner drops what this machine cached of a LUN's media, so it
// reads what another machine wrote to shared storage: the pages are no
// longer resident after DropCache, and the data reads back the same.
func TestDropCache(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	require.NotEqual(t, int64(unix.TMPFS_MAGIC), int64(st.Type), "the test needs a disk file system: tmpfs pages are the storage")
	const size = 1 << 20
	path := filepath.Join(dir, "lun")
	f, err := OpenFile(path, size)
	require.NoError(t, err)
	defer f.Close()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	require.NoError(t, f.WriteAt(data, 0))
	require.NoError(t, f.Sync())
	got := make([]byte, size)
	require.NoError(t, f.ReadAt(got, 0))
	require.Positive(t, resident(t, path, size), "read pages are cached")
	var d CacheDropper = f
	require.NoError(t, d.DropCache())
	require.Zero(t, resident(t, path, size), "no page of the file is cached after DropCache")
	require.NoError(t, f.ReadAt(got, 0))
	require.Equal(t, data, got)
}
