package scsi

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func prInCDB(sa byte) []byte { return []byte{OpPRIn, sa, 0, 0, 0, 0, 0, 0x10, 0, 0} }

// readKeys returns the registered keys (PERSISTENT RESERVE IN, READ KEYS).
func readKeys(t *testing.T, s *Server, n Nexus) []uint64 {
	t.Helper()
	r := s.Execute(&Command{Nexus: n, CDB: prInCDB(0)})
	require.Equal(t, StatusGood, r.Status)
	var keys []uint64
	for b := r.Data[8 : 8+binary.BigEndian.Uint32(r.Data[4:])]; len(b) >= 8; b = b[8:] {
		keys = append(keys, binary.BigEndian.Uint64(b))
	}
	return keys
}

// holderKey returns the reservation's key and type (READ RESERVATION).
func holderKey(t *testing.T, s *Server, n Nexus) (uint64, byte, bool) {
	t.Helper()
	r := s.Execute(&Command{Nexus: n, CDB: prInCDB(1)})
	require.Equal(t, StatusGood, r.Status)
	if binary.BigEndian.Uint32(r.Data[4:]) == 0 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(r.Data[8:]), r.Data[8+13] & 0x0f, true
}

func withFlags(b []byte, flags byte) []byte { b[20] = flags; return b }

// n1 on the other target port: the same initiator port, another I_T nexus.
var n1b = Nexus{InitiatorName: n1.InitiatorName, InitiatorPort: n1.InitiatorPort, TargetPort: 3}

// twoPortServer is the test server with n1 logged in on both target
// ports (n1, n1b) and n2 on one; ex runs a command and returns its status.
func twoPortServer(t *testing.T) (*Server, func(n Nexus, cdb, data []byte) Status) {
	s, _ := newTestServer(t)
	s.NexusUp(n1b)
	s.Execute(&Command{Nexus: n1b, CDB: make([]byte, 6)})
	return s, func(n Nexus, cdb, data []byte) Status {
		return s.Execute(&Command{Nexus: n, CDB: cdb, Data: data}).Status
	}
}

func TestPRAllTargetPorts(t *testing.T) {
	s, ex := twoPortServer(t)

	// ALL_TG_PT registers the initiator port on both target ports at once.
	require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), withFlags(prParams(0, 0xa1), 0x04)))
	require.Equal(t, []uint64{0xa1, 0xa1}, readKeys(t, s, n2))
	require.Equal(t, StatusGood, ex(n1b, proutCDB(1, prTypeWE), prParams(0xa1, 0)), "reserve through the other port")
	// READ FULL STATUS: one descriptor, ALL_TG_PT and R_HOLDER set.
	r := s.Execute(&Command{Nexus: n2, CDB: prInCDB(3)})
	require.Equal(t, StatusGood, r.Status)
	d := r.Data[8:]
	require.Equal(t, uint64(0xa1), binary.BigEndian.Uint64(d))
	require.Equal(t, byte(0x03), d[12]&0x03, "ALL_TG_PT and R_HOLDER")
	tidLen := int(binary.BigEndian.Uint32(d[20:]))
	require.Len(t, r.Data[8:], 24+tidLen, "one descriptor")
	// Changing the key through one port changes it on both; a second
	// ALL_TG_PT registration of a registered port conflicts.
	require.Equal(t, StatusGood, ex(n1b, proutCDB(0, 0), prParams(0xa1, 0xa2)))
	require.Equal(t, []uint64{0xa2, 0xa2}, readKeys(t, s, n2))
	// Unregistering through one port removes both and the reservation.
	require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), prParams(0xa2, 0)))
	require.Empty(t, readKeys(t, s, n2))
	_, _, held := holderKey(t, s, n2)
	require.False(t, held)
	// REPORT CAPABILITIES offers ALL_TG_PT and APTPL.
	r = s.Execute(&Command{Nexus: n2, CDB: prInCDB(2)})
	require.Equal(t, byte(0x04|0x01), r.Data[2]&0x05)
}

