package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// One array per data directory. An array's LUN files sit behind its own
// write-back cache and its state file records its owners: two arrays on
// one directory would each overwrite what the other acknowledged, and
// the one that stops last would undo the other's moves at the next
// start. So 'aluad serve' claims its directories before it reads or
// creates anything in them: an exclusive flock on <dir>/aluad.lock, held
// for the life of the process (the kernel lets it go when the process
// ends, however it ends). A second start finds the lock held and fails at
// once with the holder's pid, having changed nothing. A start that fails
// later undoes what it created (Claim.Undo), so the directory is left as
// it was found.
//
// A data directory may hold other things (it may be a mount point with a
// lost+found, or a home directory): the claim notes and undoes only what
// aluad makes there (the lock, the control socket, the LUN files, the
// state directory), and everything in a state directory, which is
// aluad's own.
//
// The controllers of cluster mode share their LUN files on purpose (the
// drives of a dual-controller array) and do not claim them.

// LockFile is the name of the claim's lock in a claimed directory.
const LockFile = "aluad.lock"

// ErrBusy is the error of a claim on a directory that another process
// holds.
var ErrBusy = errors.New("in use by another aluad")

// ours: the names aluad makes in a data directory.
var ours = regexp.MustCompile(`^(aluad\.lock|aluad\.sock|lun\d+\.img|state|array-id)$`)

// Claim holds the locks on a set of directories, and what they held when
// they were claimed.
type Claim struct {
	locks []*os.File
	dirs  []string
	// own: directories all of whose contents are aluad's (state).
	own    map[string]bool
	before map[string]entry // path: what was there at the claim
	made   []string         // directories the claim created
}

type entry struct {
	dir  bool
	size int64
	// A lock file's content and time, put back by Undo.
	lock  []byte
	mtime time.Time
}

// ClaimDirs claims the data directory and the state directory (created
// if missing; "" for none): each one's lock first, then a note of what
// aluad keeps there. On ErrBusy nothing has been created or changed.
func ClaimDirs(data, stateDir string) (*Claim, error) {
	c := &Claim{before: map[string]entry{}, own: map[string]bool{}}
	for i, d := range []string{data, stateDir} {
		if d == "" {
			continue
		}
		d = resolve(d)
		if i == 1 {
			c.own[d] = true
		}
		if slices.Contains(c.dirs, d) || c.inside(d) {
			c.note(d)
			continue
		}
		if err := c.claim(d); err != nil {
			c.Undo()
			return nil, err
		}
	}
	return c, nil
}

// resolve is d absolute with its symbolic links followed, as far as it
// exists (a symlinked data directory is claimed where it really is).
func resolve(d string) string {
	d, _ = filepath.Abs(filepath.Clean(d))
	rest := ""
	for p := d; ; p = filepath.Dir(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		if p == filepath.Dir(p) {
			return d
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// inside says d is under a directory already claimed (its lock covers it).
func (c *Claim) inside(d string) bool {
	for _, o := range c.dirs {
		if rel, err := filepath.Rel(o, d); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

func (c *Claim) claim(dir string) error {
	lock := filepath.Join(dir, LockFile)
	// Busy first, without creating anything: an existing lock is opened
	// as it is.
	if f, err := os.OpenFile(lock, os.O_RDWR, 0); err == nil {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		pid := holder(f)
		f.Close() // let go; taken again below, after the note of what is there
		if err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return busy(dir, pid)
			}
			return fmt.Errorf("%s: %w", lock, err)
		}
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := c.mkdirs(dir); err != nil {
			return err
		}
	}
	c.note(dir)
	if e, ok := c.before[lock]; ok {
		e.lock, _ = os.ReadFile(lock)
		if fi, err := os.Stat(lock); err == nil {
			e.mtime = fi.ModTime()
		}
		c.before[lock] = e
	}
	for try := 0; ; try++ {
		f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			pid := holder(f)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return busy(dir, pid) // taken between the two looks
			}
			return fmt.Errorf("%s: %w", lock, err)
		}
		// The lock taken must be the file at the path: one a failed
		// start unlinked after this open is no lock at all.
		if same(f, lock) {
			if err := f.Truncate(0); err == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			c.locks = append(c.locks, f)
			c.dirs = append(c.dirs, dir)
			return nil
		}
		f.Close()
		if try == 3 {
			return fmt.Errorf("%s keeps being replaced: is another aluad starting and failing there?", lock)
		}
	}
}

// same says f is the file at path now.
func same(f *os.File, path string) bool {
	var a, b unix.Stat_t
	return unix.Fstat(int(f.Fd()), &a) == nil && unix.Stat(path, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}

func busy(dir string, pid int) error {
	if pid > 0 {
		return fmt.Errorf("%s is %w (pid %d holds %s); stop it, or give this one another --data",
			dir, ErrBusy, pid, LockFile)
	}
	return fmt.Errorf("%s is %w (it holds %s); stop it, or give this one another --data", dir, ErrBusy, LockFile)
}

// holder reads the pid a lock's holder wrote (0: none).
func holder(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return pid
}

// mkdirs creates dir and the parents it lacks, and remembers them.
func (c *Claim) mkdirs(dir string) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		missing = append(missing, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	c.made = append(c.made, missing...) // deepest first
	return nil
}

// mine says path is aluad's to note and undo: a name aluad makes in a
// data directory, or anything under a directory that is all aluad's.
func (c *Claim) mine(path string) bool {
	for d := range c.own {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	for _, d := range c.dirs {
		if filepath.Dir(path) == d && ours.MatchString(filepath.Base(path)) {
			return true
		}
		if strings.HasPrefix(path, filepath.Join(d, "state")+"/") {
			return true
		}
	}
	return false
}

// walk visits dir's entries that are aluad's (see mine), skipping what
// it cannot read.
func (c *Claim) walk(dir string, visit func(p string, d fs.DirEntry)) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && d != nil && d.IsDir():
			return fs.SkipDir
		case err != nil:
			return nil
		case p == dir:
			return nil
		case !c.mine(p):
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		visit(p, d)
		return nil
	})
}

