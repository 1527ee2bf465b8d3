package tcmu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The shared region's layout, from the kernel's uapi target_core_user.h
// (TCMU mailbox version 2). Every structure is packed and little-endian
// on the machines LIO runs on; offsets are fixed here rather than taken
// from Go struct layout.
const (
	MailboxVersion = 2

	MailboxFlagOOOC    = 1 << 0 // the kernel accepts out-of-order completions
	MailboxFlagReadLen = 1 << 1 // rsp.read_len is honoured (with UFlagReadLen)
	MailboxFlagTMR     = 1 << 2 // task management notifications in the ring
	MailboxFlagKeepBuf = 1 << 3

	mbVersion  = 0
	mbFlags    = 2
	mbCmdrOff  = 4
	mbCmdrSize = 8
	mbCmdHead  = 12
	mbCmdTail  = 64 // on its own cache line (ALIGN_SIZE 64)
	// MailboxSize is sizeof(struct tcmu_mailbox): the command ring starts
	// right after it.
	MailboxSize = 128

	OpPad  = 0
	OpCmd  = 1
	OpTMR  = 2
	opMask = 0x7

	UFlagUnknownOp = 0x1
	UFlagReadLen   = 0x2
	UFlagKeepBuf   = 0x4

	// SenseBufferSize is TCMU_SENSE_BUFFERSIZE.
	SenseBufferSize = 96

	// The entry is packed, but the request inside its union is not: its
	// u64 fields keep their natural alignment (4 bytes of padding after
	// iov_dif_cnt), as the kernel's and tcmu-runner's compilers lay it out.
	hdrSize      = 8  // len_op u32, cmd_id u16, kflags u8, uflags u8
	reqIOVCnt    = 8  // req.iov_cnt
	reqBidiCnt   = 12 // req.iov_bidi_cnt
	reqDifCnt    = 16 // req.iov_dif_cnt
	reqCDBOff    = 24 // req.cdb_off (u64, 8-aligned)
	reqIOV       = 48 // req.iov[]: {u64 base (an offset into the region), u64 len}
	iovSize      = 16
	rspStatus    = 8
	rspReadLen   = 12
	rspSense     = 16
	rspEnd       = rspSense + SenseBufferSize
	tmrType      = 8
	tmrCmdCnt    = 12
	tmrCmdIDs    = 32
	maxIOVs      = 1 << 16
	maxCDBLength = 260 // SPC-4 variable-length CDBs: 8 + 252
)

// Mailbox is the head of the shared region.
type Mailbox struct {
	Version, Flags    uint16
	CmdrOff, CmdrSize uint32
	CmdHead, CmdTail  uint32
}

// ParseMailbox reads and checks the mailbox at the start of region mem:
// the version, and a command ring that lies inside the region.
func ParseMailbox(mem []byte) (Mailbox, error) {
	if len(mem) < MailboxSize {
		return Mailbox{}, fmt.Errorf("tcmu: region of %d bytes has no room for the mailbox", len(mem))
	}
	le := binary.LittleEndian
	mb := Mailbox{Version: le.Uint16(mem[mbVersion:]), Flags: le.Uint16(mem[mbFlags:]),
		CmdrOff: le.Uint32(mem[mbCmdrOff:]), CmdrSize: le.Uint32(mem[mbCmdrSize:]),
		CmdHead: le.Uint32(mem[mbCmdHead:]), CmdTail: le.Uint32(mem[mbCmdTail:])}
	switch {
	case mb.Version != MailboxVersion:
		return mb, fmt.Errorf("tcmu: mailbox version %d, want %d", mb.Version, MailboxVersion)
	case mb.CmdrOff < MailboxSize || mb.CmdrSize < hdrSize || mb.CmdrSize%8 != 0:
		return mb, fmt.Errorf("tcmu: bad command ring (offset %d, size %d)", mb.CmdrOff, mb.CmdrSize)
	case uint64(mb.CmdrOff)+uint64(mb.CmdrSize) > uint64(len(mem)):
		return mb, fmt.Errorf("tcmu: command ring [%d,+%d) beyond the %d-byte region", mb.CmdrOff, mb.CmdrSize, len(mem))
	case mb.CmdHead >= mb.CmdrSize || mb.CmdTail >= mb.CmdrSize || mb.CmdHead%8 != 0 || mb.CmdTail%8 != 0:
		return mb, fmt.Errorf("tcmu: ring head %d / tail %d outside the %d-byte ring", mb.CmdHead, mb.CmdTail, mb.CmdrSize)
	}
	return mb, nil
}

