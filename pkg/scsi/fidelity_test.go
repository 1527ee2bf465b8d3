package scsi

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func logSenseCDB(page, sub byte) []byte {
	return []byte{OpLogSense, 0, 0x40 | page, sub, 0, 0, 0, 0x04, 0, 0}
}

// logParams parses a log page's parameters into code -> value.
func logParams(t *testing.T, page []byte) map[uint16][]byte {
	t.Helper()
	require.GreaterOrEqual(t, len(page), 4)
	b := page[4 : 4+int(binary.BigEndian.Uint16(page[2:]))]
	out := map[uint16][]byte{}
	for len(b) >= 4 {
		n := int(b[3])
		require.LessOrEqual(t, 4+n, len(b))
		out[binary.BigEndian.Uint16(b)] = b[4 : 4+n]
		b = b[4+n:]
	}
	require.Empty(t, b)
	return out
}

func TestLogSense(t *testing.T) {
	s, be := newTestServer(t)
	ex := func(cdb []byte) Response { return s.Execute(&Command{Nexus: n1, CDB: cdb}) }
	r := ex(logSenseCDB(0, 0))
	require.Equal(t, StatusGood, r.Status)
	pages := r.Data[4:]
	require.Equal(t, []byte{0x00, 0x02, 0x03, 0x0d, 0x2f}, pages, "supported pages")
	for _, p := range pages {
		r := ex(logSenseCDB(p, 0))
		require.Equal(t, StatusGood, r.Status, "page %02x", p)
		require.Equal(t, p, r.Data[0]&0x3f)
	}
	r = ex(logSenseCDB(0, 0xff))
	require.Equal(t, StatusGood, r.Status)
	require.Equal(t, byte(0x40), r.Data[0]&0x40, "SPF for the subpages list")
	// Temperature: not available (FFh); no failure predicted.
	require.Equal(t, []byte{0, 0xff}, logParams(t, ex(logSenseCDB(0x0d, 0)).Data)[0])
	require.Equal(t, []byte{0, 0, 0xff}, logParams(t, ex(logSenseCDB(0x2f, 0)).Data)[0])
	// The read error counter counts the MEDIUM ERRORs reported.
	uncorrected := func(page byte) uint64 {
		return binary.BigEndian.Uint64(logParams(t, ex(logSenseCDB(page, 0)).Data)[6])
	}
	require.Zero(t, uncorrected(0x03))
	be.failReads = true
	for range 3 {
		require.Equal(t, StatusCheckCondition, ex(cdb16(OpRead16, 0, 1)).Status)
	}
	be.failReads = false
	require.Equal(t, uint64(3), uncorrected(0x03))
	require.Zero(t, uncorrected(0x02))
	// The parameter pointer skips lower codes; allocation length truncates.
	cdb := logSenseCDB(0x0d, 0)
	cdb[6] = 1
	require.NotContains(t, logParams(t, ex(cdb).Data), uint16(0))
	cdb = logSenseCDB(0x02, 0)
	cdb[7], cdb[8] = 0, 6
	require.Len(t, ex(cdb).Data, 6)
	// A parameter pointer past the last parameter is refused.
	cdb = logSenseCDB(0x0d, 0)
	cdb[6] = 2
	_, asc, _ := senseOf(t, ex(cdb))
	require.Equal(t, byte(0x24), asc)
	// The subpages list is in ascending order.
	r = ex(logSenseCDB(0, 0xff))
	require.Equal(t, []byte{0, 0, 0, 0xff, 2, 0, 3, 0, 0x0d, 0, 0x2f, 0}, r.Data[4:])
}

