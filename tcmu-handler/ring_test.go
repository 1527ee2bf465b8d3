package tcmu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func read10(lba uint32, blocks uint16) []byte {
	c := make([]byte, 10)
	c[0] = 0x28
	binary.BigEndian.PutUint32(c[2:], lba)
	binary.BigEndian.PutUint16(c[7:], blocks)
	return c
}

func write10(lba uint32, blocks uint16) []byte {
	c := read10(lba, blocks)
	c[0] = 0x2a
	return c
}

func TestParseMailbox(t *testing.T) {
	good := NewFakeRegion(1024, 8192, MailboxFlagOOOC|MailboxFlagReadLen).Mem
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
		err    string
	}{
		{"good", func(b []byte) []byte { return b }, ""},
		{"short", func(b []byte) []byte { return b[:100] }, "no room for the mailbox"},
		{"version", func(b []byte) []byte { b[0] = 1; return b }, "version 1"},
		{"ring beyond region", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[mbCmdrSize:], 1<<30); return b }, "beyond"},
		{"ring inside mailbox", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[mbCmdrOff:], 8); return b }, "bad command ring"},
		{"head outside", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[mbCmdHead:], 4096); return b }, "outside"},
		{"unaligned tail", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[mbCmdTail:], 12); return b }, "outside"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mb, err := ParseMailbox(tc.mutate(bytes.Clone(good)))
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, uint32(MailboxSize), mb.CmdrOff)
				require.Equal(t, uint32(1024), mb.CmdrSize)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func TestCDBLength(t *testing.T) {
	tests := []struct {
		cdb  []byte
		want int
	}{
		{[]byte{0x00}, 6}, {[]byte{0x12}, 6}, {[]byte{0x28}, 10}, {[]byte{0x5e}, 10},
		{[]byte{0x88}, 16}, {[]byte{0x9e}, 16}, {[]byte{0xa0}, 12}, {[]byte{0xa3}, 12},
		{[]byte{0x7f, 0, 0, 0, 0, 0, 0, 0x18}, 32}, {[]byte{0x7f, 0}, 0}, {nil, 0}, {[]byte{0xc0}, 16},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, CDBLength(tc.cdb), "% x", tc.cdb)
	}
}

// A write's data is gathered from every iovec; a read's data is scattered
// into them, and the response carries status, sense and read length.
func TestRingWriteThenRead(t *testing.T) {
	f := NewFakeRegion(4096, 64<<10, MailboxFlagOOOC|MailboxFlagReadLen)
	f.PageSize = 1000 // several iovecs per command
	r, err := NewRing(f.Mem)
	require.NoError(t, err)

	payload := bytes.Repeat([]byte("aluad-tcmu-"), 500) // 5500 bytes: 6 iovecs
	wid, err := f.Queue(write10(8, 11), payload, 0)
	require.NoError(t, err)
	rid, err := f.Queue(read10(8, 11), nil, len(payload))
	require.NoError(t, err)

	cmds, tmrs, err := r.Fetch()
	require.NoError(t, err)
	require.Empty(t, tmrs)
	require.Len(t, cmds, 2)
	require.Equal(t, wid, cmds[0].CmdID)
	require.Equal(t, write10(8, 11), cmds[0].CDB)
	require.Len(t, cmds[0].IOV, 6)
	require.Equal(t, payload, cmds[0].DataOut())
	require.NoError(t, cmds[1].Err)
	require.Equal(t, uint64(len(payload)), cmds[1].DataLen())

	require.True(t, cmds[0].Respond(Response{Status: 0}))
	short := payload[:4000]
	require.True(t, cmds[1].Respond(Response{Status: 0, Data: short}))
	require.Zero(t, r.Outstanding())

	done := f.Reap()
	require.Len(t, done, 2)
	require.Equal(t, wid, done[0].CmdID)
	require.Zero(t, done[0].Status)
	require.Equal(t, rid, done[1].CmdID)
	require.Equal(t, short, done[1].Data[:len(short)])
	require.Equal(t, uint32(len(short)), done[1].ReadLen)
	require.NotZero(t, done[1].UFlags&UFlagReadLen)
}

func TestRingCheckConditionCarriesSense(t *testing.T) {
	f := NewFakeRegion(1024, 8192, MailboxFlagReadLen)
	r, err := NewRing(f.Mem)
	require.NoError(t, err)
	_, err = f.Queue(read10(1<<30, 1), nil, 512)
	require.NoError(t, err)
	cmds, _, err := r.Fetch()
	require.NoError(t, err)
	sense := []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0x00}
	require.True(t, cmds[0].Respond(Response{Status: 0x02, Sense: sense}))
	done := f.Reap()
	require.Len(t, done, 1)
	require.Equal(t, byte(0x02), done[0].Status)
	require.Equal(t, sense, done[0].Sense[:len(sense)])
	require.Zero(t, done[0].UFlags&UFlagReadLen, "no data, no read length")
	// A second answer to the same command changes nothing.
	require.False(t, cmds[0].Respond(Response{Status: 0}))
}

