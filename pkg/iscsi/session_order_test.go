package iscsi

import (
	"bufio"

	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// stubHandler records nexus up/lost; lostGate, when set, holds NexusLost.
type stubHandler struct {
	mu       sync.Mutex
	log      []string
	up       map[scsi.Nexus]bool
	lostGate chan struct{}
	lostIn   chan struct{}
}

func (h *stubHandler) Execute(c *scsi.Command) scsi.Response { return scsi.Response{} }
func (h *stubHandler) NexusUp(n scsi.Nexus) {
	h.mu.Lock()
	h.up[n] = true
	h.log = append(h.log, "up")
	h.mu.Unlock()
}
func (h *stubHandler) NexusLost(n scsi.Nexus) {
	h.mu.Lock()
	g, in := h.lostGate, h.lostIn
	h.lostGate = nil
	h.mu.Unlock()
	if g != nil {
		close(in)
		<-g
	}
	h.mu.Lock()
	delete(h.up, n)
	h.log = append(h.log, "lost")
	h.mu.Unlock()
}
func (h *stubHandler) Reset(n scsi.Nexus, fn scsi.TMF, lun uint64) {}
func (h *stubHandler) LUNExists(n scsi.Nexus, lun uint64) bool     { return true }

type evRec struct {
	mu  sync.Mutex
	evs []string
}

func (r *evRec) add(e fabric.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e.Kind)
	r.mu.Unlock()
}
func (r *evRec) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.evs...)
}

func orderTarget(t *testing.T, h scsi.Handler, rec *evRec) *Target {
	tg, err := NewTarget(Config{Name: "iqn.2026-11.org.aluad:t", Portals: []fabric.Portal{{Addr: "127.0.0.1:0", TPGT: 1, RelativeID: 1}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnEvent: rec.add}, h)
	require.NoError(t, err)
	require.NoError(t, tg.Listen())
	t.Cleanup(tg.Close)
	return tg
}

// rawLogin sends a one-PDU login and returns the status and TSIH.
func rawLogin(t *testing.T, addr string, isid byte, tsih uint16) (net.Conn, *bufio.Reader, uint16, uint16, error) {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	var h BHS
	h.SetOpcode(OpLoginReq)
	h[0] |= FlagImmediate
	h.SetFlags(FlagTransit | 1<<2 | 3)
	h.SetISID([6]byte{0x80, 0, 0, 0, 0, isid})
	h.SetTSIH(tsih)
	h.SetCmdSN(1)
	kv := []KV{{Key: "InitiatorName", Value: "iqn.2026-11.org.example:x"}, {Key: "TargetName", Value: "iqn.2026-11.org.aluad:t"},
		{Key: "SessionType", Value: "Normal"}}
	_, err = c.Write(AppendPDU(nil, &PDU{BHS: h, Data: AppendText(nil, kv)}, Digests{}))
	require.NoError(t, err)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	r, err := ReadPDU(br, Digests{}, 1<<20, nil)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		return c, br, 0, 0, err
	}
	return c, br, uint16(r.BHS[36])<<8 | uint16(r.BHS[37]), r.BHS.TSIH(), nil
}

// TestThirdLoginWaitsForFirstLogout: S1 live; S2 (same ISID) reinstates
// it and waits for S1's end; while S1's end runs, S3 (same ISID)
// reinstates S2, which has no connection yet. S2's end waits for S1's, so
// S3's login is reported after S1's logout.
func TestThirdLoginWaitsForFirstLogout(t *testing.T) {
	h := &stubHandler{up: map[scsi.Nexus]bool{}}
	rec := &evRec{}
	tg := orderTarget(t, h, rec)
	addr := tg.Addrs()[0]
	c1, _, st, _, err := rawLogin(t, addr, 1, 0)
	require.NoError(t, err)
	require.Zero(t, st)
	defer c1.Close()

	gate, in := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.lostGate, h.lostIn = gate, in
	h.mu.Unlock()

	s2done := make(chan uint16)
	go func() {
		c2, _, st, _, err := rawLogin(t, addr, 1, 0)
		if err != nil {
			st = 0xffff
		}
		defer c2.Close()
		s2done <- st
	}()
	<-in // S1's end is running (held in NexusLost, like a slow callback)
	go func() { time.Sleep(300 * time.Millisecond); close(gate) }()
	c3, br3, st3, _, err := rawLogin(t, addr, 1, 0)
	require.NoError(t, err)
	require.Zero(t, st3)
	defer c3.Close()
	_ = br3
	st2 := <-s2done
	time.Sleep(100 * time.Millisecond)
	h.mu.Lock()
	t.Logf("S2 login status %#x; events %v; handler %v; nexus up in handler: %v; sessions %d",
		st2, rec.get(), h.log, len(h.up), tg.SessionCount())
	h.mu.Unlock()
	evs := rec.get()
	require.Equal(t, "login", evs[len(evs)-1], "S3 is live: the last word on the nexus must be a login: %v", evs)
}