// IOVec is one data buffer of a command: an offset into the region (the
// kernel puts offsets, not addresses, in iov_base) and a length.
type IOVec struct {
	Off, Len uint64
}

// Entry is one decoded command ring entry.
type Entry struct {
	Op     byte
	Len    uint32 // bytes the entry takes in the ring (a multiple of 8)
	CmdID  uint16
	KFlags byte
	// CMD entries.
	CDB     []byte
	IOV     []IOVec // data-out or data-in buffers
	BidiIOV []IOVec // the data-in buffers of a bidirectional command
	// TMR entries.
	TMRType   byte
	TMRCmdIDs []uint16
}

// DataLen is the total length of the entry's (non-bidi) buffers.
func (e *Entry) DataLen() uint64 {
	var n uint64
	for _, v := range e.IOV {
		n += v.Len
	}
	return n
}

// EntryError is an entry the parser refused. With Fatal the header itself
// is broken (the entry's length cannot be trusted, so the ring cannot be
// walked past it); otherwise the entry can be failed and skipped.
type EntryError struct {
	Off   uint32
	Fatal bool
	Msg   string
}

func (e *EntryError) Error() string {
	kind := "bad entry"
	if e.Fatal {
		kind = "bad entry header"
	}
	return fmt.Sprintf("tcmu: %s at ring offset %d: %s", kind, e.Off, e.Msg)
}

// CDBLength is the length of a CDB by its operation code's group (SPC-4
// 4.2.5.1); variable-length CDBs (7Fh) carry theirs in byte 7. It is 0
// when the length cannot be told from what is given.
func CDBLength(cdb []byte) int {
	if len(cdb) == 0 {
		return 0
	}
	switch cdb[0] >> 5 {
	case 0:
		return 6
	case 1, 2:
		return 10
	case 3:
		if cdb[0] == 0x7f {
			if len(cdb) < 8 {
				return 0
			}
			return 8 + int(cdb[7])
		}
		return 10
	case 4:
		return 16
	case 5:
		return 12
	default: // vendor specific: LIO passes them as 16 bytes at most
		return 16
	}
}

