package iscsi

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// session is one iSCSI session (one I_T nexus): its CmdSN window and its
// single connection (MaxConnections=1).
type session struct {
	t         *Target
	key       sessionKey
	tsih      uint16
	discovery bool
	nexus     scsi.Nexus
	portal    fabric.Portal
	initiator string

	mu       sync.Mutex
	conn     *conn
	expCmdSN uint32
	maxCmdSN uint32
	inflight uint32 // non-immediate commands received but not completed
	// pending holds non-immediate commands that arrived ahead of a gap in
	// CmdSN (within the window), released in order as the gap fills.
	pending map[uint32]runner
	closed  bool

	// evMu orders the session's login and logout announcements: the
	// logout of a session ended while it logged in never comes before
	// its login, and a session announced once is announced once.
	evMu      sync.Mutex
	announced bool
	// released: a Logout already ended the nexus at the device server
	// (releaseForLogout), before its response.
	released bool
	ended    chan struct{} // closed when end has run
	prev     *session      // the session this one reinstated

	// The fabric's view of the nexus: commands answered and their summed
	// exchange time (command PDU in to status PDU out).
	exchanges atomic.Uint64
	exchNanos atomic.Int64
	since     time.Time
}

// recordExchange counts one answered command.
func (s *session) recordExchange(d time.Duration) {
	s.exchanges.Add(1)
	s.exchNanos.Add(int64(d))
}

func newSession(t *Target, key sessionKey, tsih uint16, l *Login, p fabric.Portal) *session {
	s := &session{t: t, key: key, tsih: tsih, discovery: l.SessionType == "Discovery", portal: p,
		initiator: l.Initiator, pending: map[uint32]runner{}, since: t.cfg.Clock.Now(), ended: make(chan struct{})}
	s.nexus = scsi.Nexus{
		InitiatorName: l.Initiator,
		InitiatorPort: InitiatorPortName(l.Initiator, l.ISID),
		TargetPort:    p.RelativeID,
	}
	return s
}

// start sets the initial CmdSN from the leading login request.
func (s *session) start(cmdSN uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expCmdSN = cmdSN
	s.maxCmdSN = cmdSN + s.t.cfg.CmdWindow - 1
}

func (s *session) currentConn() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

func (s *session) replaceConn(c *conn) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	old := s.conn
	s.conn = c
	s.mu.Unlock()
	if old != nil && old != c {
		old.detach()
		old.close("connection reinstated")
	}
	return true
}

// window returns ExpCmdSN and MaxCmdSN for a PDU being sent now.
func (s *session) window() (exp, max uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cand := s.expCmdSN + s.t.cfg.CmdWindow - 1 - min(s.inflight, s.t.cfg.CmdWindow-1)
	if SerialLess(s.maxCmdSN, cand) {
		s.maxCmdSN = cand
	}
	return s.expCmdSN, s.maxCmdSN
}

// cmdSNResult says what to do with a non-immediate command.
type cmdSNResult int

const (
	cmdSNRun    cmdSNResult = iota // in order: run it now
	cmdSNQueued                    // ahead of a gap: queued
	cmdSNDrop                      // outside the window: silently ignored (RFC 7143 4.2.2.1)
)

// runner is what admit runs in CmdSN order: a task (proceed), or a
// non-SCSI command's function (runFunc).
type runner interface{ run() }

type runFunc func()

func (f runFunc) run() { f() }

// admit checks a command's CmdSN against the window. For cmdSNRun the
// caller runs r now, then the returned runners (commands that waited for
// the gap r filled), in order; a command ahead of a gap is queued and run
// by the admit that fills it.
func (s *session) admit(cmdSN uint32, immediate bool, r runner) (cmdSNResult, []runner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if immediate {
		return cmdSNRun, nil
	}
	if SerialLess(cmdSN, s.expCmdSN) || SerialLess(s.maxCmdSN, cmdSN) {
		return cmdSNDrop, nil
	}
	if cmdSN != s.expCmdSN {
		if len(s.pending) >= int(s.t.cfg.CmdWindow) {
			return cmdSNDrop, nil
		}
		s.pending[cmdSN] = r
		return cmdSNQueued, nil
	}
	s.expCmdSN++
	s.inflight++
	if len(s.pending) == 0 {
		return cmdSNRun, nil
	}
	var more []runner
	for {
		f, ok := s.pending[s.expCmdSN]
		if !ok {
			break
		}
		delete(s.pending, s.expCmdSN)
		more = append(more, f)
		s.expCmdSN++
		s.inflight++
	}
	return cmdSNRun, more
}

// completed releases a window slot held by a non-immediate command.
func (s *session) completed() {
	s.mu.Lock()
	if s.inflight > 0 {
		s.inflight--
	}
	s.mu.Unlock()
}

// close ends the session: its connection is closed and the I_T nexus is
// lost for the device server.
func (s *session) close(reason string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		// Ending already: wait until it has ended, so that a session
		// that reinstates this one announces its login after this
		// one's logout.
		<-s.ended
		return
	}
	s.closed = true
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.close(reason)
	}
	s.end(reason)
}

// announce brings the nexus up and reports the login, once, unless the
// session already ended. The target calls it before the initiator hears
// it is logged in, so its first command, and anything asked of the array
// after the login, finds the nexus known.
func (s *session) announce() {
	if s.discovery {
		return
	}
	// A reinstating session's login follows its predecessor's logout:
	// the predecessor was told to close; wait until its end is reported.
	s.evMu.Lock()
	prev := s.prev
	s.evMu.Unlock()
	if prev != nil {
		<-prev.ended
	}
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if s.announced || closed {
		return
	}
	s.announced = true
	s.t.handler.NexusUp(s.nexus)
	s.t.event(fabric.Event{Kind: "login", Nexus: s.nexus, Portal: s.portal})
}

// end is the nexus-loss bookkeeping, run once: the logout pairs with an
// announced login.
func (s *session) end(reason string) {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	defer close(s.ended)
	if s.announced {
		if !s.released {
			s.t.handler.NexusLost(s.nexus)
		}
		s.t.event(fabric.Event{Kind: "logout", Nexus: s.nexus, Portal: s.portal, Reason: reason})
	}
	if s.prev != nil {
		<-s.prev.ended
		s.prev = nil // a successor's login must follow the predecessor's logout
	}
	// Only now out of the table: a login arriving meanwhile found this
	// session and waits for it, so it cannot announce before the logout
	// of the session this one reinstated.
	s.t.dropSession(s)
}

// releaseForLogout ends the nexus at the device server before the Logout
// Response goes out: once the initiator has its response, what the nexus
// held (SPC-2 reservations) is released, and another initiator's RESERVE
// sent right after it succeeds (libiscsi's Reserve6 Logout test). The
// logout event still comes with the session's end.
func (s *session) releaseForLogout() {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if s.announced && !s.released {
		s.released = true
		s.t.handler.NexusLost(s.nexus)
	}
}
