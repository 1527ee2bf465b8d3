package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
// The controllers of cluster mode share their LUN files on purpose (the
// drives of a dual-controller array) and do not claim them.

// LockFile is the name of the claim's lock in a claimed directory.
const LockFile = "aluad.lock"

// ErrBusy is the error of a claim on a directory that another process
// holds.
var ErrBusy = errors.New("in use by another aluad")

// Claim holds the locks on a set of directories, and what they held when
// they were claimed.
type Claim struct {
	locks  []*os.File
	dirs   []string
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

// ClaimDirs claims each directory (created if missing): its lock first,
// then a note of every path under it. On ErrBusy nothing has been
// created or changed.
func ClaimDirs(dirs ...string) (*Claim, error) {
	c := &Claim{before: map[string]entry{}}
	for _, d := range dirs {
		if d == "" || slices.Contains(c.dirs, filepath.Clean(d)) || c.inside(d) {
			continue
		}
		if err := c.claim(filepath.Clean(d)); err != nil {
			c.Undo()
			return nil, err
		}
	}
	return c, nil
}

// inside says d is under a directory already claimed (its lock covers it).
func (c *Claim) inside(d string) bool {
	d = filepath.Clean(d)
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
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			pid := holder(f)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return busy(dir, pid)
			}
			return fmt.Errorf("%s: %w", lock, err)
		}
		f.Close() // let go; taken again below, after the note of what is there
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := c.mkdirs(dir); err != nil {
			return err
		}
	}
	if err := c.note(dir); err != nil {
		return err
	}
	if e, ok := c.before[lock]; ok {
		e.lock, _ = os.ReadFile(lock)
		if fi, err := os.Stat(lock); err == nil {
			e.mtime = fi.ModTime()
		}
		c.before[lock] = e
	}
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
	// The holder's pid, for the next start's message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	c.locks = append(c.locks, f)
	c.dirs = append(c.dirs, dir)
	return nil
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

// note records every path under dir.
func (c *Claim) note(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		e := entry{dir: d.IsDir()}
		if !e.dir {
			if fi, err := d.Info(); err == nil {
				e.size = fi.Size()
			}
		}
		c.before[p] = e
		return nil
	})
}

// Undo puts the claimed directories back as they were found, for a start
// that failed after its claim: what it created is removed (the lock and
// directories too), and a file that was empty and was sized since (a LUN
// file) is emptied again. A file moved aside as corrupt (state.json's
// corrupt-<time>) is kept: it is the only copy of what was there. The
// claim is released.
func (c *Claim) Undo() {
	if c == nil {
		return
	}
	var created []string
	for _, d := range c.dirs {
		_ = filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			was, ok := c.before[p]
			switch {
			case !ok && strings.Contains(filepath.Base(p), ".corrupt-"):
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
			return nil
		})
	}
	c.Release()
	// Deepest first: a directory's files before it.
	slices.SortFunc(created, func(a, b string) int { return len(b) - len(a) })
	for _, p := range created {
		_ = os.Remove(p)
	}
	for _, d := range c.made {
		_ = os.Remove(d) // only if empty
	}
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