// ParseEntry decodes the command ring entry at off (bytes from the ring's
// start) of region mem, laid out as mb says. It trusts nothing it reads:
// lengths, counts and offsets are checked against the ring and the region
// (data buffers must lie in the data area, after the ring), and it never
// panics. A CMD entry whose body is bad still returns its header with a
// non-fatal *EntryError, so it can be failed and passed over.
func ParseEntry(mem []byte, mb Mailbox, off uint32) (Entry, error) {
	bad := func(fatal bool, f string, a ...any) error {
		return &EntryError{Off: off, Fatal: fatal, Msg: fmt.Sprintf(f, a...)}
	}
	if uint64(mb.CmdrOff)+uint64(mb.CmdrSize) > uint64(len(mem)) || off%8 != 0 || off >= mb.CmdrSize ||
		mb.CmdrSize-off < hdrSize {
		return Entry{}, bad(true, "outside the command ring")
	}
	base := uint64(mb.CmdrOff) + uint64(off)
	le := binary.LittleEndian
	lenOp := le.Uint32(mem[base:])
	e := Entry{Op: byte(lenOp & opMask), Len: lenOp &^ opMask, CmdID: le.Uint16(mem[base+4:]), KFlags: mem[base+6]}
	// Entries never wrap: the kernel pads to the ring's end instead.
	if e.Len < hdrSize || e.Len > mb.CmdrSize-off {
		return e, bad(true, "length %d does not fit the ring (%d bytes left)", e.Len, mb.CmdrSize-off)
	}
	ent := mem[base : base+uint64(e.Len)]
	dataStart := uint64(mb.CmdrOff) + uint64(mb.CmdrSize)
	switch e.Op {
	case OpPad:
		return e, nil
	case OpTMR:
		if len(ent) < tmrCmdIDs {
			return e, bad(false, "TMR entry of %d bytes", len(ent))
		}
		e.TMRType = ent[tmrType]
		n := uint64(le.Uint32(ent[tmrCmdCnt:]))
		if tmrCmdIDs+2*n > uint64(len(ent)) {
			return e, bad(false, "TMR lists %d commands in %d bytes", n, len(ent))
		}
		for i := uint64(0); i < n; i++ {
			e.TMRCmdIDs = append(e.TMRCmdIDs, le.Uint16(ent[tmrCmdIDs+2*i:]))
		}
		return e, nil
	case OpCmd:
	default:
		return e, bad(false, "unknown opcode %d", e.Op)
	}
	if len(ent) < reqIOV {
		return e, bad(false, "command entry of %d bytes", len(ent))
	}
	nIOV, nBidi, nDif := uint64(le.Uint32(ent[reqIOVCnt:])), uint64(le.Uint32(ent[reqBidiCnt:])), uint64(le.Uint32(ent[reqDifCnt:]))
	total := nIOV + nBidi + nDif
	if total > maxIOVs || reqIOV+total*iovSize > uint64(len(ent)) {
		return e, bad(false, "%d+%d+%d iovecs do not fit a %d-byte entry", nIOV, nBidi, nDif, len(ent))
	}
	readIOV := func(i uint64) (IOVec, error) {
		p := ent[reqIOV+i*iovSize:]
		v := IOVec{Off: le.Uint64(p), Len: le.Uint64(p[8:])}
		if v.Off < dataStart || v.Off > uint64(len(mem)) || v.Len > uint64(len(mem))-v.Off {
			return v, bad(false, "iovec %d [%d,+%d) outside the data area [%d,%d)", i, v.Off, v.Len, dataStart, len(mem))
		}
		return v, nil
	}
	for i := uint64(0); i < nIOV+nBidi; i++ {
		v, err := readIOV(i)
		if err != nil {
			return e, err
		}
		if i < nIOV {
			e.IOV = append(e.IOV, v)
		} else {
			e.BidiIOV = append(e.BidiIOV, v)
		}
	}
	cdbOff := le.Uint64(ent[reqCDBOff:])
	if cdbOff >= uint64(len(mem)) {
		return e, bad(false, "CDB offset %d outside the region", cdbOff)
	}
	rest := mem[cdbOff:]
	n := CDBLength(rest)
	if n == 0 || n > maxCDBLength || n > len(rest) {
		return e, bad(false, "CDB at %d: length %d does not fit", cdbOff, n)
	}
	e.CDB = rest[:n:n]
	return e, nil
}

// Ring walks one device's command ring: it hands out new entries and
// retires completed ones in ring order, moving the mailbox's tail. The
// kernel's cmd_head is read, and cmd_tail written, atomically. Entries
// are completed in place (the response overwrites the entry), so the tail
// only passes an entry once it and every earlier one are complete.
type Ring struct {
	mem  []byte
	mb   Mailbox
	next uint32 // the next entry to hand out

	mu      sync.Mutex
	pending []*Cmd // handed out, in ring order, not yet passed by the tail
	tail    uint32
}

// Cmd is one command taken from the ring.
type Cmd struct {
	Entry
	// Err is set when the entry could not be decoded: the caller fails
	// the command (Respond with a CHECK CONDITION) without running it.
	Err  error
	off  uint32
	r    *Ring
	done bool
}

// NewRing checks the mailbox of region mem and starts at its tail.
func NewRing(mem []byte) (*Ring, error) {
	mb, err := ParseMailbox(mem)
	if err != nil {
		return nil, err
	}
	return &Ring{mem: mem, mb: mb, next: mb.CmdTail, tail: mb.CmdTail}, nil
}

// Mailbox returns the mailbox as read when the ring was opened.
func (r *Ring) Mailbox() Mailbox { return r.mb }

func (r *Ring) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// ErrRingBroken: an entry header could not be trusted; the ring cannot be
// walked further (the kernel's command timer fails what is left).
var ErrRingBroken = errors.New("tcmu: command ring broken")

