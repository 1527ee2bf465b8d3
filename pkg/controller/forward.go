package controller

import (
	"encoding/binary"
	"fmt"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/interlink"
)

// A forwarded command travels as the SCSI command that does what the
// array's operation does, in 16-byte CDB form: READ(16), WRITE(16) (FUA
// bit), SYNCHRONIZE CACHE(16), WRITE SAME(16) with UNMAP and no data
// block (a range to deallocate), GET LBA STATUS (the answer: one
// descriptor, SBC-4 5.8).
const (
	opRead16      = 0x88
	opWrite16     = 0x8a
	opSync16      = 0x91
	opWriteSame16 = 0x93
	opIn16        = 0x9e
	saGetLBA      = 0x12
)

// toForward encodes op for a LUN of block size bs.
func toForward(op *array.Op, bs int64, token int64) (interlink.Forward, error) {
	if op.Off%bs != 0 || op.Len%bs != 0 {
		return interlink.Forward{}, fmt.Errorf("controller: %d bytes at %d are not whole %d-byte blocks", op.Len, op.Off, bs)
	}
	cdb := make([]byte, 16)
	lba, n := uint64(op.Off/bs), op.Len/bs
	if n > 0xffffffff {
		return interlink.Forward{}, fmt.Errorf("controller: %d blocks in one command", n)
	}
	binary.BigEndian.PutUint64(cdb[2:], lba)
	binary.BigEndian.PutUint32(cdb[10:], uint32(n))
	f := interlink.Forward{Token: token, CDB: cdb}
	switch op.Kind {
	case array.OpRead:
		cdb[0] = opRead16
		f.DataInLen = uint32(op.Len)
	case array.OpWrite:
		cdb[0] = opWrite16
		if op.FUA {
			cdb[1] |= 0x08
		}
		f.DataOut = op.Data
	case array.OpFlush:
		cdb[0] = opSync16
	case array.OpUnmap:
		cdb[0], cdb[1] = opWriteSame16, 0x08
	case array.OpLBAStatus:
		cdb[0], cdb[1] = opIn16, saGetLBA
		binary.BigEndian.PutUint32(cdb[10:], 24) // allocation length: one descriptor
		f.DataInLen = 24
	default:
		return interlink.Forward{}, fmt.Errorf("controller: operation %d cannot be forwarded", op.Kind)
	}
	return f, nil
}

// fromForward decodes a forwarded command into the array's operation.
func fromForward(m interlink.Forward, bs int64) (array.Op, error) {
	if len(m.CDB) != 16 {
		return array.Op{}, fmt.Errorf("controller: a %d-byte CDB (16 expected)", len(m.CDB))
	}
	lba := int64(binary.BigEndian.Uint64(m.CDB[2:]))
	n := int64(binary.BigEndian.Uint32(m.CDB[10:]))
	if lba < 0 || lba > (1<<62)/bs {
		return array.Op{}, fmt.Errorf("controller: LBA %d is out of range", lba)
	}
	op := array.Op{Off: lba * bs, Len: n * bs}
	switch {
	case m.CDB[0] == opRead16:
		op.Kind = array.OpRead
	case m.CDB[0] == opWrite16:
		op.Kind, op.FUA, op.Data = array.OpWrite, m.CDB[1]&0x08 != 0, m.DataOut
	case m.CDB[0] == opSync16:
		op.Kind, op.Off, op.Len = array.OpFlush, 0, 0
	case m.CDB[0] == opWriteSame16 && m.CDB[1]&0x08 != 0 && len(m.DataOut) == 0:
		op.Kind = array.OpUnmap
	case m.CDB[0] == opIn16 && m.CDB[1]&0x1f == saGetLBA:
		op.Kind, op.Len = array.OpLBAStatus, 0
	default:
		return array.Op{}, fmt.Errorf("controller: CDB %02x/%02x is not a forwarded operation", m.CDB[0], m.CDB[1])
	}
	return op, nil
}

// lbaStatusReply is GET LBA STATUS parameter data with one descriptor:
// from the LBA asked to end, mapped (0) or deallocated (1).
func lbaStatusReply(op *array.Op, bs int64) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint32(b[0:], 20)
	binary.BigEndian.PutUint64(b[8:], uint64(op.Off/bs))
	binary.BigEndian.PutUint32(b[16:], uint32((op.End-op.Off)/bs))
	if !op.Mapped {
		b[20] = 1
	}
	return b
}

// readLBAStatus fills op from GET LBA STATUS parameter data.
func readLBAStatus(op *array.Op, b []byte, bs int64) error {
	if len(b) < 24 {
		return fmt.Errorf("controller: a %d-byte GET LBA STATUS answer", len(b))
	}
	start := int64(binary.BigEndian.Uint64(b[8:])) * bs
	op.End = start + int64(binary.BigEndian.Uint32(b[16:]))*bs
	op.Mapped = b[20]&0x0f == 0
	return nil
}