// The tail passes an entry only when it and every earlier one are done.
func TestRingRetiresInOrder(t *testing.T) {
	f := NewFakeRegion(2048, 8192, MailboxFlagOOOC)
	r, err := NewRing(f.Mem)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := f.Queue([]byte{0, 0, 0, 0, 0, 0}, nil, 0)
		require.NoError(t, err)
	}
	cmds, _, err := r.Fetch()
	require.NoError(t, err)
	require.Len(t, cmds, 3)
	require.False(t, cmds[2].Respond(Response{}))
	require.False(t, cmds[1].Respond(Response{}))
	require.Empty(t, f.Reap())
	require.Equal(t, 3, r.Outstanding())
	require.True(t, cmds[0].Respond(Response{}))
	done := f.Reap()
	require.Len(t, done, 3)
	require.Equal(t, []uint16{cmds[0].CmdID, cmds[1].CmdID, cmds[2].CmdID},
		[]uint16{done[0].CmdID, done[1].CmdID, done[2].CmdID})
}

// Commands keep flowing across the ring's end: the kernel pads the end
// and starts over, and the ring follows.
func TestRingWrapsWithPad(t *testing.T) {
	f := NewFakeRegion(512, 64<<10, MailboxFlagReadLen)
	r, err := NewRing(f.Mem)
	require.NoError(t, err)
	for round := 0; round < 40; round++ {
		data := bytes.Repeat([]byte{byte(round)}, 512)
		id, err := f.Queue(write10(uint32(round), 1), data, 0)
		require.NoError(t, err, "round %d", round)
		cmds, _, err := r.Fetch()
		require.NoError(t, err)
		require.Len(t, cmds, 1, "round %d", round)
		require.Equal(t, id, cmds[0].CmdID)
		require.Equal(t, data, cmds[0].DataOut())
		cmds[0].Respond(Response{})
		done := f.Reap()
		require.Len(t, done, 1)
		require.Equal(t, id, done[0].CmdID)
	}
}

func TestRingBadEntries(t *testing.T) {
	t.Run("iovec outside the data area is failed and passed", func(t *testing.T) {
		f := NewFakeRegion(1024, 8192, 0)
		r, err := NewRing(f.Mem)
		require.NoError(t, err)
		_, err = f.Queue(read10(0, 1), nil, 512)
		require.NoError(t, err)
		// Point the iovec into the command ring.
		binary.LittleEndian.PutUint64(f.Mem[MailboxSize+reqIOV:], MailboxSize)
		_, err = f.Queue([]byte{0, 0, 0, 0, 0, 0}, nil, 0)
		require.NoError(t, err)
		cmds, _, err := r.Fetch()
		require.NoError(t, err)
		require.Len(t, cmds, 2)
		var ee *EntryError
		require.True(t, errors.As(cmds[0].Err, &ee))
		require.False(t, ee.Fatal)
		require.NoError(t, cmds[1].Err)
		cmds[0].Respond(Response{Status: 0x02, Data: []byte("not written")})
		cmds[1].Respond(Response{})
		require.Len(t, f.Reap(), 2)
	})
	t.Run("unknown opcode is flagged and retired", func(t *testing.T) {
		f := NewFakeRegion(1024, 8192, 0)
		r, err := NewRing(f.Mem)
		require.NoError(t, err)
		raw := make([]byte, 16)
		binary.LittleEndian.PutUint32(raw, 16|5)
		f.PutRaw(raw, 16)
		cmds, _, err := r.Fetch()
		require.NoError(t, err)
		require.Empty(t, cmds)
		require.Equal(t, byte(UFlagUnknownOp), f.Mem[MailboxSize+7])
		require.Equal(t, uint32(16), binary.LittleEndian.Uint32(f.Mem[mbCmdTail:]))
	})
	t.Run("a header longer than the ring breaks it", func(t *testing.T) {
		f := NewFakeRegion(1024, 8192, 0)
		r, err := NewRing(f.Mem)
		require.NoError(t, err)
		raw := make([]byte, 16)
		binary.LittleEndian.PutUint32(raw, 4096|OpCmd)
		f.PutRaw(raw, 16)
		_, _, err = r.Fetch()
		require.ErrorIs(t, err, ErrRingBroken)
	})
	t.Run("a TMR is reported and retired", func(t *testing.T) {
		f := NewFakeRegion(1024, 8192, MailboxFlagTMR)
		r, err := NewRing(f.Mem)
		require.NoError(t, err)
		raw := make([]byte, 40)
		binary.LittleEndian.PutUint32(raw, 40|OpTMR)
		raw[tmrType] = 5 // LUN RESET
		binary.LittleEndian.PutUint32(raw[tmrCmdCnt:], 2)
		binary.LittleEndian.PutUint16(raw[tmrCmdIDs:], 7)
		binary.LittleEndian.PutUint16(raw[tmrCmdIDs+2:], 9)
		f.PutRaw(raw, 40)
		cmds, tmrs, err := r.Fetch()
		require.NoError(t, err)
		require.Empty(t, cmds)
		require.Len(t, tmrs, 1)
		require.Equal(t, byte(5), tmrs[0].TMRType)
		require.Equal(t, []uint16{7, 9}, tmrs[0].TMRCmdIDs)
		require.Zero(t, r.Outstanding())
	})
}