// Fetch returns the commands the kernel queued since the last call. PAD
// and TMR entries are retired at once (TMRs are returned in tmrs: the
// commands they name are still answered normally; aluad's commands do not
// block, so there is nothing to abort).
func (r *Ring) Fetch() (cmds []*Cmd, tmrs []Entry, err error) {
	head := atomic.LoadUint32(r.word(mbCmdHead))
	if head >= r.mb.CmdrSize || head%8 != 0 {
		return nil, nil, fmt.Errorf("%w: head %d", ErrRingBroken, head)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.next != head {
		e, perr := ParseEntry(r.mem, r.mb, r.next)
		if perr != nil {
			var ee *EntryError
			if errors.As(perr, &ee) && ee.Fatal {
				return cmds, tmrs, fmt.Errorf("%w: %v", ErrRingBroken, perr)
			}
		}
		// An entry lies between next and the head: one that claims more
		// would have the walk step over the head.
		if avail := (head + r.mb.CmdrSize - r.next) % r.mb.CmdrSize; e.Len > avail {
			return cmds, tmrs, fmt.Errorf("%w: entry at %d of %d bytes passes the head %d", ErrRingBroken, r.next, e.Len, head)
		}
		c := &Cmd{Entry: e, Err: perr, off: r.next, r: r}
		r.pending = append(r.pending, c)
		r.next = (r.next + e.Len) % r.mb.CmdrSize
		switch {
		case e.Op == OpCmd:
			cmds = append(cmds, c)
		case e.Op == OpTMR && perr == nil:
			tmrs = append(tmrs, e)
			c.done = true
		case e.Op == OpPad:
			c.done = true
		default: // unknown opcode, or a TMR we could not read
			r.setUFlags(c, UFlagUnknownOp)
			c.done = true
		}
	}
	r.retire()
	return cmds, tmrs, nil
}

func (r *Ring) setUFlags(c *Cmd, f byte) {
	r.mem[uint64(r.mb.CmdrOff)+uint64(c.off)+7] |= f
}

// retire moves the tail past every completed entry at the front. It
// reports whether the tail moved.
func (r *Ring) retire() bool {
	moved := false
	for len(r.pending) > 0 && r.pending[0].done {
		c := r.pending[0]
		r.pending[0] = nil
		r.pending = r.pending[1:]
		r.tail = (c.off + c.Len) % r.mb.CmdrSize
		moved = true
	}
	if moved {
		atomic.StoreUint32(r.word(mbCmdTail), r.tail)
	}
	return moved
}

// Outstanding is how many entries are handed out and not yet retired.
func (r *Ring) Outstanding() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// DataOut gathers the command's buffers (the data-out of a write).
func (c *Cmd) DataOut() []byte {
	out := make([]byte, 0, c.DataLen())
	for _, v := range c.IOV {
		out = append(out, c.r.mem[v.Off:v.Off+v.Len]...)
	}
	return out
}

// scatter copies b into iovs and returns how many bytes it copied.
func (c *Cmd) scatter(iovs []IOVec, b []byte) int {
	n := 0
	for _, v := range iovs {
		if len(b) == 0 {
			break
		}
		k := copy(c.r.mem[v.Off:v.Off+v.Len], b)
		b, n = b[k:], n+k
	}
	return n
}

// Response is how a command ends.
type Response struct {
	Status byte
	Sense  []byte
	// Data is the data-in (scattered into the command's buffers, or the
	// bidi buffers of a bidirectional command).
	Data []byte
}

// Respond writes the response into the command's entry and retires what
// it can. It reports whether the tail moved: then the kernel must be
// told (a write to the UIO device). A command is answered once; later
// calls are ignored.
func (c *Cmd) Respond(rsp Response) (kick bool) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.done {
		return false
	}
	iovs := c.IOV
	if len(c.BidiIOV) > 0 {
		iovs = c.BidiIOV
	}
	n := 0
	if rsp.Data != nil && c.Err == nil {
		n = c.scatter(iovs, rsp.Data)
	}
	ent := r.mem[uint64(r.mb.CmdrOff)+uint64(c.off):]
	// The response overlays the request: write it only now that the
	// request (iovecs, CDB offset) is no longer needed.
	ent[rspStatus] = rsp.Status
	ent[rspStatus+1], ent[rspStatus+2], ent[rspStatus+3] = 0, 0, 0
	if c.Len >= rspEnd {
		sense := ent[rspSense:rspEnd]
		clear(sense)
		copy(sense, rsp.Sense)
	}
	if r.mb.Flags&MailboxFlagReadLen != 0 && rsp.Data != nil && c.Len >= rspReadLen+4 {
		binary.LittleEndian.PutUint32(ent[rspReadLen:], uint32(n))
		ent[7] |= UFlagReadLen
	}
	c.done = true
	return r.retire()
}
