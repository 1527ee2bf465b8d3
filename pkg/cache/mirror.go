package cache

import (
	"sort"
	"sync"
	"sync/atomic"
)

// MirrorPage is one page held in a partner's mirror (or replayed from it).
type MirrorPage struct {
	Idx  int64
	Ver  uint64
	Data []byte
	// Inc and Gen are the owner's incarnation and mirror generation the
	// copy was sent under (cluster mode; 0 in one process).
	Inc, Gen int64
}

// mirrorStore holds copies of other nodes' dirty pages, newest version
// per page. Its lock is taken while the owner's c.mu is held, never the
// other way round.
type mirrorStore struct {
	mu    sync.Mutex
	pages map[uint64]map[int64]MirrorPage
	bytes int64
	// free holds released copies' buffers for copyOf: only copies this
	// store held alone (put, then superseded or released) go back.
	free [][]byte
}

// maxMirrorFree bounds the buffers a mirror store keeps for reuse.
const maxMirrorFree = 1024

// copyOf is a copy of b for the store to hold, in a reused buffer when
// one of b's size is free.
func (m *mirrorStore) copyOf(b []byte) []byte {
	m.mu.Lock()
	var buf []byte
	if n := len(m.free); n > 0 && len(m.free[n-1]) == len(b) {
		buf = m.free[n-1]
		m.free[n-1] = nil
		m.free = m.free[:n-1]
	}
	m.mu.Unlock()
	if buf == nil {
		return append([]byte(nil), b...)
	}
	copy(buf, b)
	return buf
}

// recycle keeps a copy's buffer the store no longer holds. m.mu is held.
func (m *mirrorStore) recycle(b []byte) {
	if len(m.free) < maxMirrorFree {
		m.free = append(m.free, b)
	}
}

func (m *mirrorStore) put(id uint64, ps []MirrorPage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.pages[id]
	if l == nil {
		l = map[int64]MirrorPage{}
		m.pages[id] = l
	}
	for _, p := range ps {
		if old, ok := l[p.Idx]; ok {
			if old.Ver >= p.Ver {
				continue
			}
			m.bytes -= int64(len(old.Data))
			m.recycle(old.Data)
		}
		l[p.Idx] = p
		m.bytes += int64(len(p.Data))
	}
}

// release drops copies whose version is not newer than the one destaged.
func (m *mirrorStore) release(id uint64, ps []MirrorPage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.pages[id]
	for _, p := range ps {
		if old, ok := l[p.Idx]; ok && old.Ver <= p.Ver {
			delete(l, p.Idx)
			m.bytes -= int64(len(old.Data))
			m.recycle(old.Data)
		}
	}
}

func (m *mirrorStore) take(id uint64) []MirrorPage {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.pages[id]
	delete(m.pages, id)
	out := make([]MirrorPage, 0, len(l))
	for _, p := range l {
		out = append(out, p)
		m.bytes -= int64(len(p.Data))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Idx < out[j].Idx })
	return out
}

func (m *mirrorStore) has(id uint64, idx int64, ver uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pages[id][idx]
	return ok && p.Ver >= ver
}

func (m *mirrorStore) wipe() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pages = map[uint64]map[int64]MirrorPage{}
	m.bytes = 0
}

// partnerUp returns the mirror partner if mirroring is on and one is up.
// c.mu is held.
func (c *Cache) partnerUp() *Cache {
	if !c.cfg.Mirror || c.cfg.Mode != WriteBack || c.partner == nil {
		return nil
	}
	return c.partner()
}

// remoteUp returns the partner in another process if mirroring is on and
// it is up. c.mu is held.
func (c *Cache) remoteUp() Remote {
	if !c.cfg.Mirror || c.cfg.Mode != WriteBack || c.remote == nil || !c.remote.Up() {
		return nil
	}
	return c.remote
}

// Hold keeps copies of another process's dirty pages of LUN id in this
// node's mirror (a partner's Put arriving over the interlink); a copy
// never replaces a newer one of the same page.
func (c *Cache) Hold(id uint64, ps []MirrorPage) {
	c.mirror.put(id, ps)
	for _, p := range ps { // replayed later, they stay older than what this node writes
		for cur := verClock.Load(); cur < p.Ver && !verClock.CompareAndSwap(cur, p.Ver); cur = verClock.Load() {
		}
	}
}

// Release drops the copies of LUN id that their owner destaged at these
// versions (a partner's Release arriving over the interlink).
func (c *Cache) Release(id uint64, ps []MirrorPage) { c.mirror.release(id, ps) }

// Up reports whether the node's cache is serving (not crashed).
func (c *Cache) Up() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.down
}

// DirtyPage names one page that was dirty in a crashed cache.
type DirtyPage struct {
	LUN uint64
	Idx int64
	Ver uint64
}

// Crash loses everything the node held in memory: its pages (dirty ones
// included; they never reach media) and the mirror copies it held for
// others. It returns the dirty pages lost, sorted, so the array can tell
// which of them a mirror still holds. Destages already issued to media
// complete first (they must not land after a takeover's newer data).
func (c *Cache) Crash() []DirtyPage {
	lost, _ := c.CrashMirror()
	return lost
}

// CrashMirror is Crash that also returns the mirror copies the node held
// for others (LUN, page, version), sorted: for a LUN whose owner is down
// too, they were the only copy.
func (c *Cache) CrashMirror() ([]DirtyPage, []DirtyPage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.writing > 0 { // writes already issued to media land first
		c.cond.Wait()
	}
	var lost []DirtyPage
	for _, ls := range c.luns {
		for idx, pg := range ls.pages {
			if pg.dirty {
				lost = append(lost, DirtyPage{LUN: ls.id, Idx: idx, Ver: pg.ver})
			}
		}
		ls.pages = map[int64]*page{}
		ls.dirty = 0
		ls.through = 0
		ls.epoch++
	}
	c.clean.Init()
	c.dirtyQ.Init()
	c.bytes, c.dirty = 0, 0
	c.gen++
	c.down = true
	held := c.mirror.list()
	c.mirror.wipe()
	c.cond.Broadcast()
	sortPages(lost)
	return lost, held
}

