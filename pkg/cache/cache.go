// Package cache owns one storage node's cache: a bounded read cache of
// pages, write-back with dirty tracking and background destage to media,
// write-through and no-cache modes, FUA and SYNCHRONIZE CACHE, and the
// write-cache mirror: every acknowledged write-back page is first copied
// into the partner node's mirror, so the partner can replay it if this
// node crashes. It sits between pkg/array (which routes each command to
// the owner node's cache) and pkg/media; it must not import pkg/array,
// pkg/scsi or pkg/iscsi. Which node is the partner and what the interlink
// costs are injected by the array.
//
// Coherence rules (what the tests hold it to):
//   - a page absent from the cache is current on media: every write enters
//     the cache before it is acknowledged, and a page leaves the cache only
//     once clean;
//   - media writes of one page happen in version order: a page being
//     destaged is busy, and a second destage of it waits;
//   - a read fills the cache from media only if no write, destage,
//     eviction or unmap touched the LUN while it read (the LUN's epoch).
package cache

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/media"
)

// Mode is a cache's write policy.
type Mode int

// Write policies.
const (
	// WriteBack acknowledges a write once it is in this node's cache and
	// (with mirroring) in the partner's mirror; it reaches media later.
	WriteBack Mode = iota
	// WriteThrough acknowledges a write once it is on media; reads are cached.
	WriteThrough
	// None bypasses the cache for reads and writes.
	None
)

