package cache

import (
	"errors"
	"fmt"
	"sort"
)

// maxRun bounds one media write of contiguous dirty pages.
const maxRun = 1 << 20

// run is contiguous dirty pages of one LUN copied for one media write.
type run struct {
	ls    *lunState
	off   int64
	buf   []byte
	pages []*page
	vers  []uint64
}

// take marks pg busy and takes it off the dirty queue. c.mu is held.
func (c *Cache) take(pg *page) {
	if pg.elem != nil {
		c.dirtyQ.Remove(pg.elem)
		pg.elem = nil
	}
	pg.busy = true
}

// runsOf copies pages (sorted by LUN and index, all taken) into runs. c.mu is held.
func (c *Cache) runsOf(pages []*page) []*run {
	ps := int64(c.cfg.PageSize)
	var out []*run
	var cur *run
	for _, pg := range pages {
		if cur == nil || cur.ls != pg.lun || cur.off+int64(len(cur.buf)) != pg.idx*ps || len(cur.buf) >= maxRun {
			cur = &run{ls: pg.lun, off: pg.idx * ps}
			out = append(out, cur)
		}
		cur.buf = append(cur.buf, pg.data...)
		cur.pages = append(cur.pages, pg)
		cur.vers = append(cur.vers, pg.ver)
	}
	return out
}

// write puts a run on media (clipped to the store's size).
func (r *run) write() error {
	buf := r.buf
	if lim := r.ls.store.Size() - r.off; int64(len(buf)) > lim {
		buf = buf[:max(lim, 0)]
	}
	return r.ls.store.WriteAt(buf, r.off)
}

// finish ends a destage: a page whose version did not move while it was
// written is clean now and its mirror copies are released; others stay
// dirty. Work that a crash overtook (gen moved) is void.
func (c *Cache) finish(runs []*run, gen uint64, failed map[*run]bool) {
	releases := map[uint64][]MirrorPage{}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.cond.Broadcast()
	c.writing--
	if c.gen != gen {
		return
	}
	for _, r := range runs {
		for i, pg := range r.pages {
			pg.busy = false
			if !failed[r] && pg.ver == r.vers[i] {
				pg.dirty = false
				pg.lun.dirty--
				c.dirty -= int64(c.cfg.PageSize)
				pg.elem = c.clean.PushBack(pg)
				c.stats.destaged.Add(1)
				releases[r.ls.id] = append(releases[r.ls.id], MirrorPage{Idx: pg.idx, Ver: r.vers[i]})
			} else {
				pg.elem = c.dirtyQ.PushBack(pg)
			}
		}
		r.ls.epoch++
	}
	for id, rs := range releases {
		for _, p := range c.peers {
			p.mirror.release(id, rs)
		}
		if c.remote != nil {
			c.remote.Release(id, rs)
		}
	}
	c.evict()
}

// writeRuns writes runs and finishes them; it returns the first error.
func (c *Cache) writeRuns(runs []*run, gen uint64) error {
	var first error
	var failed map[*run]bool
	for _, r := range runs {
		var err error
		if c.gate != nil && !c.gate(r.ls.id) {
			err = fmt.Errorf("%w: LUN %d", ErrNotHeld, r.ls.id)
		} else {
			err = r.write()
		}
		if err != nil {
			if failed == nil {
				failed = map[*run]bool{}
			}
			failed[r] = true
			if first == nil {
				first = err
			}
		}
	}
	c.finish(runs, gen, failed)
	return first
}

// destagePages writes the listed pages of a LUN (sorted indices) that are
// dirty, waiting for any already being written. ErrDown if the node
// crashes meanwhile.
func (c *Cache) destagePages(ls *lunState, idxs []int64, gen uint64) error {
	if len(idxs) == 0 {
		return nil
	}
	c.mu.Lock()
	var got []*page
	for _, idx := range idxs {
		for {
			if c.gen != gen {
				c.mu.Unlock()
				return ErrDown
			}
			pg := ls.pages[idx]
			if pg == nil || !pg.dirty {
				break
			}
			if pg.busy {
				c.cond.Wait()
				continue
			}
			c.take(pg)
			got = append(got, pg)
			break
		}
	}
	runs := c.runsOf(got)
	c.writing++
	c.mu.Unlock()
	return c.writeRuns(runs, gen)
}

// destageOldest writes up to n of the oldest dirty pages that are not
// busy, in LUN and block order, and reports how many it took.
func (c *Cache) destageOldest(n int) (int, error) {
	c.mu.Lock()
	gen := c.gen
	var got []*page
	for e := c.dirtyQ.Front(); e != nil && len(got) < n; {
		next := e.Next()
		pg := e.Value.(*page)
		c.take(pg)
		got = append(got, pg)
		e = next
	}
	sort.Slice(got, func(i, j int) bool {
		if got[i].lun.id != got[j].lun.id {
			return got[i].lun.id < got[j].lun.id
		}
		return got[i].idx < got[j].idx
	})
	runs := c.runsOf(got)
	c.writing++
	c.mu.Unlock()
	return len(got), c.writeRuns(runs, gen)
}

// destager writes dirty data back in the background, one pass a tick.
func (c *Cache) destager() {
	defer c.wg.Done()
	t := c.cfg.Clock.NewTicker(c.cfg.DestageInterval)
	defer t.Stop()
	var seen uint64
	for {
		select {
		case <-c.quit:
			return
		case <-t.C():
		}
		c.DestagePass(&seen)
	}
}

// DestagePass is one wake-up of the destager: down to a quarter of the
// dirty limit when above half of it, and everything when no write came in
// since the previous pass (seen carries the write count between passes).
// The array's simulation calls it in place of the destager goroutine.
func (c *Cache) DestagePass(seen *uint64) {
	c.mu.Lock()
	high, idle, down := c.dirty > c.cfg.DirtyLimit/2, c.writes == *seen && c.dirty > 0, c.down
	*seen = c.writes
	c.mu.Unlock()
	switch {
	case down:
	case high:
		for {
			c.mu.Lock()
			more := c.dirty > c.cfg.DirtyLimit/4 && !c.down
			c.mu.Unlock()
			if !more {
				break
			}
			if n, err := c.destageOldest(256); n == 0 || err != nil {
				break
			}
		}
	case idle:
		for _, ls := range c.sortedLUNs() {
			if err := c.destageLUN(ls); err != nil && !errors.Is(err, ErrNotHeld) {
				break
			}
		}
	}
}

// DestageSome writes up to n of the oldest dirty pages to media and
// reports how many it wrote: a slice of background destage, for the
// simulation to interleave with other events.
func (c *Cache) DestageSome(n int) (int, error) { return c.destageOldest(n) }
