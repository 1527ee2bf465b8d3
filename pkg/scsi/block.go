package scsi

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// rwArgs are the decoded fields of a block command CDB.
type rwArgs struct {
	lba    uint64
	blocks uint64
	flags  byte // byte 1: xPROTECT, DPO, FUA, ...
}

// decodeRW decodes the LBA and transfer length of the 6/10/12/16-byte
// READ/WRITE/VERIFY/WRITE AND VERIFY/PRE-FETCH/SYNC CACHE family (SBC-3 5).
func decodeRW(cdb []byte) rwArgs {
	switch cdb[0] >> 5 {
	case 0: // 6-byte
		n := uint64(cdb[4])
		if n == 0 && (cdb[0] == OpRead6 || cdb[0] == OpWrite6) {
			n = 256 // SBC-3 5.7: zero means 256 blocks
		}
		return rwArgs{lba: uint64(cdb[1]&0x1f)<<16 | uint64(be16(cdb[2:])), blocks: n}
	case 1, 2: // 10-byte
		return rwArgs{lba: uint64(be32(cdb[2:])), blocks: uint64(be16(cdb[7:])), flags: cdb[1]}
	case 5: // 12-byte
		return rwArgs{lba: uint64(be32(cdb[2:])), blocks: uint64(be32(cdb[6:])), flags: cdb[1]}
	case 4: // 16-byte
		return rwArgs{lba: be64(cdb[2:]), blocks: uint64(be32(cdb[10:])), flags: cdb[1]}
	}
	return rwArgs{}
}

// checkRange rejects an access past the end of the medium (SBC-3 4.5).
func (x *exec) checkRange(lba, n uint64) error {
	end := lba + n
	if end < lba || end > x.lu.blocks() || lba > x.lu.blocks() {
		return Sense(ReasonLBAOutOfRange)
	}
	return nil
}

func (x *exec) off(lba uint64) int64 { return int64(lba) * int64(x.lu.blockSize()) }

func (x *exec) via() uint16 { return x.c.Nexus.TargetPort }

func mediaErr(err error, write bool) error {
	if _, ok := err.(*SenseError); ok {
		return err
	}
	// The array's "owner failed, failover in progress": the LU is
	// transitioning (SPC-4 5.15.2.4.6), so the host retries.
	var ab interface{ TaskAborted() bool }
	if errors.As(err, &ab) && ab.TaskAborted() {
		return statusErr(StatusTaskAborted)
	}
	var tr interface{ ALUATransitioning() bool }
	if errors.As(err, &tr) && tr.ALUATransitioning() {
		return Sense(ReasonNotReadyTransitioning)
	}
	if write {
		return Sense(ReasonMediumWriteError)
	}
	return Sense(ReasonMediumReadError)
}

func read6(x *exec) ([]byte, error) { return x.read(decodeRW(x.cdb())) }

func readN(x *exec) ([]byte, error) {
	a := decodeRW(x.cdb())
	if a.flags&0xe0 != 0 { // RDPROTECT: no protection information here
		return nil, InvalidCDBField(1, 7)
	}
	return x.read(a)
}

func (x *exec) read(a rwArgs) ([]byte, error) {
	if err := x.checkRange(a.lba, a.blocks); err != nil {
		return nil, err
	}
	if a.blocks > MaxTransferBlocks {
		return nil, InvalidCDBField(7, 7)
	}
	if a.blocks == 0 {
		return nil, nil
	}
	n := int(a.blocks) * x.lu.blockSize()
	if rb, ok := x.lu.cfg.Backend.(RefBackend); ok && n >= minRefRead && x.c.Releases && !x.noLend {
		b, ref, err := rb.ReadRef(x.via(), x.off(a.lba), n)
		if err != nil {
			return nil, x.lu.countMediaErr(mediaErr(err, false))
		}
		if b != nil {
			x.buf = lent(b, ref)
			return b, nil
		}
	}
	pb := getBuffer(n)
	var buf []byte
	if pb != nil {
		buf = pb.b
	} else {
		buf = make([]byte, n)
	}
	if err := x.lu.cfg.Backend.ReadAt(x.via(), buf, x.off(a.lba)); err != nil {
		pb.Release()
		return nil, x.lu.countMediaErr(mediaErr(err, false))
	}
	x.buf = pb
	return buf, nil
}

func write6(x *exec) ([]byte, error) { return nil, x.write(decodeRW(x.cdb()), false) }

func writeN(x *exec) ([]byte, error) {
	a := decodeRW(x.cdb())
	if a.flags&0xe0 != 0 { // WRPROTECT
		return nil, InvalidCDBField(1, 7)
	}
	return nil, x.write(a, a.flags&0x08 != 0)
}

