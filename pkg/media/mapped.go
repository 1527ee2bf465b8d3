package media

import (
	"errors"
	"syscall"
)

// Mapper is a Store that knows which of its bytes are allocated: what
// GET LBA STATUS reports as mapped or deallocated.
type Mapper interface {
	// Run reports whether the bytes from off are allocated, and where
	// that run (all allocated, or all deallocated) ends.
	Run(off int64) (end int64, mapped bool, err error)
}

// Run asks s for the run of allocation at off; a store that cannot tell
// reports everything allocated (it is: memory, or unknown).
func Run(s Store, off int64) (end int64, mapped bool, err error) {
	if m, ok := s.(Mapper); ok {
		return m.Run(off)
	}
	if off < 0 || off >= s.Size() {
		return 0, false, ErrRange
	}
	return s.Size(), true, nil
}

// lseek whence values for holes and data (Linux, since 3.1).
const (
	seekData = 3
	seekHole = 4
)

// Run finds the file's allocation at off with SEEK_DATA and SEEK_HOLE: a
// punched hole is deallocated, everything else (data, or a file system
// that cannot tell) is allocated.
func (m *File) Run(off int64) (int64, bool, error) {
	if off < 0 || off >= m.size {
		return 0, false, ErrRange
	}
	fd := int(m.f.Fd())
	data, err := syscall.Seek(fd, off, seekData)
	switch {
	case errors.Is(err, syscall.ENXIO):
		return m.size, false, nil // only a hole from off to the end
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EOPNOTSUPP):
		return m.size, true, nil // no hole information here
	case err != nil:
		return 0, false, err
	case data > off:
		return min(data, m.size), false, nil
	}
	hole, err := syscall.Seek(fd, off, seekHole)
	if err != nil {
		return m.size, true, nil
	}
	return min(hole, m.size), true, nil
}

// Run forwards to the wrapped store.
func (f *faulty) Run(off int64) (int64, bool, error) { return Run(f.Store, off) }

// Run forwards to the wrapped store.
func (p *profiled) Run(off int64) (int64, bool, error) { return Run(p.Store, off) }