// note records what of aluad's is under dir.
func (c *Claim) note(dir string) {
	if _, err := os.Stat(dir); err != nil {
		return // not there: all of it will be new
	}
	c.before[dir] = entry{dir: true}
	dirs := c.dirs
	c.dirs = append(slices.Clone(c.dirs), dir) // mine() knows it during the walk
	c.walk(dir, func(p string, d fs.DirEntry) {
		e := entry{dir: d.IsDir()}
		if !e.dir {
			if fi, err := d.Info(); err == nil {
				e.size = fi.Size()
			}
		}
		c.before[p] = e
	})
	c.dirs = dirs
}

// Undo puts the claimed directories back as they were found, for a start
// that failed after its claim: what aluad created is removed (the lock
// and the directories too), a file that was empty and was sized since (a
// LUN file) is emptied again, and a state file moved aside as corrupt is
// put back where it was (the next start judges it again). It is done
// while the lock is held; then the claim is released.
func (c *Claim) Undo() {
	if c == nil {
		return
	}
	var created []string
	for _, d := range c.dirs {
		c.walk(d, func(p string, de fs.DirEntry) {
			was, ok := c.before[p]
			switch {
			case !ok && strings.Contains(filepath.Base(p), ".corrupt-"):
				orig := p[:strings.Index(p, ".corrupt-")]
				if _, had := c.before[orig]; had {
					if _, err := os.Lstat(orig); errors.Is(err, fs.ErrNotExist) {
						_ = os.Rename(p, orig)
						return
					}
				}
				// not ours to delete: the only copy of what was there
			case !ok:
				created = append(created, p)
			case was.lock != nil:
				if os.WriteFile(p, was.lock, 0o644) == nil {
					_ = os.Chtimes(p, time.Time{}, was.mtime)
				}
			case !was.dir && !de.IsDir() && was.size == 0:
				if fi, err := de.Info(); err == nil && fi.Size() > 0 {
					_ = os.Truncate(p, 0)
				}
			}
		})
	}
	// Deepest first: a directory's files before it.
	slices.SortFunc(created, func(a, b string) int { return len(b) - len(a) })
	for _, p := range created {
		_ = os.Remove(p)
	}
	for _, d := range c.made {
		_ = os.Remove(d) // only if empty
	}
	c.Release()
	c.dirs, c.made = nil, nil
}

// Release lets the directories go (the process's end does it too).
func (c *Claim) Release() {
	if c == nil {
		return
	}
	for _, f := range c.locks {
		_ = f.Close()
	}
	c.locks = nil
}