// writeVerify implements WRITE AND VERIFY (SBC-3 5.34..5.36): the data is
// written with FUA semantics, so the verify reads back what the medium holds.
func writeVerify(x *exec) ([]byte, error) {
	a := decodeRW(x.cdb())
	if a.flags&0xe0 != 0 {
		return nil, InvalidCDBField(1, 7)
	}
	if err := x.write(a, true); err != nil {
		return nil, err
	}
	return nil, nil
}

// write writes the data-out buffer: the transfer length's worth of it,
// or the whole blocks carried when the transport carried fewer (see
// dataOut for the rest).
func (x *exec) write(a rwArgs, fua bool) error {
	bs := x.lu.blockSize()
	x.dataOutLen = int(a.blocks) * bs
	if err := x.checkRange(a.lba, a.blocks); err != nil {
		return err
	}
	if a.blocks > MaxTransferBlocks {
		return InvalidCDBField(7, 7)
	}
	if err := x.writable(); err != nil {
		return err
	}
	if a.blocks == 0 {
		return nil
	}
	need := int(a.blocks) * bs
	data := x.c.Data
	if len(data) >= need || len(data)%bs != 0 {
		var err error
		if data, err = x.dataOut(need); err != nil {
			return err
		}
	} else if len(data) == 0 {
		return nil // nothing carried: nothing written, all of it the residual
	}
	// Whole blocks only (fewer than asked): those are written and the
	// residual says the rest was not, as RFC 7143 11.4.5.1 allows.
	x.lu.rw.RLock()
	defer x.lu.rw.RUnlock()
	return x.writeAt(data, x.off(a.lba), fua)
}

// dataOut takes the n bytes of data-out the CDB asks for. A transport
// that carried fewer (iSCSI EDTL below the CDB's length) gets INVALID
// FIELD IN COMMAND INFORMATION UNIT and nothing is done, as LIO answers;
// one that carried more has the rest ignored. Either way the fabric
// reports the residual against n (SAM-5 5.4.3, RFC 7143 11.4.5.1).
func (x *exec) dataOut(n int) ([]byte, error) {
	x.dataOutLen = n
	if len(x.c.Data) < n {
		return nil, Sense(ReasonInvalidFieldInIU)
	}
	return x.c.Data[:n], nil
}

// dataOutExact is dataOut for a command whose data-out is not a run of
// blocks that can be cut short or left over (WRITE SAME's one block,
// COMPARE AND WRITE's verify and write halves): any other amount gets
// INVALID FIELD IN COMMAND INFORMATION UNIT and nothing is done.
func (x *exec) dataOutExact(n int) ([]byte, error) {
	x.dataOutLen = n
	if len(x.c.Data) != n {
		return nil, Sense(ReasonInvalidFieldInIU)
	}
	return x.c.Data, nil
}

// writeAt writes to the LU's backend. With the write cache disabled
// (WCE=0) every write is on stable media before GOOD, as with FUA
// (SBC-3 6.4.5).
// A task a PREEMPT AND ABORT aborted is not carried out (TASK ABORTED).
func (x *exec) writeAt(p []byte, off int64, fua bool) error {
	fua = fua || x.lu.writeThrough.Load()
	var err error
	if g, ok := x.lu.cfg.Backend.(GuardedBackend); ok {
		err = g.WriteAtIf(x.via(), p, off, fua, x)
	} else if !x.live() {
		return statusErr(StatusTaskAborted)
	} else {
		err = x.lu.cfg.Backend.WriteAt(x.via(), p, off, fua)
	}
	if err != nil {
		return x.lu.countMediaErr(mediaErr(err, true))
	}
	return nil
}

// unmapAt deallocates through the LU's backend, as writeAt writes.
func (x *exec) unmapAt(off, length int64) error {
	var err error
	if g, ok := x.lu.cfg.Backend.(GuardedBackend); ok {
		err = g.UnmapIf(x.via(), off, length, x)
	} else if !x.live() {
		return statusErr(StatusTaskAborted)
	} else {
		err = x.lu.cfg.Backend.Unmap(x.via(), off, length)
	}
	if err != nil {
		return mediaErr(err, true)
	}
	return nil
}

func (x *exec) writable() error {
	if x.lu.cfg.ReadOnly {
		return Sense(ReasonWriteProtected)
	}
	x.lu.mu.Lock()
	swp := x.lu.mode.swp
	x.lu.mu.Unlock()
	if swp {
		return Sense(ReasonWriteProtected)
	}
	return nil
}

