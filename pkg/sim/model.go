package sim

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// model is what the hosts know of the data: per LUN block, the last write
// acknowledged GOOD, the writes that ended otherwise since (they may or
// may not have landed), whether the acknowledged data was made durable
// (FUA, SYNCHRONIZE CACHE) and how many node crashes came before its
// acknowledgement. Every block written carries its write's id, so a read
// says exactly which write it returned.
type model struct {
	w      *World
	blocks map[uint64][]block
	nextID uint64
	// lostAt is, per (LUN, cache page), the crash count at which the
	// array last reported that page lost.
	lostAt map[pageKey]int
}

type pageKey struct {
	lun  uint64
	page int64
}

type block struct {
	acked   uint64
	ackAt   int
	durable bool
	maybe   []uint64
	// hist holds earlier acknowledged ids (the values an old copy can hold).
	hist []uint64
}

func newModel(w *World) *model {
	return &model{w: w, blocks: map[uint64][]block{}, lostAt: map[pageKey]int{}}
}

func (m *model) lun(l *array.LUN) []block {
	b := m.blocks[l.ID]
	if b == nil {
		b = make([]block, l.Size/int64(l.BlockSize))
		m.blocks[l.ID] = b
	}
	return b
}

// blockData is the content of one block of write id (id 0: zeros).
func blockData(id uint64, bs int) []byte {
	b := make([]byte, bs)
	if id == 0 {
		return b
	}
	binary.LittleEndian.PutUint64(b, id)
	binary.LittleEndian.PutUint64(b[8:], ^id)
	for i := 16; i < bs; i++ {
		b[i] = byte(id)
	}
	return b
}

// parseBlock returns the write id a block holds, or false if it is torn
// or holds data no write sent.
func parseBlock(b []byte) (uint64, bool) {
	id := binary.LittleEndian.Uint64(b)
	if id == 0 {
		for _, c := range b {
			if c != 0 {
				return 0, false
			}
		}
		return 0, true
	}
	if binary.LittleEndian.Uint64(b[8:]) != ^id {
		return 0, false
	}
	for _, c := range b[16:] {
		if c != byte(id) {
			return 0, false
		}
	}
	return id, true
}

