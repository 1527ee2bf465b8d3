package scsi

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// memBackend is an in-memory Backend (a real fake, not a mock).
type memBackend struct {
	mu      sync.Mutex
	b       []byte
	flushes int
	// failReads: reads fail as a medium error would.
	failReads bool
}

func (m *memBackend) ReadAt(_ uint16, p []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failReads {
		return errors.New("medium error")
	}
	copy(p, m.b[off:])
	return nil
}
func (m *memBackend) WriteAt(_ uint16, p []byte, off int64, _ bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	copy(m.b[off:], p)
	return nil
}
func (m *memBackend) Flush(uint16) error { m.mu.Lock(); m.flushes++; m.mu.Unlock(); return nil }
func (m *memBackend) Unmap(_ uint16, off, n int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.b[off : off+n])
	return nil
}

var (
	n1 = Nexus{InitiatorName: "iqn.a.b:h1", InitiatorPort: "iqn.a.b:h1,i,0x1", TargetPort: 1}
	n2 = Nexus{InitiatorName: "iqn.a.b:h2", InitiatorPort: "iqn.a.b:h2,i,0x2", TargetPort: 3}
)

func newTestServer(t *testing.T) (*Server, *memBackend) {
	s := NewServer()
	s.AddTargetPort(TargetPortInfo{RelativeID: 1, Name: "iqn.t.x:a,t,0x0001"})
	s.AddTargetPort(TargetPortInfo{RelativeID: 3, Name: "iqn.t.x:a,t,0x0003"})
	be := &memBackend{b: make([]byte, 1<<20)}
	_, err := s.AddLU(LUConfig{LUN: 0, BlockSize: 512, Blocks: 2048, Backend: be,
		Identity: Identity{Vendor: "ALUAD", Product: "test", Revision: "1", Serial: "SER0", NAA: []byte{0x30, 1, 2, 3, 4, 5, 6, 7}}})
	require.NoError(t, err)
	s.NexusUp(n1)
	s.NexusUp(n2)
	for _, n := range []Nexus{n1, n2} { // clear the power-on UA
		s.Execute(&Command{Nexus: n, CDB: make([]byte, 6)})
	}
	return s, be
}

func senseOf(t *testing.T, r Response) (byte, byte, byte) {
	t.Helper()
	require.Equal(t, StatusCheckCondition, r.Status)
	ps, err := ParseSense(r.Sense)
	require.NoError(t, err)
	return ps.Key, ps.ASC, ps.ASCQ
}

func getLBAStatusCDB(lba uint64, alloc uint32) []byte {
	c := cdb16(OpServiceActionIn16, lba, alloc)
	c[1] = SAGetLBAStatus
	return c
}

func cdb16(op byte, lba uint64, n uint32) []byte {
	c := make([]byte, 16)
	c[0] = op
	binary.BigEndian.PutUint64(c[2:], lba)
	binary.BigEndian.PutUint32(c[10:], n)
	return c
}

