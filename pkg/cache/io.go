package cache

import (
	"fmt"
	"sort"

	"github.com/aluad/aluad/pkg/media"
)

// ReadAt reads len(p) bytes of LUN id at off: cached pages from memory,
// the rest from media (which is current for every page not cached), then
// fills the cache with the whole pages read, unless the LUN changed
// meanwhile.
func (c *Cache) ReadAt(id uint64, p []byte, off int64) error {
	ls, err := c.lun(id)
	if err != nil {
		return err
	}
	if c.cfg.Mode == None {
		return ls.store.ReadAt(p, off)
	}
	if len(p) == 0 {
		return nil
	}
	end := off + int64(len(p))
	first, last := c.pageRange(off, len(p))
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return ErrDown
	}
	var few [fillMaxPages]int64
	missing := few[:0]
	for idx := first; idx <= last; idx++ {
		pg := ls.pages[idx]
		if pg == nil {
			missing = append(missing, idx)
			continue
		}
		po, bo, n := c.span(idx, off, end)
		copy(p[bo:bo+n], pg.data[po:po+n])
		c.touch(pg)
	}
	epoch, gen := ls.epoch, c.gen
	c.mu.Unlock()
	if len(missing) == 0 {
		c.stats.readHits.Add(1)
		return nil
	}
	c.stats.readMisses.Add(1)
	for i := 0; i < len(missing); {
		j := i + 1
		for j < len(missing) && missing[j] == missing[j-1]+1 {
			j++
		}
		_, bo, _ := c.span(missing[i], off, end)
		_, bo2, n2 := c.span(missing[j-1], off, end)
		if err := ls.store.ReadAt(p[bo:bo2+n2], off+bo); err != nil {
			return err
		}
		i = j
	}
	if len(missing) <= fillMaxPages {
		c.fill(ls, p, off, missing, epoch, gen)
	}
	return nil
}

// ReadRef returns LUN id's bytes [off, off+n) where they lie on media,
// with what ends the reference, when the media can lend them and no page
// of them is dirty here (a clean page holds what the media holds; a
// dirty one, being destaged or not, is newer): a large read sent without
// a copy. ok false: use ReadAt.
func (c *Cache) ReadRef(id uint64, off int64, n int) (b []byte, unref media.Referencer, ok bool) {
	ls, err := c.lun(id)
	if err != nil || n <= 0 {
		return nil, nil, false
	}
	r, isRef := ls.store.(media.Referencer)
	if !isRef {
		return nil, nil, false
	}
	if c.cfg.Mode != None {
		first, last := c.pageRange(off, n)
		c.mu.Lock()
		newer := c.down
		for idx := first; idx <= last && !newer && ls.dirty > 0; idx++ {
			pg := ls.pages[idx]
			newer = pg != nil && pg.dirty
		}
		c.mu.Unlock()
		if newer {
			return nil, nil, false
		}
	}
	if b, ok = r.Ref(off, n); !ok {
		return nil, nil, false
	}
	return b, r, true
}

// fillMaxPages: a read that misses more pages than this does not fill
// the cache (a sequential stream would only evict the working set, at the
// cost of a page allocation and copy per 4 KiB).
const fillMaxPages = 16

// fill inserts the whole pages of a read as clean pages, if the LUN's
// epoch shows nothing changed since the read looked at the cache.
func (c *Cache) fill(ls *lunState, p []byte, off int64, idxs []int64, epoch, gen uint64) {
	ps := int64(c.cfg.PageSize)
	end := off + int64(len(p))
	c.mu.Lock()
	defer c.mu.Unlock()
	if ls.epoch != epoch || c.gen != gen || c.down || ls.unmapping > 0 {
		return // the LUN changed, or the media read may predate a punch
	}
	for _, idx := range idxs {
		po, bo, n := c.span(idx, off, end)
		if po != 0 || n != ps || ls.pages[idx] != nil {
			continue
		}
		pg := &page{lun: ls, idx: idx, data: c.pageBuf()}
		copy(pg.data, p[bo:bo+n])
		ls.pages[idx] = pg
		c.bytes += ps
		pg.elem = c.clean.PushBack(pg)
	}
	c.evict()
}

// WriteAt writes p to LUN id at off. In write-back mode the write is
// acknowledged once its pages are dirty here and copied to the partner's
// mirror; with FUA, in write-through mode, while a transition flushes the
// LUN, or when mirroring is on but no partner is up, the pages are also
// written to media first (and FUA syncs the media).
func (c *Cache) WriteAt(id uint64, p []byte, off int64, fua bool) error {
	return c.WriteAtIf(id, p, off, fua, nil)
}

// Admit decides, where a command takes effect, whether it still may: nil
// lets it, an error refuses it (see WriteAtIf).
type Admit func() error