func (m Mode) String() string {
	switch m {
	case WriteBack:
		return "write-back"
	case WriteThrough:
		return "write-through"
	case None:
		return "none"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode parses "write-back", "write-through" or "none".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{WriteBack, WriteThrough, None} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown cache mode %q (write-back, write-through, none)", s)
}

// Config sizes and tunes one node's cache.
type Config struct {
	Mode Mode
	// Capacity bounds the bytes of pages (clean and dirty) the node holds.
	Capacity int64
	// DirtyLimit bounds dirty bytes: a writer above it destages first.
	DirtyLimit int64
	// PageSize is the cache granule (default 4096).
	PageSize int
	// Mirror copies every write-back page to the partner before the write
	// is acknowledged. Without a partner up, writes go through to media.
	Mirror bool
	// DestageInterval is how often the destager wakes (default 100 ms).
	DestageInterval time.Duration
	// Clock paces the destager (nil: the real one).
	Clock clock.Clock
}

// Defaults for a zero Config field.
const (
	DefaultCapacity        = 256 << 20
	DefaultPageSize        = 4096
	DefaultDestageInterval = 100 * time.Millisecond
)

func (cfg Config) withDefaults() Config {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.DirtyLimit <= 0 || cfg.DirtyLimit > cfg.Capacity {
		cfg.DirtyLimit = cfg.Capacity / 2
	}
	if cfg.DestageInterval <= 0 {
		cfg.DestageInterval = DefaultDestageInterval
	}
	return cfg
}

// ErrDown is returned by a crashed node's cache.
var ErrDown = errors.New("cache: node is down")

// verClock orders page versions across every cache of the process, so a
// page replayed from a mirror on a new owner stays ordered with the
// versions that owner creates afterwards.
var verClock atomic.Uint64

// Cache is one node's cache.
type Cache struct {
	name string
	cfg  Config
	luns map[uint64]*lunState // fixed after Attach calls, before serving

	mu     sync.Mutex
	cond   *sync.Cond
	clean  list.List // clean, not busy pages; front is least recently used
	dirtyQ list.List // dirty pages in the order they became dirty
	bytes  int64     // all pages held
	free   [][]byte  // evicted pages' buffers, for reuse (pageBuf)
	// applied and mirrorBuf are WriteAt's scratch (under mu).
	applied   []*page
	mirrorBuf []MirrorPage
	dirty     int64  // dirty bytes
	gen       uint64 // bumps on Crash: work started before is void
	// writing counts destage batches on their way to media; a crash
	// waits for them (a write already issued to the drives lands).
	writing int
	down    bool
	writes  uint64 // write counter; the destager flushes everything when idle

	partner func() *Cache // the mirror partner now (nil: none up)
	remote  Remote        // the partner in another process (cluster mode)
	gate    func(lun uint64) bool
	peers   []*Cache    // every other node (mirror releases)
	link    func(n int) // cost of shipping n bytes to the partner
	mirror  mirrorStore

	stats counters
	quit  chan struct{}
	wg    sync.WaitGroup
}

type lunState struct {
	id    uint64
	store media.Store
	pages map[int64]*page
	// epoch bumps whenever a page of the LUN changes, is cleaned,
	// evicted or dropped; a read fills the cache only if it did not move.
	epoch uint64
	// through > 0: writes go through to media (a transition is flushing
	// this LUN away).
	through int
	dirty   int // dirty pages
	// unmap is held exclusively by UNMAP, shared by writes: it orders an
	// UNMAP against the writes before and after it. In mode none it also
	// orders a write that an Admit governs (held exclusively from its
	// admission to the media) before the later ones.
	unmap sync.RWMutex
	// unmapping counts UNMAPs between dropping their pages and the end
	// of their punch: a read then may have read the old media, and does
	// not fill the cache with it.
	unmapping int
}

type page struct {
	lun   *lunState
	idx   int64
	data  []byte
	dirty bool
	// busy: being written to media.
	busy bool
	ver  uint64
	elem *list.Element // in clean or dirtyQ, nil while busy
}

// New makes a node's cache.
func New(name string, cfg Config) *Cache {
	c := &Cache{name: name, cfg: cfg.withDefaults(), luns: map[uint64]*lunState{},
		quit: make(chan struct{}), link: func(int) {}}
	c.cond = sync.NewCond(&c.mu)
	c.mirror.pages = map[uint64]map[int64]MirrorPage{}
	return c
}

// Name is the node's name.
func (c *Cache) Name() string { return c.name }

// Config returns the effective configuration.
func (c *Cache) Config() Config { return c.cfg }

// Attach makes a LUN's media reachable through this cache. Every node
// attaches every LUN (the back end is shared, as on a dual-controller
// array); only the owner's cache is used for it. Call before serving.
func (c *Cache) Attach(id uint64, st media.Store) {
	c.luns[id] = &lunState{id: id, store: st, pages: map[int64]*page{}}
}

// Remote is a mirror partner in another process (a controller of a
// cluster): the copies travel over the interlink. Put and Release are
// called under the owner's cache lock, in the cache's write order, and
// must not block: the link sends them in that order. The wait Put
// returns blocks until the partner holds the copies.
type Remote interface {
	// Up reports whether the partner can take copies now.
	Up() bool
	Put(id uint64, ps []MirrorPage) (wait func() error)
	Release(id uint64, ps []MirrorPage)
	// Settle returns once no copy the partner holds is older than what
	// this cache wrote to the media so far: every release posted is
	// answered, or the partner's copies are void. A write that is not
	// mirrored (written through) is acknowledged only after it, so the
	// replay of an older copy can never undo it.
	Settle() error
}

// SeedVersions starts this process's page versions at v at least: a
// controller restarted in a cluster numbers its writes after those of
// its earlier incarnation (the partner compares versions).
func SeedVersions(v uint64) {
	for cur := verClock.Load(); cur < v && !verClock.CompareAndSwap(cur, v); cur = verClock.Load() {
	}
}

// SetRemote makes a partner in another process this cache's mirror
// (instead of SetPeers). Call before serving.
func (c *Cache) SetRemote(r Remote) { c.remote = r }

// ErrNotHeld refuses a media write of a LUN this node no longer holds
// (see SetGate): its pages stay dirty until they are dropped.
var ErrNotHeld = errors.New("cache: this node no longer holds the LUN")

// SetGate makes every media write of a LUN ask gate first (cluster mode:
// a controller whose LUN may have been taken over never writes it
// again). Call before serving.
func (c *Cache) SetGate(gate func(lun uint64) bool) { c.gate = gate }

// SetPeers injects the mirror partner lookup, the other nodes' caches and
// the interlink cost of shipping n bytes. Call before serving.
func (c *Cache) SetPeers(partner func() *Cache, peers []*Cache, link func(n int)) {
	c.partner, c.peers = partner, peers
	if link != nil {
		c.link = link
	}
}

func (c *Cache) lun(id uint64) (*lunState, error) {
	ls := c.luns[id]
	if ls == nil {
		return nil, fmt.Errorf("cache %s: LUN %d not attached", c.name, id)
	}
	return ls, nil
}

// span is the part of page idx that [off, end) covers, as offsets into
// the page and into the caller's buffer.
func (c *Cache) span(idx, off, end int64) (pageOff, bufOff, n int64) {
	ps := int64(c.cfg.PageSize)
	lo := max(off, idx*ps)
	hi := min(end, (idx+1)*ps)
	return lo - idx*ps, lo - off, hi - lo
}

func (c *Cache) pageRange(off int64, n int) (first, last int64) {
	ps := int64(c.cfg.PageSize)
	return off / ps, (off + int64(n) - 1) / ps
}

// Start runs the background destager until Close.
func (c *Cache) Start() {
	if c.cfg.Mode != WriteBack {
		return
	}
	c.wg.Add(1)
	go c.destager()
}

// Close stops the destager (it does not flush: call FlushAll first).
func (c *Cache) Close() {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	c.wg.Wait()
}