func TestCommandSenseTable(t *testing.T) {
	s, _ := newTestServer(t)
	tests := []struct {
		name           string
		lun            uint64
		cdb            []byte
		data           []byte
		key, asc, ascq byte
	}{
		{"unknown opcode", 0, []byte{0xff, 0, 0, 0, 0, 0}, nil, KeyIllegalRequest, 0x20, 0},
		{"short CDB", 0, []byte{0x28, 0}, nil, KeyIllegalRequest, 0x24, 0},
		{"read past end", 0, cdb16(OpRead16, 2047, 2), nil, KeyIllegalRequest, 0x21, 0},
		{"LBA wraps", 0, cdb16(OpRead16, ^uint64(0), 2), nil, KeyIllegalRequest, 0x21, 0},
		{"RDPROTECT without PI", 0, append([]byte{0x88, 0x20}, make([]byte, 14)...), nil, KeyIllegalRequest, 0x24, 0},
		{"no such LUN", 5, make([]byte, 6), nil, KeyIllegalRequest, 0x25, 0},
		{"VPD page unknown", 0, []byte{0x12, 1, 0x99, 0, 255, 0}, nil, KeyIllegalRequest, 0x24, 0},
		{"NACA in control byte", 0, []byte{0, 0, 0, 0, 0, 0x04}, nil, KeyIllegalRequest, 0x24, 0},
		{"WRITE SAME zero blocks (WSNZ)", 0, []byte{0x41, 0, 0, 0, 0, 0, 0, 0, 0, 0}, make([]byte, 512), KeyIllegalRequest, 0x24, 0},
		{"WRITE(10) with less data-out than its transfer length", 0, []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 2, 0}, make([]byte, 700),
			KeyIllegalRequest, 0x0e, 0x03},
		{"MODE SELECT with less data-out than its parameter list", 0, []byte{0x15, 0x10, 0, 0, 24, 0}, make([]byte, 12),
			KeyIllegalRequest, 0x0e, 0x03},
		{"LOG SENSE of a page it has not", 0, []byte{0x4d, 0, 0x40 | 0x30, 0, 0, 0, 0, 0, 255, 0}, nil, KeyIllegalRequest, 0x24, 0},
		{"LOG SENSE saving parameters", 0, []byte{0x4d, 0x01, 0x40 | 0x0d, 0, 0, 0, 0, 0, 255, 0}, nil, KeyIllegalRequest, 0x24, 0},
		{"GET LBA STATUS past the end", 0, getLBAStatusCDB(2048, 64), nil, KeyIllegalRequest, 0x21, 0},
		{"STPG without ALUA", 0, []byte{0xa4, 0x0a, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0}, make([]byte, 4), KeyIllegalRequest, 0x20, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.Execute(&Command{Nexus: n1, LUN: tc.lun, CDB: tc.cdb, Data: tc.data})
			k, a, q := senseOf(t, r)
			require.Equal(t, []byte{tc.key, tc.asc, tc.ascq}, []byte{k, a, q})
		})
	}
}

func TestReadWriteCompareAndWrite(t *testing.T) {
	s, be := newTestServer(t)
	data := bytes.Repeat([]byte{0xab}, 1024)
	r := s.Execute(&Command{Nexus: n1, CDB: cdb16(OpWrite16, 10, 2), Data: data})
	require.Equal(t, StatusGood, r.Status)
	require.Equal(t, 1024, r.DataOutLen)
	require.Equal(t, data, be.b[5120:6144])
	r = s.Execute(&Command{Nexus: n2, CDB: cdb16(OpRead16, 10, 2)})
	require.Equal(t, data, r.Data)

	caw := make([]byte, 16)
	caw[0] = OpCompareAndWrite
	binary.BigEndian.PutUint64(caw[2:], 10)
	caw[13] = 1
	wrong := append(bytes.Repeat([]byte{0xab}, 511), 0x00)
	r = s.Execute(&Command{Nexus: n1, CDB: caw, Data: append(wrong, make([]byte, 512)...)})
	k, a, _ := senseOf(t, r)
	require.Equal(t, []byte{KeyMiscompare, 0x1d}, []byte{k, a})
	ps, _ := ParseSense(r.Sense)
	require.True(t, ps.HasInfo)
	require.Equal(t, uint64(511), ps.Info, "INFORMATION is the offset of the first miscompare")
	r = s.Execute(&Command{Nexus: n1, CDB: caw, Data: append(bytes.Repeat([]byte{0xab}, 512), bytes.Repeat([]byte{1}, 512)...)})
	require.Equal(t, StatusGood, r.Status)
	require.Equal(t, bytes.Repeat([]byte{1}, 512), be.b[5120:5632])
}

func TestUnitAttentionSemantics(t *testing.T) {
	s, _ := newTestServer(t)
	s.QueueUA(0, false, ReasonUAAsymmetricChanged)
	inq := []byte{0x12, 0, 0, 0, 96, 0}
	require.Equal(t, StatusGood, s.Execute(&Command{Nexus: n1, CDB: inq}).Status, "INQUIRY does not report a UA")
	rl := []byte{0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}
	require.Equal(t, StatusGood, s.Execute(&Command{Nexus: n1, CDB: rl}).Status, "REPORT LUNS does not report it")
	_, a, q := senseOf(t, s.Execute(&Command{Nexus: n1, CDB: make([]byte, 6)}))
	require.Equal(t, []byte{0x2a, 0x06}, []byte{a, q})
	require.Equal(t, StatusGood, s.Execute(&Command{Nexus: n1, CDB: make([]byte, 6)}).Status, "reported once, then cleared")
	// REQUEST SENSE returns it as data on the other nexus.
	r := s.Execute(&Command{Nexus: n2, CDB: []byte{0x03, 0, 0, 0, 252, 0}})
	require.Equal(t, StatusGood, r.Status)
	ps, err := ParseSense(r.Data)
	require.NoError(t, err)
	require.Equal(t, []byte{KeyUnitAttention, 0x2a, 0x06}, []byte{ps.Key, ps.ASC, ps.ASCQ})
	require.Equal(t, StatusGood, s.Execute(&Command{Nexus: n2, CDB: make([]byte, 6)}).Status)
}