// registerAndMoveParams builds REGISTER AND MOVE parameter data moving to
// initiator port iport on relative target port tport.
func registerAndMoveParams(key, saKey uint64, iport string, tport uint16, flags byte) []byte {
	tid := iscsiTransportID(iport)
	b := make([]byte, 24, 24+len(tid))
	binary.BigEndian.PutUint64(b, key)
	binary.BigEndian.PutUint64(b[8:], saKey)
	b[17] = flags
	binary.BigEndian.PutUint16(b[18:], tport)
	binary.BigEndian.PutUint32(b[20:], uint32(len(tid)))
	return append(b, tid...)
}

func TestPRRegisterAndMove(t *testing.T) {
	moveCDB := func(typ byte, n int) []byte {
		c := proutCDB(7, typ)
		binary.BigEndian.PutUint32(c[5:], uint32(n))
		return c
	}
	tests := []struct {
		name   string
		params func() []byte
		status Status
		asc    byte
	}{
		{"moves the reservation and unregisters the source",
			func() []byte { return registerAndMoveParams(0xa1, 0xb2, n2.InitiatorPort, 3, 0x02) }, StatusGood, 0},
		{"a service action key of zero", func() []byte { return registerAndMoveParams(0xa1, 0, n2.InitiatorPort, 3, 0) },
			StatusCheckCondition, 0x26},
		{"to itself", func() []byte { return registerAndMoveParams(0xa1, 0xb2, n1.InitiatorPort, 1, 0) },
			StatusCheckCondition, 0x26},
		{"to a target port that does not exist",
			func() []byte { return registerAndMoveParams(0xa1, 0xb2, n2.InitiatorPort, 9, 0) }, StatusCheckCondition, 0x26},
		{"with a wrong key", func() []byte { return registerAndMoveParams(0xa9, 0xb2, n2.InitiatorPort, 3, 0) },
			StatusReservationConflict, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			ex := func(n Nexus, cdb, data []byte) Response { return s.Execute(&Command{Nexus: n, CDB: cdb, Data: data}) }
			require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), prParams(0, 0xa1)).Status)
			require.Equal(t, StatusGood, ex(n1, proutCDB(1, prTypeWE), prParams(0xa1, 0)).Status)
			p := tc.params()
			r := ex(n1, moveCDB(prTypeWE, len(p)), p)
			require.Equal(t, tc.status, r.Status)
			if tc.asc != 0 {
				_, asc, _ := senseOf(t, r)
				require.Equal(t, tc.asc, asc)
			}
			key, typ, held := holderKey(t, s, n2)
			require.True(t, held)
			require.Equal(t, byte(prTypeWE), typ)
			write := func(n Nexus) Status {
				return ex(n, cdb16(OpWrite16, 0, 1), make([]byte, 512)).Status
			}
			if tc.status != StatusGood {
				require.Equal(t, uint64(0xa1), key, "nothing moved")
				require.Equal(t, StatusReservationConflict, write(n2))
				return
			}
			require.Equal(t, uint64(0xb2), key)
			require.Equal(t, []uint64{0xb2}, readKeys(t, s, n2), "the source unregistered (UNREG)")
			require.Equal(t, StatusGood, write(n2), "the new holder writes")
			require.Equal(t, StatusReservationConflict, write(n1), "the old one does not")
		})
	}
}

// heldBackend holds every write until released, then asks whether its
// task is still live, as the array's move stop does.
type heldBackend struct {
	*memBackend
	arrived chan struct{}
	release chan struct{}
}

func (h *heldBackend) WriteAtIf(via uint16, p []byte, off int64, fua bool, live Liveness) error {
	h.arrived <- struct{}{}
	<-h.release
	if !live.Live() {
		return abortedErr{}
	}
	return h.memBackend.WriteAt(via, p, off, fua)
}

func (h *heldBackend) UnmapIf(via uint16, off, n int64, live Liveness) error {
	if !live.Live() {
		return abortedErr{}
	}
	return h.memBackend.Unmap(via, off, n)
}

type abortedErr struct{}

func (abortedErr) Error() string     { return "aborted" }
func (abortedErr) TaskAborted() bool { return true }

