package media

import "sync"

// Mem is a Store in memory: the tests' and the lab's fake media (CONVENTIONS
// 7: a small real implementation rather than a mock). It counts syncs.
type Mem struct {
	mu    sync.RWMutex
	b     []byte
	syncs int
}

// NewMem makes an in-memory store of size bytes, all zeros.
func NewMem(size int64) *Mem { return &Mem{b: make([]byte, size)} }

func (m *Mem) check(off int64, n int) error {
	if off < 0 || off+int64(n) > int64(len(m.b)) {
		return ErrRange
	}
	return nil
}

func (m *Mem) ReadAt(p []byte, off int64) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if err := m.check(off, len(p)); err != nil {
		return err
	}
	copy(p, m.b[off:])
	return nil
}

func (m *Mem) WriteAt(p []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(off, len(p)); err != nil {
		return err
	}
	copy(m.b[off:], p)
	return nil
}

func (m *Mem) Punch(off, length int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(off, int(length)); err != nil {
		return err
	}
	clear(m.b[off : off+length])
	return nil
}

func (m *Mem) Sync() error {
	m.mu.Lock()
	m.syncs++
	m.mu.Unlock()
	return nil
}

// Syncs counts Sync calls.
func (m *Mem) Syncs() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.syncs
}

func (m *Mem) Size() int64  { return int64(len(m.b)) }
func (m *Mem) Close() error { return nil }