// verify implements VERIFY 10/12/16 (SBC-3 5.29..5.31).
func verify(x *exec) ([]byte, error) {
	a := decodeRW(x.cdb())
	if a.flags&0xe0 != 0 { // VRPROTECT
		return nil, InvalidCDBField(1, 7)
	}
	bytchk := (a.flags >> 1) & 3
	bs := x.lu.blockSize()
	switch bytchk {
	case 1:
		x.dataOutLen = int(a.blocks) * bs
	case 3:
		x.dataOutLen = bs
	case 2:
		return nil, InvalidCDBField(1, 2)
	}
	if err := x.checkRange(a.lba, a.blocks); err != nil {
		return nil, err
	}
	if a.blocks > MaxTransferBlocks {
		return nil, InvalidCDBField(7, 7)
	}
	if a.blocks == 0 || bytchk == 0 {
		return nil, nil
	}
	if _, err := x.dataOut(x.dataOutLen); err != nil {
		return nil, err
	}
	x.noLend = true // compared here, by Go code: not the media's own bytes
	buf, err := x.read(a)
	if err != nil {
		return nil, err
	}
	defer func() { x.buf.Release(); x.buf = nil }() // compared, not sent
	for i := 0; i < int(a.blocks); i++ {
		want := x.c.Data[:bs]
		if bytchk == 1 {
			want = x.c.Data[i*bs : (i+1)*bs]
		}
		if j := firstDiff(buf[i*bs:(i+1)*bs], want); j >= 0 {
			off := uint64(i*bs + j)
			return nil, &SenseError{Reason: ReasonMiscompare, Info: off, HasInfo: true}
		}
	}
	return nil, nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// prefetch implements PRE-FETCH 10/16 (SBC-3 5.9, 5.10).
func prefetch(x *exec) ([]byte, error) {
	a := decodeRW(x.cdb())
	if x.cdb()[0] == OpPrefetch10 {
		a.blocks = uint64(be16(x.cdb()[7:]))
	}
	return nil, x.checkRange(a.lba, a.blocks)
}

// syncCache implements SYNCHRONIZE CACHE 10/16 (SBC-3 5.22, 5.23).
func syncCache(x *exec) ([]byte, error) {
	a := decodeRW(x.cdb())
	if x.cdb()[0] == OpSyncCache10 {
		a.blocks = uint64(be16(x.cdb()[7:]))
	}
	if err := x.checkRange(a.lba, a.blocks); err != nil {
		return nil, err
	}
	if err := x.lu.cfg.Backend.Flush(x.via()); err != nil {
		return nil, mediaErr(err, true)
	}
	return nil, nil
}

// writeSame implements WRITE SAME 10/16 (SBC-3 5.42, 5.43) including the
// UNMAP bit (thin provisioning) and NDOB (SBC-4).
func writeSame(x *exec) ([]byte, error) {
	cdb := x.cdb()
	a := decodeRW(cdb)
	if cdb[0] == OpWriteSame10 {
		a.blocks = uint64(be16(cdb[7:]))
	}
	bs := x.lu.blockSize()
	ndob := cdb[0] == OpWriteSame16 && cdb[1]&0x01 != 0
	if !ndob {
		x.dataOutLen = bs
	}
	if a.flags&0xe0 != 0 {
		return nil, InvalidCDBField(1, 7)
	}
	if a.flags&0x10 != 0 { // ANCHOR: anchored state is not supported
		return nil, InvalidCDBField(1, 4)
	}
	if a.blocks == 0 { // WSNZ=1 in the Block Limits page
		return nil, InvalidCDBField(10, 7)
	}
	if a.blocks > MaxWriteSameBlocks {
		return nil, InvalidCDBField(10, 7)
	}
	if err := x.checkRange(a.lba, a.blocks); err != nil {
		return nil, err
	}
	if err := x.writable(); err != nil {
		return nil, err
	}
	var block []byte
	if ndob {
		block = make([]byte, bs)
	} else {
		var err error
		if block, err = x.dataOutExact(bs); err != nil {
			return nil, err
		}
	}
	x.lu.rw.RLock()
	defer x.lu.rw.RUnlock()
	if a.flags&0x08 != 0 && allZero(block) { // UNMAP with zeroed data: deallocate
		return nil, x.unmapAt(x.off(a.lba), int64(a.blocks)*int64(bs))
	}
	const chunkBlocks = 2048
	buf := bytes.Repeat(block, int(min(a.blocks, chunkBlocks)))
	for done := uint64(0); done < a.blocks; {
		n := min(a.blocks-done, chunkBlocks)
		if err := x.writeAt(buf[:int(n)*bs], x.off(a.lba+done), false); err != nil {
			return nil, err
		}
		done += n
	}
	return nil, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// unmap implements UNMAP (SBC-3 5.28).
func unmap(x *exec) ([]byte, error) {
	cdb := x.cdb()
	if cdb[1]&0x01 != 0 { // ANCHOR
		return nil, InvalidCDBField(1, 0)
	}
	plen := int(be16(cdb[7:]))
	x.dataOutLen = plen
	if plen == 0 {
		return nil, nil
	}
	if plen < 8 {
		return nil, Sense(ReasonParamListLength)
	}
	d, err := x.dataOut(plen)
	if err != nil {
		return nil, err
	}
	if err := x.writable(); err != nil {
		return nil, err
	}
	descLen := int(be16(d[2:]))
	if descLen > plen-8 {
		descLen = (plen - 8) &^ 15
	}
	descs := d[8 : 8+descLen&^15]
	if len(descs)/16 > MaxUnmapDescs {
		return nil, Sense(ReasonInvalidFieldInParam)
	}
	type ext struct{ lba, n uint64 }
	var exts []ext
	for i := 0; i+16 <= len(descs); i += 16 {
		e := ext{be64(descs[i:]), uint64(be32(descs[i+8:]))}
		if e.n > MaxUnmapBlocks {
			return nil, Sense(ReasonInvalidFieldInParam)
		}
		if err := x.checkRange(e.lba, e.n); err != nil {
			return nil, err
		}
		exts = append(exts, e)
	}
	bs := int64(x.lu.blockSize())
	x.lu.rw.RLock()
	defer x.lu.rw.RUnlock()
	for _, e := range exts {
		if e.n == 0 {
			continue
		}
		if err := x.unmapAt(int64(e.lba)*bs, int64(e.n)*bs); err != nil {
			return nil, mediaErr(err, true)
		}
	}
	return nil, nil
}

// compareAndWrite implements COMPARE AND WRITE (SBC-3 5.2), atomically
// against every other write to the LU.
func compareAndWrite(x *exec) ([]byte, error) {
	cdb := x.cdb()
	lba := be64(cdb[2:])
	n := uint64(cdb[13])
	bs := x.lu.blockSize()
	x.dataOutLen = 2 * int(n) * bs
	if cdb[1]&0xe0 != 0 {
		return nil, InvalidCDBField(1, 7)
	}
	if n > MaxCAWBlocks {
		return nil, InvalidCDBField(13, 7)
	}
	if err := x.checkRange(lba, n); err != nil {
		return nil, err
	}
	if n == 0 {
		if len(x.c.Data) > 0 { // data sent for a zero-length compare
			return nil, InvalidCDBField(13, 7)
		}
		return nil, nil
	}
	if err := x.writable(); err != nil {
		return nil, err
	}
	data, err := x.dataOutExact(x.dataOutLen)
	if err != nil {
		return nil, err
	}
	size := int(n) * bs
	x.lu.rw.Lock()
	defer x.lu.rw.Unlock()
	cur := make([]byte, size)
	be := x.lu.cfg.Backend
	if err := be.ReadAt(x.via(), cur, x.off(lba)); err != nil {
		return nil, mediaErr(err, false)
	}
	if i := firstDiff(cur, data[:size]); i >= 0 {
		return nil, &SenseError{Reason: ReasonMiscompare, Info: uint64(i), HasInfo: true}
	}
	return nil, x.writeAt(data[size:], x.off(lba), cdb[1]&0x08 != 0)
}

// orWrite implements ORWRITE(16) (SBC-3 5.8) as a single-command OR of the
// data-out buffer into the medium, atomic against other writes.
func orWrite(x *exec) ([]byte, error) {
	a := decodeRW(x.cdb())
	bs := x.lu.blockSize()
	x.dataOutLen = int(a.blocks) * bs
	if a.flags&0xe0 != 0 { // ORPROTECT
		return nil, InvalidCDBField(1, 7)
	}
	if err := x.checkRange(a.lba, a.blocks); err != nil {
		return nil, err
	}
	if a.blocks > MaxTransferBlocks {
		return nil, InvalidCDBField(10, 7)
	}
	if a.blocks == 0 {
		return nil, nil
	}
	if err := x.writable(); err != nil {
		return nil, err
	}
	data, err := x.dataOut(x.dataOutLen)
	if err != nil {
		return nil, err
	}
	x.lu.rw.Lock()
	defer x.lu.rw.Unlock()
	cur := make([]byte, x.dataOutLen)
	be := x.lu.cfg.Backend
	if err := be.ReadAt(x.via(), cur, x.off(a.lba)); err != nil {
		return nil, mediaErr(err, false)
	}
	for i := range cur {
		cur[i] |= data[i]
	}
	return nil, x.writeAt(cur, x.off(a.lba), a.flags&0x08 != 0)
}

// readDefect answers READ DEFECT DATA 10/12 (SBC-3 5.19, 5.20) with an
// empty list in the requested format.
func readDefect(x *exec) ([]byte, error) {
	cdb := x.cdb()
	if cdb[0] == OpReadDefect10 {
		b := make([]byte, 4)
		b[1] = cdb[2] & 0x1f
		return alloc(b, int(be16(cdb[7:]))), nil
	}
	b := make([]byte, 8)
	b[1] = cdb[1] & 0x1f
	return alloc(b, int(be32(cdb[6:]))), nil
}

var _ = binary.BigEndian