// io runs a data command of a host event: read, write, ws, unmap, caw or
// sync, with lba= and n= (blocks), and fua=1 for a write.
func (m *model) io(h *host, l *array.LUN, e Event) string {
	bs := l.BlockSize
	nblocks := l.Size / int64(bs)
	lba := e.optInt("lba", 0) % nblocks
	if lba < 0 {
		lba += nblocks
	}
	n := max(min(e.optInt("n", 1), nblocks-lba, 256), 1)
	switch e.Verb {
	case "read":
		cdb := rw16(scsi.OpRead16, lba, n, false)
		r, ok := h.send(l.ID, cdb, nil, int(n)*bs)
		if ok && r.Status == scsi.StatusGood {
			m.check(h, l, lba, r.Data)
		}
		return outcome(r, ok)
	case "write", "ws":
		m.nextID++
		id := m.nextID
		var cdb, data []byte
		fua := e.Opts["fua"] == "1"
		if e.Verb == "write" {
			cdb = rw16(scsi.OpWrite16, lba, n, fua)
			for range n {
				data = append(data, blockData(id, bs)...)
			}
		} else {
			cdb = rw16(scsi.OpWriteSame16, lba, n, false)
			fua = false
			data = blockData(id, bs)
		}
		r, ok := h.send(l.ID, cdb, data, 0)
		m.wrote(l, lba, n, id, ok && r.Status == scsi.StatusGood, fua)
		return outcome(r, ok)
	case "unmap":
		param := make([]byte, 24)
		binary.BigEndian.PutUint16(param, 22)
		binary.BigEndian.PutUint16(param[2:], 16)
		put64(param[8:], uint64(lba))
		put32(param[16:], uint32(n))
		cdb := []byte{scsi.OpUnmap, 0, 0, 0, 0, 0, 0, 0, 24, 0}
		r, ok := h.send(l.ID, cdb, param, 0)
		m.wrote(l, lba, n, 0, ok && r.Status == scsi.StatusGood, false)
		return outcome(r, ok)
	case "caw":
		return m.compareAndWrite(h, l, lba)
	case "sync":
		cdb := []byte{scsi.OpSyncCache16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		r, ok := h.send(l.ID, cdb, nil, 0)
		if ok && r.Status == scsi.StatusGood {
			// What the cache still holds is on media now; what a crash
			// already took (reported lost since) is not brought back.
			per := int64(pageSize / l.BlockSize)
			for i, b := range m.lun(l) {
				if len(b.maybe) == 0 && m.lostAt[pageKey{l.ID, int64(i) / per}] <= b.ackAt {
					m.blocks[l.ID][i].durable = true
				}
			}
		}
		return outcome(r, ok)
	}
	return "unknown"
}

func rw16(op byte, lba, n int64, fua bool) []byte {
	cdb := make([]byte, 16)
	cdb[0] = op
	if fua {
		cdb[1] = 0x08
	}
	put64(cdb[2:], uint64(lba))
	put32(cdb[10:], uint32(n))
	return cdb
}

func outcome(r scsi.Response, ok bool) string {
	switch {
	case !ok:
		return "no path"
	case r.Status == scsi.StatusGood:
		return "GOOD"
	case r.Status == scsi.StatusCheckCondition:
		return "CHECK CONDITION " + senseString(r)
	}
	return fmt.Sprintf("status 0x%02x", byte(r.Status))
}

// compareAndWrite compares one block with the acknowledged data and
// writes a new one; a miscompare is followed by a read that the model
// checks.
func (m *model) compareAndWrite(h *host, l *array.LUN, lba int64) string {
	bs := l.BlockSize
	b := m.lun(l)[lba]
	m.nextID++
	id := m.nextID
	data := append(blockData(b.acked, bs), blockData(id, bs)...)
	cdb := make([]byte, 16)
	cdb[0] = scsi.OpCompareAndWrite
	put64(cdb[2:], uint64(lba))
	cdb[13] = 1
	r, ok := h.send(l.ID, cdb, data, 0)
	if ok && r.Status == scsi.StatusCheckCondition && senseOf(r).Key == 0x0e {
		// Miscompare: nothing was written. What is there?
		rr, ok2 := h.send(l.ID, rw16(scsi.OpRead16, lba, 1, false), nil, bs)
		if ok2 && rr.Status == scsi.StatusGood {
			m.check(h, l, lba, rr.Data)
			if got, _ := parseBlock(rr.Data); got == b.acked && len(b.maybe) == 0 {
				m.w.fail("caw-false-miscompare", "LUN %d LBA %d holds write %d, the compare data, yet COMPARE AND WRITE miscompared",
					l.ID, lba, got)
			}
		}
		return "MISCOMPARE"
	}
	m.wrote(l, lba, 1, id, ok && r.Status == scsi.StatusGood, false)
	return outcome(r, ok)
}

// wrote records a write of id (0: zeros) to [lba, lba+n): acknowledged,
// or possibly landed.
func (m *model) wrote(l *array.LUN, lba, n int64, id uint64, good, fua bool) {
	bl := m.lun(l)
	for i := lba; i < lba+n; i++ {
		b := &bl[i]
		if !good {
			if !slices.Contains(b.maybe, id) {
				b.maybe = append(b.maybe, id)
			}
			continue
		}
		if b.acked != id || len(b.maybe) > 0 {
			// Older values a lost write can leave behind: the one acked
			// before, and writes that failed but may have reached media.
			b.hist = append(append(b.hist, b.acked), b.maybe...)
			if len(b.hist) > 256 {
				b.hist = b.hist[len(b.hist)-256:]
			}
		}
		b.acked, b.ackAt, b.durable, b.maybe = id, m.w.crashes, fua, nil
	}
}

// lossAllowed: the acknowledged data of b may be gone: it is not on
// stable media and enough nodes failed since (one with mirroring off, two
// with it on).
func (m *model) lossAllowed(b *block) bool {
	k := m.w.crashes - b.ackAt
	return !b.durable && (k >= 2 || (!m.w.top.mirror && k >= 1))
}

// check compares a GOOD read of blocks from lba with the model.
func (m *model) check(h *host, l *array.LUN, lba int64, data []byte) {
	bs := l.BlockSize
	bl := m.lun(l)
	for i := 0; i*bs < len(data); i++ {
		at := lba + int64(i)
		b := &bl[at]
		got, ok := parseBlock(data[i*bs : (i+1)*bs])
		m.w.stats.Verified++
		if !ok {
			m.w.fail("torn-block", "host %s read LUN %d LBA %d: the block holds no whole write", h.name, l.ID, at)
			return
		}
		if got == b.acked || slices.Contains(b.maybe, got) {
			continue
		}
		if got != 0 && !slices.Contains(b.hist, got) {
			m.w.fail("foreign-data", "host %s read LUN %d LBA %d: write %d was never acknowledged there (expected %d)",
				h.name, l.ID, at, got, b.acked)
			return
		}
		// An older value: the acknowledged write was lost.
		if !m.lossAllowed(b) {
			m.w.fail("acked-write-lost", "host %s read LUN %d LBA %d: write %d, not the acknowledged write %d (crashes since: %d, durable: %v, mirror: %v)",
				h.name, l.ID, at, got, b.acked, m.w.crashes-b.ackAt, b.durable, m.w.top.mirror)
			return
		}
		if m.lostAt[pageKey{l.ID, at * int64(bs) / pageSize}] <= b.ackAt {
			m.w.fail("silent-loss", "host %s read LUN %d LBA %d: write %d, not the acknowledged write %d, and no crash reported that page lost",
				h.name, l.ID, at, got, b.acked)
			return
		}
		// Resynchronised on the older value. Its acknowledgement came no
		// later than the lost one's, so ackAt stays (a bound that errs on
		// the strict side).
		b.hist = append(b.hist, b.acked)
		b.acked, b.maybe = got, nil
	}
}

// lost records a crash's loss report and checks it: a page may be
// reported lost only if one of its blocks could have lost data.
func (m *model) lost(ls []array.Loss) {
	for _, loss := range ls {
		l := m.w.arr.LUN(loss.LUN)
		if l == nil {
			m.w.fail("false-loss-report", "a loss of unknown LUN %d was reported", loss.LUN)
			return
		}
		bl := m.lun(l)
		per := int64(pageSize / l.BlockSize)
		for _, pg := range loss.PageIdx {
			m.lostAt[pageKey{l.ID, pg}] = m.w.crashes
			justified := false
			for i := pg * per; i < (pg+1)*per && i < int64(len(bl)); i++ {
				if len(bl[i].maybe) > 0 || m.lossAllowed(&bl[i]) {
					justified = true
					break
				}
			}
			if !justified {
				m.w.fail("false-loss-report", "LUN %d page %d was reported lost, but every write in it must survive (mirror: %v)",
					l.ID, pg, m.w.top.mirror)
				return
			}
		}
	}
}

// verifyAll reads back every block of every LUN the model knows, in runs:
// through the first host that uses the LUN and can read it (a host whose
// paths reach only standby groups cannot), else straight from the owner
// node (an auditor's read below the SCSI layer). It returns how many
// blocks could not be read at all.
func (m *model) verifyAll() int {
	pending := 0
	auditor := &host{name: "(auditor)"}
	for _, l := range m.w.arr.LUNs {
		bl, ok := m.blocks[l.ID]
		if !ok {
			continue
		}
		for lba := int64(0); lba < int64(len(bl)); lba += 64 {
			n := min(64, int64(len(bl))-lba)
			data, by := m.readBack(l, lba, n)
			if data == nil {
				pending += int(n)
				continue
			}
			if by == nil {
				by = auditor
			}
			m.check(by, l, lba, data)
			if m.w.viol != nil {
				return pending
			}
		}
	}
	return pending
}

func (m *model) readBack(l *array.LUN, lba, n int64) ([]byte, *host) {
	for _, h := range m.w.hosts {
		if !h.uses(l.ID) {
			continue
		}
		r, ok := h.send(l.ID, rw16(scsi.OpRead16, lba, n, false), nil, int(n)*l.BlockSize)
		if ok && r.Status == scsi.StatusGood {
			return r.Data, h
		}
	}
	owner := l.Owner()
	if !owner.Up() || len(owner.Ports) == 0 {
		return nil, nil
	}
	buf := make([]byte, int(n)*l.BlockSize)
	if err := l.ReadAt(owner.Ports[0].RelativeID, buf, lba*int64(l.BlockSize)); err != nil {
		return nil, nil
	}
	return buf, nil
}