func proutCDB(sa, typ byte) []byte {
	c := make([]byte, 10)
	c[0], c[1], c[2] = OpPROut, sa, typ
	binary.BigEndian.PutUint32(c[5:], 24)
	return c
}

func prParams(key, saKey uint64) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, key)
	binary.BigEndian.PutUint64(b[8:], saKey)
	return b
}

func TestPersistentReservationConflicts(t *testing.T) {
	tests := []struct {
		typ             byte
		n2Registered    bool
		readOK, writeOK bool
	}{
		{prTypeWE, false, true, false},
		{prTypeEA, false, false, false},
		{prTypeWERO, true, true, true},
		{prTypeWERO, false, true, false},
		{prTypeEARO, true, true, true},
		{prTypeEARO, false, false, false},
		{prTypeWEAR, true, true, true},
		{prTypeEAAR, false, false, false},
	}
	for _, tc := range tests {
		s, _ := newTestServer(t)
		ex := func(n Nexus, cdb, data []byte) Status {
			return s.Execute(&Command{Nexus: n, CDB: cdb, Data: data}).Status
		}
		require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), prParams(0, 0xa1)))
		if tc.n2Registered {
			require.Equal(t, StatusGood, ex(n2, proutCDB(0, 0), prParams(0, 0xb2)))
		}
		require.Equal(t, StatusGood, ex(n1, proutCDB(1, tc.typ), prParams(0xa1, 0)))
		read := ex(n2, cdb16(OpRead16, 0, 1), nil) == StatusGood
		write := ex(n2, cdb16(OpWrite16, 0, 1), make([]byte, 512)) == StatusGood
		require.Equal(t, tc.readOK, read, "type %d registered=%v read", tc.typ, tc.n2Registered)
		require.Equal(t, tc.writeOK, write, "type %d registered=%v write", tc.typ, tc.n2Registered)
		require.Equal(t, StatusGood, ex(n1, cdb16(OpWrite16, 0, 1), make([]byte, 512)), "holder writes")
	}
}

func TestReserve6ReleasedOnNexusLoss(t *testing.T) {
	s, _ := newTestServer(t)
	res := []byte{OpReserve6, 0, 0, 0, 0, 0}
	require.Equal(t, StatusGood, s.Execute(&Command{Nexus: n1, CDB: res}).Status)
	require.Equal(t, StatusReservationConflict, s.Execute(&Command{Nexus: n2, CDB: res}).Status)
	s.NexusLost(n1)
	require.Equal(t, StatusGood, s.Execute(&Command{Nexus: n2, CDB: res}).Status)
}

func TestModeSelectDSense(t *testing.T) {
	s, _ := newTestServer(t)
	ms := s.Execute(&Command{Nexus: n1, CDB: []byte{0x1a, 0x08, 0x0a, 0, 255, 0}})
	require.Equal(t, StatusGood, ms.Status)
	page := append([]byte{0, 0, 0, 0}, ms.Data[4:]...)
	page[4+2] |= 0x04 // D_SENSE
	r := s.Execute(&Command{Nexus: n1, CDB: []byte{0x15, 0x10, 0, 0, byte(len(page)), 0}, Data: page})
	require.Equal(t, StatusGood, r.Status)
	r = s.Execute(&Command{Nexus: n1, CDB: []byte{0xff, 0, 0, 0, 0, 0}})
	require.Equal(t, byte(0x72), r.Sense[0], "descriptor sense after D_SENSE=1")
	// A change to a bit that is not changeable is refused.
	page[4+3] ^= 0x10
	r = s.Execute(&Command{Nexus: n1, CDB: []byte{0x15, 0x10, 0, 0, byte(len(page)), 0}, Data: page})
	ps, _ := ParseSense(r.Sense)
	require.Equal(t, []byte{KeyIllegalRequest, 0x26}, []byte{ps.Key, ps.ASC})
	// The other nexus learns of the change.
	_, a, q := senseOf(t, s.Execute(&Command{Nexus: n2, CDB: make([]byte, 6)}))
	require.Equal(t, []byte{0x2a, 0x01}, []byte{a, q})
}