func TestExtendedInquiryVPD(t *testing.T) {
	s, _ := newTestServer(t)
	r := s.Execute(&Command{Nexus: n1, CDB: []byte{0x12, 1, 0x00, 0, 255, 0}})
	require.Equal(t, StatusGood, r.Status)
	require.Contains(t, string(r.Data[4:]), "\x86", "listed among the supported VPD pages")
	r = s.Execute(&Command{Nexus: n1, CDB: []byte{0x12, 1, 0x86, 0, 255, 0}})
	require.Equal(t, StatusGood, r.Status)
	require.Equal(t, byte(0x86), r.Data[1])
	require.Equal(t, uint16(0x3c), binary.BigEndian.Uint16(r.Data[2:]))
	require.Equal(t, byte(0x01), r.Data[5]&0x07, "SIMPSUP only")
	require.Equal(t, byte(0x01), r.Data[6]&0x03, "a volatile cache, no non-volatile one")
	require.Zero(t, r.Data[7]&0x01, "LUICLR=0: 3F/0E is cleared per LU")
}

// Every data-out command meets a transport that carried less or more
// than its CDB asks for as SAM-5 allows: less is refused with 05/0E/03
// and nothing is written, except whole blocks for WRITE and WRITE AND
// VERIFY (written, the rest reported as the residual, as libiscsi's
// residual tests expect); more is cut to the CDB's length, except for
// WRITE SAME and COMPARE AND WRITE, which refuse any other amount. Either way the
// response names the CDB's length, so the fabric reports the residual.
func TestDataOutLengthMismatch(t *testing.T) {
	const bs = 512
	rw := func(op byte, n byte) []byte {
		switch op {
		case OpWrite6:
			return []byte{op, 0, 0, 8, n, 0}
		case OpWrite10, OpWriteVerify10, OpWriteSame10:
			return []byte{op, 0, 0, 0, 0, 8, 0, 0, n, 0}
		case OpWrite12, OpWriteVerify12:
			return []byte{op, 0, 0, 0, 0, 8, 0, 0, 0, n, 0, 0}
		}
		c := cdb16(op, 8, uint32(n))
		if op == OpCompareAndWrite {
			c[13], c[12] = n, 0
		}
		return c
	}
	tests := []struct {
		name  string
		cdb   []byte
		need  int  // the CDB's data-out length
		write bool // the command writes blocks 8.. when it runs
		exact bool // any other amount of data-out is refused (WRITE SAME, COMPARE AND WRITE)
	}{
		{"WRITE(6)", rw(OpWrite6, 2), 2 * bs, true, false},
		{"WRITE(10)", rw(OpWrite10, 2), 2 * bs, true, false},
		{"WRITE(12)", rw(OpWrite12, 2), 2 * bs, true, false},
		{"WRITE(16)", rw(OpWrite16, 2), 2 * bs, true, false},
		{"WRITE AND VERIFY(10)", rw(OpWriteVerify10, 2), 2 * bs, true, false},
		{"WRITE AND VERIFY(12)", rw(OpWriteVerify12, 2), 2 * bs, true, false},
		{"WRITE AND VERIFY(16)", rw(OpWriteVerify16, 2), 2 * bs, true, false},
		{"WRITE SAME(10)", rw(OpWriteSame10, 2), bs, true, true},
		{"WRITE SAME(16)", rw(OpWriteSame16, 2), bs, true, true},
		{"ORWRITE(16)", rw(OpOrWrite16, 2), 2 * bs, true, false},
		{"COMPARE AND WRITE", rw(OpCompareAndWrite, 1), 2 * bs, true, true},
		{"UNMAP", []byte{OpUnmap, 0, 0, 0, 0, 0, 0, 0, 24, 0}, 24, false, false},
		{"VERIFY(16) BYTCHK=1", func() []byte { c := rw(OpVerify16, 2); c[1] = 0x02; return c }(), 2 * bs, false, false},
		{"PERSISTENT RESERVE OUT", proutCDB(0, 0), 24, false, false},
		{"MODE SELECT(10)", []byte{OpModeSelect10, 0x10, 0, 0, 0, 0, 0, 0, 8, 0}, 8, false, false},
	}
	type variant struct {
		name string
		n    func(need int) int
		good bool // answered GOOD
	}
	more := variant{"with more data", func(need int) int { return need + bs + 100 }, true}
	part := variant{"with less data (part of a block)", func(need int) int {
		if need > 100 {
			return need - 100
		}
		return need / 2
	}, false}
	whole := variant{"with one whole block less", func(need int) int { return need - bs }, true}
	for _, tc := range tests {
		variants := []variant{more, part}
		if tc.write && strings.HasPrefix(tc.name, "WRITE") && !strings.HasPrefix(tc.name, "WRITE SAME") {
			variants = append(variants, whole) // WRITE and WRITE AND VERIFY write the whole blocks carried
		}
		for _, v := range variants {
			t.Run(tc.name+" "+v.name, func(t *testing.T) {
				s, be := newTestServer(t)
				full := tc.need + bs + 100
				data := bytes.Repeat([]byte{'b'}, full)
				switch tc.name {
				case "COMPARE AND WRITE":
					copy(data, make([]byte, bs)) // compares equal with the zeroed blocks
				case "UNMAP":
					data = make([]byte, full)
					binary.BigEndian.PutUint16(data, 22)
					binary.BigEndian.PutUint16(data[2:], 16)
					binary.BigEndian.PutUint64(data[8:], 8)
					binary.BigEndian.PutUint32(data[16:], 1)
				case "MODE SELECT(10)", "VERIFY(16) BYTCHK=1":
					data = make([]byte, full) // a bare header; blocks of zeros
				case "PERSISTENT RESERVE OUT":
					data = make([]byte, full)
					copy(data, prParams(0, 0xa1))
				}
				data = data[:v.n(tc.need)]
				before := append([]byte(nil), be.b[8*bs:12*bs]...)
				r := s.Execute(&Command{Nexus: n1, CDB: tc.cdb, Data: data})
				require.Equal(t, tc.need, r.DataOutLen, "the CDB's length, for the residual")
				if !v.good || tc.exact && v.name != whole.name {
					_, asc, ascq := senseOf(t, r)
					require.Equal(t, []byte{0x0e, 0x03}, []byte{asc, ascq})
					require.Equal(t, before, be.b[8*bs:12*bs], "nothing written")
					return
				}
				require.Equal(t, StatusGood, r.Status)
				if !tc.write {
					return
				}
				require.Equal(t, byte('b'), be.b[8*bs], "the blocks hold the data sent")
				if v.name == whole.name {
					require.Equal(t, before[bs:], be.b[9*bs:12*bs], "only the whole blocks carried")
				} else {
					require.Equal(t, before[2*bs:], be.b[10*bs:12*bs], "nothing past the CDB's blocks")
				}
			})
		}
	}
}