// WriteAtIf is WriteAt for a write that may take effect only while admit
// (when set) allows: a command another controller forwarded, which its
// sender gives up on at a deadline. admit is called where the write
// takes effect, under the lock that orders it before every later write
// of the LUN: the cache's, just before its pages change (in mode none,
// the LUN's ordering lock, held across the media write). A write admitted
// there comes before any write that begins after, however long it is
// held afterwards; one refused returns admit's error and changes nothing.
func (c *Cache) WriteAtIf(id uint64, p []byte, off int64, fua bool, admit Admit) error {
	ls, err := c.lun(id)
	if err != nil {
		return err
	}
	if c.cfg.Mode == None {
		return c.writeNone(ls, p, off, fua, admit)
	}
	if len(p) == 0 {
		return nil
	}
	ls.unmap.RLock()
	defer ls.unmap.RUnlock()
	if err := c.makeRoom(); err != nil {
		return err
	}
	first, last := c.pageRange(off, len(p))
	c.mu.Lock()
	for {
		if c.down {
			c.mu.Unlock()
			return ErrDown
		}
		idx, ok := c.partialMissing(ls, off, len(p))
		if !ok {
			break
		}
		c.mu.Unlock()
		if err := c.readPage(ls, idx); err != nil {
			return err
		}
		c.mu.Lock()
	}
	if admit != nil {
		if err := admit(); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	partner := c.partnerUp()
	remote := c.remoteUp()
	through := fua || c.cfg.Mode == WriteThrough || ls.through > 0 || (c.cfg.Mirror && partner == nil && remote == nil)
	gen := c.gen
	pages := c.apply(ls, p, off, first, last)
	c.writes++
	var copies []MirrorPage
	var held func() error
	mirrored := !through && (partner != nil || remote != nil)
	if mirrored {
		// Under c.mu: the copy lands (or is queued for the link) before
		// any destage can release it.
		if remote != nil {
			copies = make([]MirrorPage, len(pages))
			for i, pg := range pages {
				copies[i] = MirrorPage{Idx: pg.idx, Ver: pg.ver, Data: append([]byte(nil), pg.data...)}
			}
			held = remote.Put(id, copies)
		} else {
			// The partner's copies come from its pool and go back to it
			// when released.
			copies = c.mirrorBuf[:0]
			for _, pg := range pages {
				copies = append(copies, MirrorPage{Idx: pg.idx, Ver: pg.ver, Data: partner.mirror.copyOf(pg.data)})
			}
			partner.mirror.put(id, copies)
			clear(copies)
			c.mirrorBuf = copies[:0]
		}
	}
	if len(pages) > 0 {
		clear(pages)
		c.applied = pages[:0] // the scratch apply fills
	}
	c.mu.Unlock()
	if mirrored {
		if held != nil {
			if err := held(); err != nil {
				// The partner does not hold the copy: the write is made
				// durable here before it is acknowledged.
				through = true
			}
		} else {
			c.link(len(p)) // the interlink transfer the acknowledgement waits for
		}
		c.stats.mirrorBytes.Add(uint64(len(p)))
	}
	if !through {
		c.stats.writesBack.Add(1)
		return nil
	}
	c.stats.writesThrough.Add(1)
	idxs := make([]int64, 0, last-first+1)
	for idx := first; idx <= last; idx++ {
		idxs = append(idxs, idx)
	}
	if err := c.destagePages(ls, idxs, gen); err != nil {
		return err
	}
	if fua {
		if err := ls.store.Sync(); err != nil {
			return err
		}
	}
	return c.settle()
}

// writeNone writes with no cache: on the media at once. A write that
// admit governs holds the LUN's ordering lock (unmap) alone from its
// admission until it is on the media; the others share it.
func (c *Cache) writeNone(ls *lunState, p []byte, off int64, fua bool, admit Admit) error {
	if admit != nil {
		ls.unmap.Lock()
		err := admit()
		if err == nil {
			err = ls.store.WriteAt(p, off)
		}
		ls.unmap.Unlock()
		if err != nil {
			return err
		}
	} else {
		ls.unmap.RLock()
		err := ls.store.WriteAt(p, off)
		ls.unmap.RUnlock()
		if err != nil {
			return err
		}
	}
	if fua {
		return ls.store.Sync()
	}
	return nil
}

// settle: see Remote.Settle (nothing to wait for in one process).
func (c *Cache) settle() error {
	if c.remote == nil {
		return nil
	}
	return c.remote.Settle()
}

// partialMissing finds an edge page the write covers only in part and
// that is not cached: it must be read from media before the write merges
// into it.
func (c *Cache) partialMissing(ls *lunState, off int64, n int) (int64, bool) {
	ps := int64(c.cfg.PageSize)
	end := off + int64(n)
	first, last := c.pageRange(off, n)
	for _, idx := range []int64{first, last} {
		if ls.pages[idx] != nil {
			continue
		}
		if po, _, m := c.span(idx, off, end); po != 0 || m != ps {
			return idx, true
		}
	}
	return 0, false
}

// readPage reads one page from media into the cache as clean, retrying
// if the LUN changed while it read.
func (c *Cache) readPage(ls *lunState, idx int64) error {
	ps := int64(c.cfg.PageSize)
	buf := make([]byte, ps)
	for {
		c.mu.Lock()
		if ls.pages[idx] != nil || c.down {
			c.mu.Unlock()
			return nil
		}
		epoch, gen := ls.epoch, c.gen
		c.mu.Unlock()
		if err := ls.store.ReadAt(buf, idx*ps); err != nil {
			return err
		}
		c.mu.Lock()
		if ls.epoch == epoch && c.gen == gen && ls.pages[idx] == nil {
			pg := &page{lun: ls, idx: idx, data: buf}
			ls.pages[idx] = pg
			c.bytes += ps
			pg.elem = c.clean.PushBack(pg)
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
	}
}

// apply merges p into the LUN's pages (creating whole pages as needed),
// marks them dirty with a new version and returns them. c.mu is held.
func (c *Cache) apply(ls *lunState, p []byte, off int64, first, last int64) []*page {
	ps := int64(c.cfg.PageSize)
	end := off + int64(len(p))
	pages := c.applied[:0]
	for idx := first; idx <= last; idx++ {
		po, bo, n := c.span(idx, off, end)
		pg := ls.pages[idx]
		if pg == nil {
			buf := c.pageBuf()
			if n != ps {
				clear(buf) // not reached: partialMissing read the page in
			}
			pg = &page{lun: ls, idx: idx, data: buf}
			ls.pages[idx] = pg
			c.bytes += ps
		}
		copy(pg.data[po:po+n], p[bo:bo+n])
		pg.ver = verClock.Add(1)
		c.markDirty(pg)
		pages = append(pages, pg)
	}
	ls.epoch++
	c.evict()
	return pages
}

// markDirty moves a page to the dirty queue. c.mu is held.
func (c *Cache) markDirty(pg *page) {
	if pg.dirty {
		return
	}
	if pg.elem != nil {
		c.clean.Remove(pg.elem)
	}
	pg.dirty = true
	pg.lun.dirty++
	c.dirty += int64(c.cfg.PageSize)
	if !pg.busy {
		pg.elem = c.dirtyQ.PushBack(pg)
	} else {
		pg.elem = nil
	}
}

// touch marks a clean page recently used. c.mu is held.
func (c *Cache) touch(pg *page) {
	if !pg.dirty && pg.elem != nil {
		c.clean.MoveToBack(pg.elem)
	}
}

// maxFree bounds the evicted page buffers kept for reuse.
const maxFree = 1024

// pageBuf is a page's buffer: an evicted page's, or a new one. Its
// contents are stale: the caller overwrites all of it. c.mu is held.
func (c *Cache) pageBuf() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b
	}
	return make([]byte, c.cfg.PageSize)
}