// The fence_scsi sequence: host B's write is held (in a move's stop) when
// host A preempts B's key with PREEMPT AND ABORT. The PREEMPT AND ABORT
// completes only after the held write ended; the write is not carried out
// (TASK ABORTED) and B learns of the preemption (2A/05).
func TestPRPreemptAndAbortFencesHeldWrite(t *testing.T) {
	s := NewServer()
	s.AddTargetPort(TargetPortInfo{RelativeID: 1, Name: "iqn.t.x:a,t,0x0001"})
	s.AddTargetPort(TargetPortInfo{RelativeID: 3, Name: "iqn.t.x:a,t,0x0003"})
	be := &heldBackend{memBackend: &memBackend{b: make([]byte, 1<<20)}, arrived: make(chan struct{}), release: make(chan struct{})}
	_, err := s.AddLU(LUConfig{LUN: 0, BlockSize: 512, Blocks: 2048, Backend: be})
	require.NoError(t, err)
	for _, n := range []Nexus{n1, n2} {
		s.NexusUp(n)
		s.Execute(&Command{Nexus: n, CDB: make([]byte, 6)})
	}
	ex := func(n Nexus, cdb, data []byte) Response { return s.Execute(&Command{Nexus: n, CDB: cdb, Data: data}) }
	require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), prParams(0, 0xa1)).Status)
	require.Equal(t, StatusGood, ex(n2, proutCDB(0, 0), prParams(0, 0xb2)).Status)
	require.Equal(t, StatusGood, ex(n1, proutCDB(1, prTypeWERO), prParams(0xa1, 0)).Status)

	data := make([]byte, 512)
	for i := range data {
		data[i] = 'B'
	}
	var wg sync.WaitGroup
	var write, preempt Response
	wg.Add(1)
	go func() { defer wg.Done(); write = ex(n2, cdb16(OpWrite16, 7, 1), data) }()
	<-be.arrived // B's write is held
	wg.Add(1)
	go func() { defer wg.Done(); preempt = ex(n1, proutCDB(5, prTypeWERO), prParams(0xa1, 0xb2)) }()
	lu := s.LU(0)
	require.Eventually(t, func() bool {
		lu.mu.Lock()
		defer lu.mu.Unlock()
		return lu.pr.aborts == 1
	}, 5*time.Second, time.Millisecond, "the preempt has aborted B's tasks")
	close(be.release)
	wg.Wait()
	require.Equal(t, StatusGood, preempt.Status)
	require.Equal(t, StatusTaskAborted, write.Status, "the held write is aborted")
	require.Equal(t, make([]byte, 512), be.b[7*512:8*512], "and not carried out")
	_, asc, ascq := senseOf(t, ex(n2, make([]byte, 6), nil))
	require.Equal(t, []byte{0x2a, 0x05}, []byte{asc, ascq}, "REGISTRATIONS PREEMPTED")
	require.Equal(t, StatusReservationConflict, ex(n2, cdb16(OpWrite16, 7, 1), data).Status, "B is fenced")
	require.Equal(t, []uint64{0xa1}, readKeys(t, s, n1))
}

// A PREEMPT (AND ABORT) or REGISTER AND MOVE with a bad TYPE or SCOPE is
// refused before anything changes.
func TestPRRefusedChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		sa   byte
		typ  byte
	}{
		{"PREEMPT AND ABORT of type 0", 5, 0},
		{"PREEMPT with scope 2", 4, 0x20 | prTypeWE},
		{"REGISTER AND MOVE of type 15", 7, 0x0f},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t)
			ex := func(n Nexus, cdb, data []byte) Response { return s.Execute(&Command{Nexus: n, CDB: cdb, Data: data}) }
			require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), prParams(0, 0xa1)).Status)
			require.Equal(t, StatusGood, ex(n2, proutCDB(0, 0), prParams(0, 0xb2)).Status)
			require.Equal(t, StatusGood, ex(n1, proutCDB(1, prTypeWE), prParams(0xa1, 0)).Status)
			gen := func() uint32 { return binary.BigEndian.Uint32(ex(n1, prInCDB(0), nil).Data) }
			before := gen()
			var r Response
			if tc.sa == 7 {
				p := registerAndMoveParams(0xa1, 0xb3, n2.InitiatorPort, 3, 0)
				c := proutCDB(7, tc.typ)
				binary.BigEndian.PutUint32(c[5:], uint32(len(p)))
				r = ex(n1, c, p)
			} else {
				r = ex(n2, proutCDB(tc.sa, tc.typ), prParams(0xb2, 0xa1))
			}
			k, _, _ := senseOf(t, r)
			require.Equal(t, byte(KeyIllegalRequest), k)
			require.ElementsMatch(t, []uint64{0xa1, 0xb2}, readKeys(t, s, n1), "no registration removed")
			require.Equal(t, before, gen())
			key, typ, held := holderKey(t, s, n1)
			require.True(t, held)
			require.Equal(t, []any{uint64(0xa1), byte(prTypeWE)}, []any{key, typ})
			require.Equal(t, StatusGood, ex(n1, make([]byte, 6), nil).Status, "no unit attention for the holder")
		})
	}
}

