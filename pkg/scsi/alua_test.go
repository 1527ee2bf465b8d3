package scsi

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// fakeALUA is a small real ALUA: one group per target port, with states
// set by the test, and STPG requests recorded.
type fakeALUA struct {
	mu     sync.Mutex
	tpgs   byte
	states map[uint16]alua.AccessState // by target port (= group id)
	stpg   []alua.GroupRequest
}

func (f *fakeALUA) TPGS() byte                           { return f.tpgs }
func (f *fakeALUA) TransitionTime() byte                 { return 7 }
func (f *fakeALUA) PortGroup(port uint16) (uint16, bool) { return port, true }
func (f *fakeALUA) State(n Nexus, lun uint64) alua.AccessState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.states[n.TargetPort]
}
func (f *fakeALUA) Groups(n Nexus, lun uint64) []PortGroupState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []PortGroupState{{ID: 1, State: f.states[1], Pref: true, Ports: []uint16{1}},
		{ID: 3, State: f.states[3], Ports: []uint16{3}}}
}
func (f *fakeALUA) SetTargetPortGroups(n Nexus, lun uint64, reqs []alua.GroupRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stpg = append(f.stpg, reqs...)
	return nil
}

func (f *fakeALUA) set(port uint16, st alua.AccessState) {
	f.mu.Lock()
	f.states[port] = st
	f.mu.Unlock()
}

func newALUAServer(t *testing.T, tpgs byte) (*Server, *fakeALUA) {
	s, _ := newTestServer(t)
	f := &fakeALUA{tpgs: tpgs, states: map[uint16]alua.AccessState{1: alua.ActiveOptimized, 3: alua.ActiveNonOptimized}}
	s.SetALUA(f)
	return s, f
}