// evict drops least recently used clean pages above capacity. c.mu is held.
func (c *Cache) evict() {
	ps := int64(c.cfg.PageSize)
	for c.bytes > c.cfg.Capacity {
		e := c.clean.Front()
		if e == nil {
			return
		}
		pg := e.Value.(*page)
		c.clean.Remove(e)
		delete(pg.lun.pages, pg.idx)
		pg.lun.epoch++
		c.bytes -= ps
		if len(c.free) < maxFree {
			c.free = append(c.free, pg.data) // no one else holds a clean page's data
		}
		pg.data = nil
		c.stats.evicted.Add(1)
	}
}

// makeRoom destages the oldest dirty pages while dirty data is above the
// limit, so a writer never grows the cache past it.
func (c *Cache) makeRoom() error {
	for {
		c.mu.Lock()
		over := c.dirty >= c.cfg.DirtyLimit
		c.mu.Unlock()
		if !over {
			return nil
		}
		n, err := c.destageOldest(256)
		if err != nil {
			return err
		}
		if n == 0 { // everything dirty is being destaged by others
			c.mu.Lock()
			if c.dirty >= c.cfg.DirtyLimit {
				c.cond.Wait()
			}
			c.mu.Unlock()
		}
	}
}

// Flush destages every dirty page of LUN id and syncs its media
// (SYNCHRONIZE CACHE).
func (c *Cache) Flush(id uint64) error {
	ls, err := c.lun(id)
	if err != nil {
		return err
	}
	c.mu.Lock()
	down, gen := c.down, c.gen
	c.mu.Unlock()
	if down {
		// A crashed cache has lost what it held: nothing of it can reach
		// media now, so "flushed" would be a lie (a move would then drop
		// the mirror copies, the only ones left).
		return ErrDown
	}
	if c.cfg.Mode != None {
		if err := c.destageLUN(ls); err != nil {
			return err
		}
	}
	if err := ls.store.Sync(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return ErrDown // crashed while it flushed: what it held is gone
	}
	return nil
}