// An all-registrants reservation outlives its maker's registration, and
// so it does through APTPL's save and restore.
func TestPRSavedAllRegistrants(t *testing.T) {
	s, _ := newTestServer(t)
	ex := func(n Nexus, cdb, data []byte) Status {
		return s.Execute(&Command{Nexus: n, CDB: cdb, Data: data}).Status
	}
	require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), withFlags(prParams(0, 0xa1), 0x01)))
	require.Equal(t, StatusGood, ex(n2, proutCDB(0, 0), withFlags(prParams(0, 0xb2), 0x01)))
	require.Equal(t, StatusGood, ex(n1, proutCDB(1, prTypeWEAR), prParams(0xa1, 0)))
	require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), withFlags(prParams(0xa1, 0), 0x01))) // n1 leaves
	_, _, held := holderKey(t, s, n2)
	require.True(t, held)
	saved := s.LU(0).SavedPR()
	require.NotNil(t, saved)
	s2, _ := newTestServer(t)
	s2.LU(0).RestorePR(*saved)
	_, typ, held := holderKey(t, s2, n2)
	require.True(t, held, "restored with its reservation")
	require.Equal(t, byte(prTypeWEAR), typ)
	require.Equal(t, StatusReservationConflict, s2.Execute(&Command{Nexus: n1, CDB: cdb16(OpWrite16, 0, 1), Data: make([]byte, 512)}).Status)
}

// GET LBA STATUS is a read of the medium's state: a non-registrant gets
// RESERVATION CONFLICT under Exclusive Access (READ CAPACITY does not).
func TestGetLBAStatusUnderReservation(t *testing.T) {
	s, _ := newTestServer(t)
	ex := func(n Nexus, cdb, data []byte) Status {
		return s.Execute(&Command{Nexus: n, CDB: cdb, Data: data}).Status
	}
	require.Equal(t, StatusGood, ex(n1, proutCDB(0, 0), prParams(0, 0xa1)))
	require.Equal(t, StatusGood, ex(n1, proutCDB(1, prTypeEA), prParams(0xa1, 0)))
	require.Equal(t, StatusReservationConflict, ex(n2, getLBAStatusCDB(0, 64), nil))
	rc16 := getLBAStatusCDB(0, 32)
	rc16[1] = SAReadCapacity16
	require.Equal(t, StatusGood, ex(n2, rc16, nil))
	require.Equal(t, StatusGood, ex(n1, getLBAStatusCDB(0, 64), nil))
}

func TestParseISCSITransportID(t *testing.T) {
	tests := []struct {
		in   []byte
		want string
		ok   bool
	}{
		{iscsiTransportID("iqn.2026-11.org.example:h,i,0x00023d000001"), "iqn.2026-11.org.example:h,i,0x00023d000001", true},
		{iscsiTransportID("IQN.2026-11.org.example:H,i,0x23D000001"), "iqn.2026-11.org.example:h,i,0x00023d000001", true},
		{append([]byte{0x05, 0, 0, 8}, []byte("iqn.a:b\x00")...), "", false}, // format 00b: no initiator port
		{iscsiTransportID("iqn.a:b"), "", false},                             // no ISID
		{iscsiTransportID("iqn.a:b,i,0xzz"), "", false},
		{[]byte{0x45, 0, 0, 200, 'i'}, "", false}, // length past the end
		{nil, "", false},
	}
	for _, tc := range tests {
		got, ok := parseISCSITransportID(tc.in)
		require.Equal(t, tc.ok, ok, "%q", tc.in)
		require.Equal(t, tc.want, got)
	}
}