// TestReadCapacityPhysicalBlock: READ CAPACITY(16) reports the logical
// blocks per physical block exponent the LU was configured with, and a
// physical size the field cannot carry is refused when the LU is added.
func TestReadCapacityPhysicalBlock(t *testing.T) {
	tests := []struct {
		logical, physical int
		exp               byte
		bad               bool
	}{
		{512, 0, 0, false},
		{512, 512, 0, false},
		{512, 4096, 3, false},
		{4096, 4096, 0, false},
		{4096, 8192, 1, false},
		{512, 512 << 15, 15, false},
		{512, 512 << 16, 0, true},
		{512, 1000, 0, true},
		{4096, 512, 0, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d/%d", tc.logical, tc.physical), func(t *testing.T) {
			s := NewServer()
			_, err := s.AddLU(LUConfig{LUN: 0, BlockSize: tc.logical, PhysicalBlockSize: tc.physical, Blocks: 64,
				Backend: &memBackend{b: make([]byte, 64*tc.logical)}})
			if tc.bad {
				require.ErrorContains(t, err, "physical block size")
				return
			}
			require.NoError(t, err)
			s.NexusUp(n1)
			s.Execute(&Command{Nexus: n1, CDB: []byte{OpTestUnitReady, 0, 0, 0, 0, 0}}) // the power-on UA
			r := s.Execute(&Command{Nexus: n1, CDB: []byte{0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}})
			require.Equal(t, StatusGood, r.Status)
			require.Equal(t, uint32(tc.logical), binary.BigEndian.Uint32(r.Data[8:]))
			require.Equal(t, tc.exp, r.Data[13]&0x0f, "LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT")
		})
	}
}