// The allowed-command lists of SPC-4 5.15.2.4, one row per command and
// state: "" is GOOD, otherwise the expected ASC/ASCQ.
func TestALUAGate(t *testing.T) {
	read10 := []byte{OpRead10, 0, 0, 0, 0, 0, 0, 0, 1, 0}
	cmds := []struct {
		name string
		cdb  []byte
		want map[alua.AccessState]string
	}{
		{"TEST UNIT READY", make([]byte, 6), map[alua.AccessState]string{
			alua.Standby: "04/0b", alua.Unavailable: "04/0c", alua.Transitioning: "04/0a"}},
		{"READ(10)", read10, map[alua.AccessState]string{
			alua.Standby: "04/0b", alua.Unavailable: "04/0c", alua.Transitioning: "04/0a"}},
		{"INQUIRY", []byte{OpInquiry, 0, 0, 0, 36, 0}, map[alua.AccessState]string{}},
		{"REPORT LUNS", []byte{OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0}, map[alua.AccessState]string{}},
		{"REQUEST SENSE", []byte{OpRequestSense, 0, 0, 0, 18, 0}, map[alua.AccessState]string{}},
		{"RTPG", []byte{OpMaintenanceIn, 0x0a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, map[alua.AccessState]string{}},
		{"RSOC", []byte{OpMaintenanceIn, 0x0c, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, map[alua.AccessState]string{
			alua.Standby: "04/0b", alua.Unavailable: "04/0c", alua.Transitioning: "04/0a"}},
		{"MODE SENSE(6)", []byte{OpModeSense6, 0, 0x3f, 0, 255, 0}, map[alua.AccessState]string{
			alua.Unavailable: "04/0c", alua.Transitioning: "04/0a"}},
		{"READ CAPACITY(16)", []byte{OpServiceActionIn16, SAReadCapacity16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0},
			map[alua.AccessState]string{alua.Unavailable: "04/0c", alua.Transitioning: "04/0a"}},
		{"PR IN", []byte{OpPRIn, 0, 0, 0, 0, 0, 0, 0, 64, 0}, map[alua.AccessState]string{
			alua.Unavailable: "04/0c", alua.Transitioning: "04/0a"}},
		{"STPG (explicit)", []byte{OpMaintenanceOut, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, map[alua.AccessState]string{
			alua.Transitioning: "04/0a"}},
	}
	states := []alua.AccessState{alua.ActiveOptimized, alua.ActiveNonOptimized, alua.Standby, alua.Unavailable,
		alua.Transitioning, alua.Offline}
	for _, c := range cmds {
		for _, st := range states {
			t.Run(fmt.Sprintf("%s/%x", c.name, st), func(t *testing.T) {
				s, f := newALUAServer(t, 0x3)
				f.set(3, st)
				r := s.Execute(&Command{Nexus: n2, CDB: c.cdb, DataInLen: 4096})
				want := c.want[st]
				if st == alua.Offline { // offline is gated like unavailable
					want = c.want[alua.Unavailable]
				}
				if want == "" {
					require.Equal(t, StatusGood, r.Status, "sense %x", r.Sense)
					return
				}
				require.Equal(t, StatusCheckCondition, r.Status)
				key, asc, ascq := senseOf(t, r)
				require.Equal(t, byte(KeyNotReady), key)
				require.Equal(t, want, fmt.Sprintf("%02x/%02x", asc, ascq))
			})
		}
	}
}

// A pending unit attention is reported before the gate (LIO order), and
// the gate does not consume it.
func TestUABeforeGate(t *testing.T) {
	s, f := newALUAServer(t, 0x1)
	f.set(3, alua.Standby)
	s.QueueUA(0, false, ReasonUAAsymmetricChanged)
	r := s.Execute(&Command{Nexus: n2, CDB: make([]byte, 6)})
	_, asc, ascq := senseOf(t, r)
	require.Equal(t, [2]byte{0x2a, 0x06}, [2]byte{asc, ascq})
	r = s.Execute(&Command{Nexus: n2, CDB: make([]byte, 6)})
	_, asc, ascq = senseOf(t, r)
	require.Equal(t, [2]byte{0x04, 0x0b}, [2]byte{asc, ascq})
}

func TestSTPGByMode(t *testing.T) {
	stpg := []byte{OpMaintenanceOut, 0x0a, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}
	params := []byte{0, 0, 0, 0, 0, 0, 0, 3}
	s, f := newALUAServer(t, 0x1)
	r := s.Execute(&Command{Nexus: n1, CDB: stpg, Data: params})
	key, asc, _ := senseOf(t, r)
	require.Equal(t, [2]byte{KeyIllegalRequest, 0x20}, [2]byte{key, asc}, "implicit only: not supported")
	require.Empty(t, f.stpg)

	s, f = newALUAServer(t, 0x3)
	r = s.Execute(&Command{Nexus: n1, CDB: stpg, Data: params})
	require.Equal(t, StatusGood, r.Status)
	require.Equal(t, []alua.GroupRequest{{State: alua.ActiveOptimized, Group: 3}}, f.stpg)
	require.Equal(t, 8, r.DataOutLen)
}

func TestRTPGRoundTrip(t *testing.T) {
	groups := []PortGroupState{
		{ID: 1, State: alua.ActiveOptimized, Pref: true, Status: 2, Ports: []uint16{1, 2}},
		{ID: 2, State: alua.Standby, Status: 0, Ports: []uint16{3, 4, 5}},
		{ID: 9, State: alua.Transitioning, Status: 1},
	}
	for _, ext := range []bool{false, true} {
		b := AppendRTPG(nil, groups, ext, 12)
		got, gotExt, tt, err := ParseRTPG(b)
		require.NoError(t, err)
		require.Equal(t, ext, gotExt)
		if ext {
			require.Equal(t, byte(12), tt)
		}
		for i := range got {
			if got[i].Ports == nil {
				got[i].Ports = groups[i].Ports
			}
		}
		require.Equal(t, groups, got)
	}
	_, _, _, err := ParseRTPG([]byte{0, 0, 0, 8, 0x80, 0x8f, 0, 1, 0, 0, 0, 5})
	require.ErrorContains(t, err, "past the end")
	_, _, _, err = ParseRTPG([]byte{0, 0, 0, 12, 0x80, 0x8f, 0, 1})
	require.ErrorContains(t, err, "exceeds")
}

// Adding or removing a LU queues REPORTED LUNS DATA HAS CHANGED on every
// other LU for every nexus; REPORT LUNS clears it (SPC-4 6.33).
func TestLUNMapChangeUA(t *testing.T) {
	s, _ := newTestServer(t)
	_, err := s.AddLU(LUConfig{LUN: 5, BlockSize: 512, Blocks: 8, Backend: &memBackend{b: make([]byte, 4096)}})
	require.NoError(t, err)
	for _, n := range []Nexus{n1, n2} {
		require.Equal(t, []Reason{ReasonUAReportedLUNsChanged}, s.LU(0).Pending(n))
		require.Equal(t, []Reason{ReasonUAPowerOn}, s.LU(5).Pending(n))
	}
	r := s.Execute(&Command{Nexus: n1, LUN: 0, CDB: []byte{OpReportLUNs, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0}})
	require.Equal(t, StatusGood, r.Status)
	require.Empty(t, s.LU(0).Pending(n1))
	require.NotEmpty(t, s.LU(0).Pending(n2))

	require.NoError(t, s.RemoveLU(5))
	require.Nil(t, s.LU(5))
	require.ErrorContains(t, s.RemoveLU(5), "no LUN 5")
	r = s.Execute(&Command{Nexus: n1, LUN: 0, CDB: make([]byte, 6)})
	_, asc, ascq := senseOf(t, r)
	require.Equal(t, [2]byte{0x3f, 0x0e}, [2]byte{asc, ascq})
	r = s.Execute(&Command{Nexus: n1, LUN: 5, CDB: make([]byte, 6)})
	_, asc, _ = senseOf(t, r)
	require.Equal(t, byte(0x25), asc)
}

// Per-nexus I/O counters: reads, writes and the share that arrived
// through an active/non-optimized port.
func TestIOStats(t *testing.T) {
	s, _ := newALUAServer(t, 0x1)
	read10 := []byte{OpRead10, 0, 0, 0, 0, 0, 0, 0, 2, 0}
	write10 := []byte{OpWrite10, 0, 0, 0, 0, 0, 0, 0, 1, 0}
	s.Execute(&Command{Nexus: n1, CDB: read10, DataInLen: 1024})
	s.Execute(&Command{Nexus: n2, CDB: read10, DataInLen: 1024})
	s.Execute(&Command{Nexus: n2, CDB: write10, Data: make([]byte, 512)})
	byPort := map[uint16]NexusIO{}
	for _, st := range s.IOStats() {
		byPort[st.Nexus.TargetPort] = st
	}
	require.Equal(t, uint64(1), byPort[1].Reads)
	require.Equal(t, uint64(1024), byPort[1].BytesRead)
	require.Equal(t, uint64(0), byPort[1].NonOptimized)
	require.Equal(t, uint64(1), byPort[3].Writes)
	require.Equal(t, uint64(512), byPort[3].BytesWritten)
	require.Equal(t, uint64(2), byPort[3].NonOptimized)
	// Commands the fabric answered itself count in Other, on their LU
	// only; an unknown LU is ignored.
	other := byPort[1].Other
	s.CountAnswered(n1, 0, 3)
	s.CountAnswered(n1, 9, 5)
	for _, st := range s.IOStats() {
		if st.Nexus == n1 {
			require.Equal(t, other+3, st.Other)
			require.Equal(t, uint64(1), st.Reads)
		}
	}
	s.NexusLost(n2)
	for _, st := range s.IOStats() {
		require.Equal(t, st.Nexus == n2, st.Gone)
	}
	s.ForgetIO(n2, 0)
	require.Len(t, s.IOStats(), 1)
}

func FuzzParseRTPG(f *testing.F) {
	f.Add(AppendRTPG(nil, []PortGroupState{{ID: 1, Ports: []uint16{1}}}, true, 3))
	f.Add(AppendRTPG(nil, []PortGroupState{{ID: 1, State: 1, Ports: []uint16{1, 2}}, {ID: 2}}, false, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		gs, ext, tt, err := ParseRTPG(b)
		if err != nil {
			return
		}
		// What parses re-encodes to data that parses to the same groups.
		gs2, ext2, tt2, err := ParseRTPG(AppendRTPG(nil, gs, ext, tt))
		if err != nil || ext2 != ext || tt2 != tt || len(gs2) != len(gs) {
			t.Fatalf("round trip: %v %v/%v %d/%d %d/%d", err, ext, ext2, tt, tt2, len(gs), len(gs2))
		}
	})
}

func FuzzParseSTPG(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		reqs, err := ParseSTPG(b)
		if err == nil && len(reqs) != (len(b)-4)/4 {
			t.Fatalf("%d descriptors from %d bytes", len(reqs), len(b))
		}
	})
}

// FuzzExecuteALUA drives every CDB through the gate and STPG of an
// explicit-mode array with one standby port.
func FuzzExecuteALUA(f *testing.F) {
	f.Add([]byte{OpMaintenanceOut, 0x0a, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, []byte{0, 0, 0, 0, 0, 0, 0, 3}, true)
	f.Add([]byte{OpMaintenanceIn, 0x2a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, []byte{}, false)
	f.Add([]byte{0, 0, 0, 0, 0, 0}, []byte{}, true)
	s := NewServer()
	s.AddLU(LUConfig{LUN: 0, BlockSize: 512, Blocks: 64, Backend: &memBackend{b: make([]byte, 64*512)}})
	s.SetALUA(&fakeALUA{tpgs: 3, states: map[uint16]alua.AccessState{1: alua.ActiveOptimized, 3: alua.Standby}})
	s.NexusUp(n1)
	s.NexusUp(n2)
	f.Fuzz(func(t *testing.T, cdb, data []byte, standby bool) {
		n := n1
		if standby {
			n = n2
		}
		r := s.Execute(&Command{Nexus: n, CDB: cdb, Data: data, DataInLen: 1 << 16})
		if r.Status == StatusCheckCondition {
			if _, err := ParseSense(r.Sense); err != nil {
				t.Fatalf("unparseable sense %x: %v", r.Sense, err)
			}
		}
	})
}