func TestVPD83PerPort(t *testing.T) {
	s, _ := newTestServer(t)
	get := func(n Nexus) []byte {
		r := s.Execute(&Command{Nexus: n, CDB: []byte{0x12, 1, 0x83, 0x10, 0, 0}})
		require.Equal(t, StatusGood, r.Status)
		return r.Data
	}
	a, b := get(n1), get(n2)
	require.Equal(t, a[4:16], b[4:16], "the NAA designator is the same on every path")
	require.Equal(t, []byte{0x01, 0x03, 0x00, 0x08, 0x30, 1, 2, 3, 4, 5, 6, 7}, a[4:16], "an NAA 3h designator of 8 bytes")
	require.NotEqual(t, a, b, "the relative target port differs per path")
}

func TestSenseRoundTrip(t *testing.T) {
	for _, desc := range []bool{false, true} {
		e := &SenseError{Reason: ReasonMiscompare, Info: 4097, HasInfo: true}
		ps, err := ParseSense(BuildSense(e, desc))
		require.NoError(t, err)
		require.Equal(t, ParsedSense{Key: KeyMiscompare, ASC: 0x1d, Info: 4097, HasInfo: true, Descriptor: desc}, ps)
	}
	_, err := ParseSense([]byte{0x70, 0})
	require.Error(t, err)
}

func FuzzExecute(f *testing.F) {
	f.Add([]byte{0x12, 1, 0x83, 0, 255, 0}, []byte{})
	f.Add(cdb16(OpWrite16, 0, 1), make([]byte, 512))
	f.Add([]byte{OpUnmap, 0, 0, 0, 0, 0, 0, 0, 24, 0}, make([]byte, 24))
	f.Add(proutCDB(4, 1), prParams(1, 0))
	f.Add([]byte{0x55, 0x10, 0, 0, 0, 0, 0, 0, 20, 0}, make([]byte, 20))
	f.Add([]byte{0xa3, 0x0c, 0x82, 0x9e, 0, 0x10, 0, 0, 1, 0, 0, 0}, []byte{})
	// MODE SELECT(6) of the caching page, saved (WCE off).
	f.Add([]byte{0x15, 0x11, 0, 0, 24, 0}, append([]byte{0, 0, 0, 0, 0x08, 18}, make([]byte, 18)...))
	f.Add([]byte{OpLogSense, 0, 0x40 | 0x02, 0, 0, 0, 3, 0, 255, 0}, []byte{})
	f.Add([]byte{OpLogSense, 0, 0x00, 0xff, 0, 0, 0, 0, 8, 0}, []byte{})
	f.Add(getLBAStatusCDB(3, 40), []byte{})
	f.Add([]byte{0x12, 1, 0x86, 0, 255, 0}, []byte{})
	s := NewServer()
	be := &memBackend{b: make([]byte, 64*512)}
	s.AddLU(LUConfig{LUN: 0, BlockSize: 512, Blocks: 64, Backend: be})
	s.NexusUp(n1)
	f.Fuzz(func(t *testing.T, cdb, data []byte) {
		r := s.Execute(&Command{Nexus: n1, CDB: cdb, Data: data})
		if r.Status == StatusCheckCondition {
			if _, err := ParseSense(r.Sense); err != nil {
				t.Fatalf("unparseable sense %x: %v", r.Sense, err)
			}
		}
	})
}

func FuzzParseSense(f *testing.F) {
	f.Add(BuildSense(Sense(ReasonLBAOutOfRange), false))
	f.Add(BuildSense(&SenseError{Reason: ReasonMiscompare, HasInfo: true, Info: 9}, true))
	f.Fuzz(func(t *testing.T, b []byte) { ParseSense(b) })
}
