package tcmu

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// FakeRegion plays the kernel's side of a TCMU shared region in memory,
// as target_core_user.c lays it out: the mailbox, a command ring right
// after it, and a data area after the ring. Tests (here and in the
// front end) queue commands into it, run a Ring over Mem, and reap the
// responses, with no kernel. It is not safe for concurrent Queue/Reap;
// the Ring side may run concurrently.
type FakeRegion struct {
	Mem      []byte
	CmdrSize uint32
	// PageSize splits data buffers into iovecs of at most this many bytes
	// (the kernel hands out one iovec per run of data pages).
	PageSize int

	head, cleaned uint32
	dataNext      int
	queued        map[uint16]fakeCmd
	nextID        uint16
}

type fakeCmd struct {
	off      uint32
	dataLen  int
	dataIOVs []IOVec
}

// NewFakeRegion makes a region with a ring of cmdrSize bytes (a multiple
// of 8) and dataSize bytes of data area, and the mailbox flags given.
func NewFakeRegion(cmdrSize uint32, dataSize int, flags uint16) *FakeRegion {
	f := &FakeRegion{Mem: make([]byte, MailboxSize+int(cmdrSize)+dataSize), CmdrSize: cmdrSize, PageSize: 4096,
		queued: map[uint16]fakeCmd{}, nextID: 1}
	le := binary.LittleEndian
	le.PutUint16(f.Mem[mbVersion:], MailboxVersion)
	le.PutUint16(f.Mem[mbFlags:], flags)
	le.PutUint32(f.Mem[mbCmdrOff:], MailboxSize)
	le.PutUint32(f.Mem[mbCmdrSize:], cmdrSize)
	return f
}

func (f *FakeRegion) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&f.Mem[off])) }

func (f *FakeRegion) tail() uint32 { return atomic.LoadUint32(f.word(mbCmdTail)) }

func (f *FakeRegion) free() uint32 {
	// One byte short of full, as the kernel keeps head != tail-when-full.
	t := f.tail()
	if f.head >= t {
		return f.CmdrSize - (f.head - t) - 8
	}
	return t - f.head - 8
}

// Pad writes a PAD entry of n bytes at the head (what the kernel does
// when the next command would not fit before the ring's end).
func (f *FakeRegion) Pad(n uint32) {
	off := MailboxSize + int(f.head)
	binary.LittleEndian.PutUint32(f.Mem[off:], n|OpPad)
	f.advance(n)
}

func (f *FakeRegion) advance(n uint32) {
	f.head = (f.head + n) % f.CmdrSize
	atomic.StoreUint32(f.word(mbCmdHead), f.head)
}

// Queue puts a command in the ring: its CDB, data-out (written into the
// data area) or a data-in buffer of dataIn bytes. It returns the command
// id, or an error when the ring or data area is full.
func (f *FakeRegion) Queue(cdb []byte, dataOut []byte, dataIn int) (uint16, error) {
	n := dataIn
	if dataOut != nil {
		n = len(dataOut)
	}
	var iovs []IOVec
	dataStart := MailboxSize + int(f.CmdrSize)
	for left := n; left > 0; {
		k := min(left, f.PageSize)
		if dataStart+f.dataNext+k > len(f.Mem) {
			f.dataNext = 0 // the fake reuses the data area from its start
		}
		off := dataStart + f.dataNext
		iovs = append(iovs, IOVec{Off: uint64(off), Len: uint64(k)})
		f.dataNext += k
		left -= k
	}
	if dataOut != nil {
		rest := dataOut
		for _, v := range iovs {
			rest = rest[copy(f.Mem[v.Off:v.Off+v.Len], rest):]
		}
	}
	// As the kernel: the CDB follows the iovecs (or the response's end,
	// whichever is later) and the entry is rounded up to 8 bytes.
	base := max(uint32(reqIOV+len(iovs)*iovSize), rspEnd)
	size := (base + uint32(len(cdb)) + 7) &^ 7
	if f.head+size > f.CmdrSize {
		pad := f.CmdrSize - f.head
		if f.free() < pad+size {
			return 0, fmt.Errorf("fake ring full")
		}
		f.Pad(pad)
	}
	if f.free() < size {
		return 0, fmt.Errorf("fake ring full")
	}
	id := f.nextID
	f.nextID++
	off := f.head
	ent := f.Mem[MailboxSize+int(off) : MailboxSize+int(off+size)]
	clear(ent)
	le := binary.LittleEndian
	le.PutUint32(ent, size|OpCmd)
	le.PutUint16(ent[4:], id)
	le.PutUint32(ent[reqIOVCnt:], uint32(len(iovs)))
	for i, v := range iovs {
		le.PutUint64(ent[reqIOV+i*iovSize:], v.Off)
		le.PutUint64(ent[reqIOV+i*iovSize+8:], v.Len)
	}
	cdbAt := int(base)
	copy(ent[cdbAt:], cdb)
	le.PutUint64(ent[reqCDBOff:], uint64(MailboxSize+int(off)+cdbAt))
	f.queued[id] = fakeCmd{off: off, dataLen: n, dataIOVs: iovs}
	f.advance(size)
	return id, nil
}

// PutRaw writes raw bytes as the next entry (its length taken from the
// bytes' own header, which may be a lie) and moves the head by adv.
func (f *FakeRegion) PutRaw(b []byte, adv uint32) {
	copy(f.Mem[MailboxSize+int(f.head):], b)
	f.advance(adv)
}

// Done is one command the ring answered.
type Done struct {
	CmdID   uint16
	Status  byte
	Sense   []byte
	UFlags  byte
	ReadLen uint32
	Data    []byte // the data-in buffers' contents
}

// Reap returns the responses for every entry the tail has passed since
// the last call, in ring order (PAD and other non-command entries are
// skipped), as the kernel's tcmu_handle_completions walks them.
func (f *FakeRegion) Reap() []Done {
	var out []Done
	tail := f.tail()
	le := binary.LittleEndian
	for f.cleaned != tail {
		ent := f.Mem[MailboxSize+int(f.cleaned):]
		lenOp := le.Uint32(ent)
		size := lenOp &^ opMask
		if size == 0 {
			break
		}
		if lenOp&opMask == OpCmd {
			id := le.Uint16(ent[4:])
			d := Done{CmdID: id, Status: ent[rspStatus], UFlags: ent[7], ReadLen: le.Uint32(ent[rspReadLen:])}
			sense := ent[rspSense:rspEnd]
			if d.Status != 0 {
				d.Sense = append([]byte(nil), sense...)
			}
			if q, ok := f.queued[id]; ok {
				for _, v := range q.dataIOVs {
					d.Data = append(d.Data, f.Mem[v.Off:v.Off+v.Len]...)
				}
				delete(f.queued, id)
			}
			out = append(out, d)
		}
		f.cleaned = (f.cleaned + size) % f.CmdrSize
	}
	return out
}