// TestConnReinstatementRefusedIntoEndingSession: a connection
// reinstatement (TSIH != 0) that finds the session in the table just as
// it is being closed is refused (session does not exist), never answered
// with success and served on an ended session.
func TestConnReinstatementRefusedIntoEndingSession(t *testing.T) {
	h := &stubHandler{up: map[scsi.Nexus]bool{}}
	rec := &evRec{}
	tg := orderTarget(t, h, rec)
	addr := tg.Addrs()[0]
	hits := 0
	for i := 0; i < 1000 && hits == 0; i++ {
		isid := byte(i%200 + 1)
		c1, _, st, tsih, err := rawLogin(t, addr, isid, 0)
		require.NoError(t, err)
		require.Zero(t, st)
		// Find the session and close it from the side, as a cold reset
		// from the host's other path or a port fault would, while the
		// host reinstates the connection.
		s := sessionByTSIH(tg, tsih)
		require.NotNil(t, s)
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(time.Duration(i%50) * 10 * time.Microsecond)
			s.close("target cold reset")
		}()
		c2, _, st2, _, err := rawLogin(t, addr, isid, tsih)
		<-done
		if err == nil && st2 == 0 {
			// Logged in: is its session alive?
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				// Is the connection served? send a NOP-Out and see.
				t.Logf("iteration %d: connection reinstatement answered success on an ended session; events tail %v; sessions %d",
					i, rec.get()[max(0, len(rec.get())-4):], tg.SessionCount())
				r, err := pingRaw(c2)
				if err == nil {
					hits++
					t.Logf("the connection answers: opcode %v", r.BHS.Opcode())
				} else {
					t.Logf("the connection: %v", err)
				}
			}
		}
		c1.Close()
		c2.Close()
	}
	require.Zero(t, hits, "connection reinstatement into an ended session succeeded")

}

// Same, the natural way: the host drops its connection and reinstates
// it at once with the session's TSIH; the old connection's serve ending
// races the reinstatement.
func TestConnReinstatementAfterDropNeverRevives(t *testing.T) {
	h := &stubHandler{up: map[scsi.Nexus]bool{}}
	rec := &evRec{}
	tg := orderTarget(t, h, rec)
	addr := tg.Addrs()[0]
	hits, ok := 0, 0
	for i := 0; i < 1000; i++ {
		isid := byte(i%200 + 1)
		c1, _, st, tsih, err := rawLogin(t, addr, isid, 0)
		require.NoError(t, err)
		require.Zero(t, st)
		s := sessionByTSIH(tg, tsih)
		go func() {
			time.Sleep(time.Duration(i%40) * 5 * time.Microsecond)
			c1.Close()
		}()
		c2, _, st2, _, err := rawLogin(t, addr, isid, tsih)
		if err == nil && st2 == 0 {
			ok++
			time.Sleep(2 * time.Millisecond)
			_, err := pingRaw(c2)
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if err == nil && closed {
				hits++
				if hits == 1 {
					h.mu.Lock()
					n := len(h.up)
					h.mu.Unlock()
					evs := rec.get()
					t.Logf("iteration %d: reinstated connection served on an ended session; events tail %v; handler nexuses up %d; target sessions %d",
						i, evs[max(0, len(evs)-3):], n, tg.SessionCount())
				}
			}
		}
		c2.Close()
		c1.Close()
	}
	t.Logf("%d reinstatements succeeded, %d of them onto an ended session", ok, hits)
	require.Zero(t, hits)
}

// TestLoginDuringEndFollowsLogout: the host drops its connection and
// logs in again with the same ISID while the old session's end is still
// running (held in NexusLost): the old session stays in the table until
// its logout is reported, so the new login waits for it and comes after.
func TestLoginDuringEndFollowsLogout(t *testing.T) {
	h := &stubHandler{up: map[scsi.Nexus]bool{}}
	rec := &evRec{}
	tg := orderTarget(t, h, rec)
	addr := tg.Addrs()[0]
	c1, _, st, _, err := rawLogin(t, addr, 1, 0)
	require.NoError(t, err)
	require.Zero(t, st)
	gate, in := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.lostGate, h.lostIn = gate, in
	h.mu.Unlock()
	c1.Close()
	<-in // S1's end: dropSession done, NexusLost/logout pending
	go func() { time.Sleep(300 * time.Millisecond); close(gate) }()
	c2, _, st2, _, err := rawLogin(t, addr, 1, 0)
	require.NoError(t, err)
	require.Zero(t, st2)
	defer c2.Close()
	time.Sleep(400 * time.Millisecond)
	h.mu.Lock()
	t.Logf("events %v; handler calls %v; nexuses up in handler %d; target sessions %d", rec.get(), h.log, len(h.up), tg.SessionCount())
	h.mu.Unlock()
	evs := rec.get()
	require.Equal(t, "login", evs[len(evs)-1])
}

// sessionByTSIH finds the target's session with tsih (nil if none).
func sessionByTSIH(tg *Target, tsih uint16) *session {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for _, x := range tg.sessions {
		if x.tsih == tsih {
			return x
		}
	}
	return nil
}

// pingRaw sends an immediate NOP-Out on a raw connection and reads the
// next PDU (within a second).
func pingRaw(c net.Conn) (*PDU, error) {
	var nop BHS
	nop.SetOpcode(OpNOPOut)
	nop[0] |= FlagImmediate
	nop.SetFlags(FlagFinal)
	nop.SetITT(7)
	nop.SetTTT(ReservedTag)
	if _, err := c.Write(AppendPDU(nil, &PDU{BHS: nop}, Digests{})); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	return ReadPDU(bufio.NewReader(c), Digests{}, 1<<20, nil)
}
