package tcmu

import (
	"encoding/binary"
	"testing"
)

// FuzzParseEntry: any bytes at any offset decode or fail; never a panic,
// and a decoded command's CDB and buffers lie inside the region.
func FuzzParseEntry(f *testing.F) {
	seed := NewFakeRegion(1024, 8192, MailboxFlagReadLen)
	_, _ = seed.Queue(write10(1, 2), make([]byte, 1024), 0)
	_, _ = seed.Queue(read10(1, 2), nil, 1024)
	f.Add(seed.Mem[MailboxSize:MailboxSize+1024], uint32(0))
	f.Add(seed.Mem[MailboxSize:MailboxSize+1024], uint32(112))
	tmr := make([]byte, 40)
	binary.LittleEndian.PutUint32(tmr, 40|OpTMR)
	binary.LittleEndian.PutUint32(tmr[tmrCmdCnt:], 3)
	f.Add(tmr, uint32(0))
	f.Fuzz(func(t *testing.T, ring []byte, off uint32) {
		reg := NewFakeRegion(1024, 8192, MailboxFlagReadLen)
		copy(reg.Mem[MailboxSize:MailboxSize+1024], ring)
		mb, err := ParseMailbox(reg.Mem)
		if err != nil {
			t.Fatal(err)
		}
		e, err := ParseEntry(reg.Mem, mb, off%1024)
		if err != nil {
			return
		}
		if e.Len < hdrSize || e.Len%8 != 0 && e.Op != OpPad && e.Op != OpCmd && e.Op != OpTMR {
			t.Fatalf("accepted length %d", e.Len)
		}
		for _, v := range append(e.IOV, e.BidiIOV...) {
			if v.Off < MailboxSize+1024 || v.Off+v.Len > uint64(len(reg.Mem)) {
				t.Fatalf("iovec %+v outside the data area", v)
			}
		}
		if e.Op == OpCmd && (len(e.CDB) == 0 || len(e.CDB) != CDBLength(e.CDB)) {
			t.Fatalf("CDB % x", e.CDB)
		}
	})
}

// FuzzRing: a ring whose head and entries are arbitrary is walked and
// answered without a panic, and the tail never leaves the ring.
func FuzzRing(f *testing.F) {
	seed := NewFakeRegion(512, 4096, MailboxFlagReadLen)
	_, _ = seed.Queue(write10(1, 1), make([]byte, 512), 0)
	f.Add(seed.Mem[MailboxSize:MailboxSize+512], uint32(seed.head))
	f.Fuzz(func(t *testing.T, ring []byte, head uint32) {
		reg := NewFakeRegion(512, 4096, MailboxFlagReadLen)
		copy(reg.Mem[MailboxSize:MailboxSize+512], ring)
		binary.LittleEndian.PutUint32(reg.Mem[mbCmdHead:], head)
		r, err := NewRing(reg.Mem)
		if err != nil {
			return // the mailbox itself was made bad by the head
		}
		cmds, _, err := r.Fetch()
		for _, c := range cmds {
			c.Respond(Response{Status: 2, Sense: make([]byte, 200), Data: make([]byte, 100)})
		}
		tail := binary.LittleEndian.Uint32(reg.Mem[mbCmdTail:])
		if tail >= 512 || tail%8 != 0 {
			t.Fatalf("tail %d", tail)
		}
		_ = err
	})
}
