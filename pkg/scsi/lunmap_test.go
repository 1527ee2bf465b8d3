package scsi

import (
	"encoding/binary"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tableMap is a LUNMapper from a table: initiator -> host LUN -> LU.
type tableMap struct {
	mu sync.Mutex
	m  map[string]map[uint64]uint64
}

func (t *tableMap) Resolve(n Nexus, lun uint64) (uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[n.InitiatorName][lun]
	return v, ok
}

func (t *tableMap) Visible(n Nexus) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint64
	for l := range t.m[n.InitiatorName] {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func reportLUNsOf(t *testing.T, s *Server, n Nexus) []uint64 {
	r := s.Execute(&Command{Nexus: n, LUN: 0, CDB: []byte{OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}, DataInLen: 1024})
	require.Equal(t, StatusGood, r.Status)
	var out []uint64
	for i := 8; i+8 <= len(r.Data); i += 8 {
		out = append(out, uint64(binary.BigEndian.Uint16(r.Data[i:])&0x3fff))
	}
	return out
}

func TestLUNMapping(t *testing.T) {
	s, _ := newTestServer(t)
	_, err := s.AddLU(LUConfig{LUN: 7, BlockSize: 512, Blocks: 8, Backend: &memBackend{b: make([]byte, 4096)},
		Identity: Identity{Serial: "SER7"}})
	require.NoError(t, err)
	for _, n := range []Nexus{n1, n2} {
		reportLUNsOf(t, s, n) // clears 3F/0E from adding LU 7
		s.Execute(&Command{Nexus: n, LUN: 7, CDB: make([]byte, 6)})
	}
	m := &tableMap{m: map[string]map[uint64]uint64{n1.InitiatorName: {0: 7, 3: 0}}}
	s.SetLUNMapper(m)

	require.Equal(t, []uint64{0, 3}, reportLUNsOf(t, s, n1), "h1 sees exactly its LUNs")
	require.Empty(t, reportLUNsOf(t, s, n2), "an unmapped initiator sees none")

	serial := func(n Nexus, lun uint64) string {
		r := s.Execute(&Command{Nexus: n, LUN: lun, CDB: []byte{OpInquiry, 1, 0x80, 0, 255, 0}, DataInLen: 255})
		require.Equal(t, StatusGood, r.Status)
		return string(r.Data[4:])
	}
	require.Equal(t, "SER7", serial(n1, 0), "host LUN 0 is LU 7")
	require.Equal(t, "SER0", serial(n1, 3), "host LUN 3 is LU 0")

	tests := []struct {
		name string
		n    Nexus
		lun  uint64
	}{{"h2 at LUN 0", n2, 0}, {"h1 at an unmapped LUN", n1, 7}, {"h1 at LUN 1", n1, 1}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := s.Execute(&Command{Nexus: tc.n, LUN: tc.lun, CDB: []byte{OpInquiry, 0, 0, 0, 96, 0}, DataInLen: 96})
			require.Equal(t, StatusGood, r.Status)
			require.Equal(t, byte(0x7f), r.Data[0], "peripheral qualifier 011b, device type 1Fh")
			r = s.Execute(&Command{Nexus: tc.n, LUN: tc.lun, CDB: []byte{OpRead10, 0, 0, 0, 0, 0, 0, 0, 1, 0}, DataInLen: 512})
			_, asc, ascq := senseOf(t, r)
			require.Equal(t, [2]byte{0x25, 0}, [2]byte{asc, ascq}, "LOGICAL UNIT NOT SUPPORTED")
			require.False(t, s.LUNExists(tc.n, tc.lun))
		})
	}
	require.True(t, s.LUNExists(n1, 3))

	// h2 is given LU 0 at LUN 5: only h2's nexus gets 3F/0E, on what it
	// now sees; REPORT LUNS clears it.
	m.mu.Lock()
	m.m[n2.InitiatorName] = map[uint64]uint64{5: 0}
	m.mu.Unlock()
	require.Equal(t, 1, s.MapChanged(func(n Nexus) bool { return n.InitiatorName == n2.InitiatorName }))
	require.Empty(t, s.LU(0).Pending(n1))
	require.Equal(t, []Reason{ReasonUAReportedLUNsChanged}, s.LU(0).Pending(n2))
	r := s.Execute(&Command{Nexus: n2, LUN: 5, CDB: make([]byte, 6)})
	_, asc, ascq := senseOf(t, r)
	require.Equal(t, [2]byte{0x3f, 0x0e}, [2]byte{asc, ascq})
	require.Equal(t, []uint64{5}, reportLUNsOf(t, s, n2))
	require.Equal(t, StatusGood, s.Execute(&Command{Nexus: n2, LUN: 5, CDB: make([]byte, 6)}).Status)
}
