package tcmu

import (
	"encoding/binary"
	"path/filepath"
	"strconv"
	"strings"
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

// FuzzACLCounts: what LIO's ACL attributes hold is read without a panic;
// a count reads back as the number written, anything else is an error,
// and an info that says there is no session never reads as one.
func FuzzACLCounts(f *testing.F) {
	f.Add("No active iSCSI Session for Initiator Endpoint: iqn.2026-11.org.example:h1\n", "0\n")
	f.Add("InitiatorName: iqn.2026-11.org.example:h1\nSession State: TARG_SESS_STATE_LOGGED_IN\n", "18446744073709551615\n")
	f.Add("", "-1")
	f.Fuzz(func(t *testing.T, info, count string) {
		if strings.HasPrefix(strings.TrimSpace(info), "No active") && ParseACLInfo(info) {
			t.Fatalf("%q read as a session", info)
		}
		l := testLayout()
		l.Initiators = []string{"iqn.2026-11.org.example:h1"}
		fs := NewMemFS()
		fs.MkdirAll("/t")
		if err := l.Create(fs); err != nil {
			t.Fatal(err)
		}
		iqn := l.Targets[0].IQN
		p := filepath.Join(l.TPGDir(iqn, 1), "acls", l.Initiators[0], "lun_0", "statistics", "scsi_auth_intr", "num_cmds")
		fs.Set(p, count)
		n, err := l.ACLCommands(fs, iqn, 1, l.Initiators[0], 0)
		want, perr := strconv.ParseUint(strings.TrimSpace(count), 10, 64)
		if (err == nil) != (perr == nil) || err == nil && n != want {
			t.Fatalf("%q: %d, %v", count, n, err)
		}
	})
}