func sortPages(ps []DirtyPage) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].LUN != ps[j].LUN {
			return ps[i].LUN < ps[j].LUN
		}
		return ps[i].Idx < ps[j].Idx
	})
}

// list returns every copy held, sorted.
func (m *mirrorStore) list() []DirtyPage {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []DirtyPage
	for id, l := range m.pages {
		for idx, p := range l {
			out = append(out, DirtyPage{LUN: id, Idx: idx, Ver: p.Ver})
		}
	}
	sortPages(out)
	return out
}

// Incarnation counts the cache's crashes: work begun in one incarnation
// (a move's flush) is void in the next.
func (c *Cache) Incarnation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Restart brings a crashed node's cache back, empty.
func (c *Cache) Restart() {
	c.mu.Lock()
	c.down = false
	c.mu.Unlock()
}

// MirrorHas reports whether this node's mirror holds page idx of LUN id at
// version ver or newer.
func (c *Cache) MirrorHas(id uint64, idx int64, ver uint64) bool { return c.mirror.has(id, idx, ver) }

// TakeMirror removes and returns the mirror copies held for LUN id.
func (c *Cache) TakeMirror(id uint64) []MirrorPage { return c.mirror.take(id) }

// DropMirror discards the mirror copies held for LUN id.
func (c *Cache) DropMirror(id uint64) { c.mirror.take(id) }

// MirrorBytes is how much this node holds for its partners.
func (c *Cache) MirrorBytes() int64 {
	c.mirror.mu.Lock()
	defer c.mirror.mu.Unlock()
	return c.mirror.bytes
}

// Install takes over pages replayed from a crashed owner's mirror as
// dirty pages of this (new owner's) cache and mirrors them to this node's
// partner if one is up (else the caller destages them soon). In
// write-through mode they are written to media at once.
func (c *Cache) Install(id uint64, pages []MirrorPage) error {
	ls, err := c.lun(id)
	if err != nil || len(pages) == 0 {
		return err
	}
	ps := int64(c.cfg.PageSize)
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return ErrDown
	}
	gen := c.gen
	idxs := make([]int64, 0, len(pages))
	installed := make([]MirrorPage, 0, len(pages))
	for _, mp := range pages {
		if pg := ls.pages[mp.Idx]; pg != nil && pg.ver >= mp.Ver {
			continue // this cache already holds that write or a newer one
		}
		installed = append(installed, mp)
		c.drop(ls, mp.Idx)
		pg := &page{lun: ls, idx: mp.Idx, data: append([]byte(nil), mp.Data...), ver: mp.Ver}
		ls.pages[mp.Idx] = pg
		c.bytes += ps
		c.markDirty(pg)
		idxs = append(idxs, mp.Idx)
		for cur := verClock.Load(); cur < mp.Ver && !verClock.CompareAndSwap(cur, mp.Ver); cur = verClock.Load() {
		}
	}
	ls.epoch++
	partner := c.partnerUp()
	if partner != nil && len(installed) > 0 {
		partner.mirror.put(id, installed)
	}
	c.mu.Unlock()
	if c.cfg.Mode != WriteBack {
		return c.destagePages(ls, idxs, gen)
	}
	return nil
}

// Invalidate drops every page of LUN id (waiting for destages in flight)
// and returns how many dirty pages it dropped: 0 unless the caller did
// not flush first. The array calls it on both sides of a hand-over.
func (c *Cache) Invalidate(id uint64) int {
	ls, err := c.lun(id)
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := ls.dirty
	for idx := range ls.pages {
		c.drop(ls, idx)
	}
	ls.epoch++
	c.cond.Broadcast()
	return n
}

// SetWriteThrough makes writes to LUN id go through to media while on
// (a transition flushing the LUN away). Calls nest.
func (c *Cache) SetWriteThrough(id uint64, on bool) {
	ls, err := c.lun(id)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		ls.through++
	} else if ls.through > 0 {
		ls.through--
	}
}

// DirtyBytes is the LUN's dirty data in this cache.
func (c *Cache) DirtyBytes(id uint64) int64 {
	ls, err := c.lun(id)
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(ls.dirty) * int64(c.cfg.PageSize)
}

// Stats are a cache's counters and levels.
type Stats struct {
	ReadHits, ReadMisses      uint64
	WritesBack, WritesThrough uint64
	Destaged, Evicted         uint64 // pages
	MirrorBytesSent           uint64
	Bytes, Dirty, MirrorHeld  int64
	PageSize                  int
}

type counters struct {
	readHits, readMisses      atomic.Uint64
	writesBack, writesThrough atomic.Uint64
	destaged, evicted         atomic.Uint64
	mirrorBytes               atomic.Uint64
}

// Stats returns the counters and current levels.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	b, d := c.bytes, c.dirty
	c.mu.Unlock()
	return Stats{ReadHits: c.stats.readHits.Load(), ReadMisses: c.stats.readMisses.Load(),
		WritesBack: c.stats.writesBack.Load(), WritesThrough: c.stats.writesThrough.Load(),
		Destaged: c.stats.destaged.Load(), Evicted: c.stats.evicted.Load(),
		MirrorBytesSent: c.stats.mirrorBytes.Load(), Bytes: b, Dirty: d, MirrorHeld: c.MirrorBytes(),
		PageSize: c.cfg.PageSize}
}