// destageLUN writes every page of the LUN that is dirty now.
func (c *Cache) destageLUN(ls *lunState) error {
	c.mu.Lock()
	gen := c.gen
	idxs := make([]int64, 0, ls.dirty)
	for idx, pg := range ls.pages {
		if pg.dirty {
			idxs = append(idxs, idx)
		}
	}
	c.mu.Unlock()
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	return c.destagePages(ls, idxs, gen)
}

// FlushAll flushes every LUN.
func (c *Cache) FlushAll() error {
	for _, ls := range c.sortedLUNs() {
		if err := c.Flush(ls.id); err != nil {
			return fmt.Errorf("LUN %d: %w", ls.id, err)
		}
	}
	return nil
}

// Unmap drops the LUN's pages in [off, off+length) and deallocates the
// range on media. Writes to the LUN wait while it runs.
func (c *Cache) Unmap(id uint64, off, length int64) error {
	return c.UnmapIf(id, off, length, nil)
}

// UnmapIf is Unmap for an unmap that may take effect only while admit
// (when set) allows, as WriteAtIf: admit is called once the unmap holds
// the LUN's ordering lock alone, which every write waits for, before it
// changes anything.
func (c *Cache) UnmapIf(id uint64, off, length int64, admit Admit) error {
	ls, err := c.lun(id)
	if err != nil {
		return err
	}
	if length <= 0 {
		return ls.store.Punch(off, length)
	}
	ls.unmap.Lock()
	defer ls.unmap.Unlock()
	if admit != nil {
		if err := admit(); err != nil {
			return err
		}
	}
	if c.cfg.Mode == None {
		return ls.store.Punch(off, length)
	}
	first, last := c.pageRange(off, int(length))
	c.mu.Lock()
	gen := c.gen
	var idxs []int64
	for idx := first; idx <= last; idx++ {
		if pg := ls.pages[idx]; pg != nil && pg.dirty {
			idxs = append(idxs, idx)
		}
	}
	c.mu.Unlock()
	// Edge pages keep bytes outside the range: put them on media first.
	if err := c.destagePages(ls, idxs, gen); err != nil {
		return err
	}
	c.mu.Lock()
	for idx := first; idx <= last; idx++ {
		c.drop(ls, idx)
	}
	ls.epoch++
	ls.unmapping++
	c.mu.Unlock()
	err = ls.store.Punch(off, length)
	c.mu.Lock()
	ls.unmapping--
	ls.epoch++ // a read that began before the punch must not fill
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.settle()
}

// drop removes a page that is not busy. c.mu is held.
func (c *Cache) drop(ls *lunState, idx int64) {
	pg := ls.pages[idx]
	if pg == nil {
		return
	}
	for pg.busy {
		c.cond.Wait()
	}
	if ls.pages[idx] != pg {
		return
	}
	if pg.elem != nil {
		if pg.dirty {
			c.dirtyQ.Remove(pg.elem)
		} else {
			c.clean.Remove(pg.elem)
		}
	}
	if pg.dirty {
		ls.dirty--
		c.dirty -= int64(c.cfg.PageSize)
	}
	delete(ls.pages, idx)
	c.bytes -= int64(c.cfg.PageSize)
}

func (c *Cache) sortedLUNs() []*lunState {
	out := make([]*lunState, 0, len(c.luns))
	for _, ls := range c.luns {
		out = append(out, ls)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// Mapped reports the provisioning of LUN id from byte off (GET LBA
// STATUS): whether the bytes from off are mapped, held by a page not yet
// on media or allocated on the media, and where that run ends.
func (c *Cache) Mapped(id uint64, off int64) (end int64, mapped bool, err error) {
	ls, err := c.lun(id)
	if err != nil {
		return 0, false, err
	}
	if off < 0 || off >= ls.store.Size() {
		return 0, false, media.ErrRange
	}
	// The pages first, then the media: a page destaged in between is on
	// the media by the time it is asked (it is written before it is
	// marked clean), so no write is ever reported deallocated.
	ps := int64(c.cfg.PageSize)
	cut := ls.store.Size() // where the first page still to be written begins
	c.mu.Lock()
	for idx, pg := range ls.pages {
		if !pg.dirty && !pg.busy {
			continue
		}
		s, e := idx*ps, (idx+1)*ps
		if e <= off {
			continue
		}
		if s <= off {
			c.mu.Unlock()
			return min(e, ls.store.Size()), true, nil
		}
		cut = min(cut, s)
	}
	c.mu.Unlock()
	end, mapped, err = media.Run(ls.store, off)
	if err != nil || mapped {
		return end, mapped, err
	}
	return min(end, cut), false, nil
}