func FuzzPROut(f *testing.F) {
	f.Add(byte(0), byte(1), prParams(0, 1))
	f.Add(byte(7), byte(1), registerAndMoveParams(1, 2, n2.InitiatorPort, 3, 0x03))
	f.Add(byte(5), byte(7), withFlags(prParams(1, 2), 0x05))
	f.Fuzz(func(t *testing.T, sa, typ byte, data []byte) {
		s, _ := newTestServer(t)
		c := proutCDB(sa&0x1f, typ)
		binary.BigEndian.PutUint32(c[5:], uint32(len(data)))
		for _, n := range []Nexus{n1, n2} {
			s.Execute(&Command{Nexus: n, CDB: proutCDB(0, 0), Data: prParams(0, 0xa1)})
			r := s.Execute(&Command{Nexus: n, CDB: c, Data: data})
			require.NotZero(t, r.Status|1) // answered, never a panic
			s.Execute(&Command{Nexus: n, CDB: prInCDB(3)})
		}
	})
}

// The Windows failover cluster's arbitration: each node registers with
// REGISTER AND IGNORE EXISTING KEY on every path, the owner reserves
// Write Exclusive - Registrants Only; a challenger that finds the owner
// gone preempts its key and reserves; the old owner's writes conflict
// and it learns of it (2A/05), its re-registration with IGNORE works.
func TestPRWindowsClusterArbitration(t *testing.T) {
	s, ex := twoPortServer(t)
	write := func(n Nexus) Status { return ex(n, cdb16(OpWrite16, 0, 1), make([]byte, 512)) }
	steps := []struct {
		name string
		n    Nexus
		cdb  []byte
		data []byte
		want Status
	}{
		{"node 1 registers on path 1 (ignore existing)", n1, proutCDB(6, 0), prParams(0, 0x1111), StatusGood},
		{"node 1 registers on path 2", n1b, proutCDB(6, 0), prParams(0, 0x1111), StatusGood},
		{"node 2 registers", n2, proutCDB(6, 0), prParams(0, 0x2222), StatusGood},
		{"node 1 reserves WERO", n1, proutCDB(1, prTypeWERO), prParams(0x1111, 0), StatusGood},
		{"node 2 cannot reserve", n2, proutCDB(1, prTypeWERO), prParams(0x2222, 0), StatusReservationConflict},
		{"node 2 preempts node 1's key", n2, proutCDB(4, prTypeWERO), prParams(0x2222, 0x1111), StatusGood},
	}
	for _, st := range steps {
		require.Equal(t, st.want, ex(st.n, st.cdb, st.data), st.name)
	}
	require.Equal(t, []uint64{0x2222}, readKeys(t, s, n2))
	key, typ, held := holderKey(t, s, n2)
	require.True(t, held)
	require.Equal(t, []any{uint64(0x2222), byte(prTypeWERO)}, []any{key, typ})
	for _, n := range []Nexus{n1, n1b} {
		_, asc, ascq := senseOf(t, s.Execute(&Command{Nexus: n, CDB: make([]byte, 6)}))
		require.Equal(t, []byte{0x2a, 0x05}, []byte{asc, ascq}, "node 1 learns on every path")
		require.Equal(t, StatusReservationConflict, write(n), "node 1 is fenced on every path")
	}
	require.Equal(t, StatusGood, write(n2))
	// Node 1 comes back and registers again (ignore existing): a
	// registrant of a Registrants Only reservation may write.
	require.Equal(t, StatusGood, ex(n1, proutCDB(6, 0), prParams(0, 0x1112)))
	require.Equal(t, StatusGood, write(n1))
}
