package iscsi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// Config configures a Target.
type Config struct {
	// Name is the target IQN served on every portal.
	Name    string
	Alias   string
	Portals []fabric.Portal
	// Listed are the target's portals that another process serves (the
	// other controllers' in cluster mode): SendTargets names them after
	// this process's own, as one array's discovery names every port of
	// every controller, so a host that discovers through one controller
	// logs in to all of them.
	Listed []fabric.Portal
	Limits Limits
	// Auth, when set, decides per login whether and how an initiator
	// authenticates (CHAPPolicy).
	Auth AuthPolicy
	// Authorize, when set, refuses initiators the array does not admit.
	Authorize func(initiator string, discovery bool) bool
	// CmdWindow is the CmdSN window per session (MaxCmdSN - ExpCmdSN + 1).
	CmdWindow uint32
	// NopInterval is the idle time after which the target sends a NOP-In
	// ping; NopTimeout is how long it waits for the answer. Zero disables.
	NopInterval, NopTimeout time.Duration
	// Clock paces the keepalives (nil: the real one).
	Clock clock.Clock
	// Listen opens a portal's listener (nil: net.Listen; tests pass an
	// in-memory network's, pkg/memnet).
	Listen func(network, addr string) (net.Listener, error)
	// LoginTimeout bounds the login phase.
	LoginTimeout time.Duration
	Logger       *slog.Logger
	// OnEvent, if set, receives nexus events (never blocks the caller for long).
	OnEvent func(fabric.Event)
	// Limits against abuse (limits.go); zero takes the default.
	MaxConnections          int
	MaxSessions             int
	MaxSessionsPerInitiator int
	MaxSessionData          int
	MaxTotalData            int
	MaxCommandData          int
	WriteTimeout            time.Duration
}

// Target is a running iSCSI target.
type Target struct {
	cfg     Config
	handler scsi.Handler
	log     *slog.Logger

	mu        sync.Mutex
	listeners []net.Listener // by portal; nil while the port refuses
	bound     []string       // by portal: the address it listens on
	sessions  map[sessionKey]*session
	conns     map[*conn]struct{}
	nextTSIH  uint16
	closing   bool
	wg        sync.WaitGroup
	faults    pathFaults
	modeMu    sync.Mutex // serialises port mode changes (SetPortMode)
	limits    limitCounters
}

type sessionKey struct {
	initiator string
	isid      [6]byte
	tpgt      uint16
}

// NewTarget creates a target that feeds commands to h.
func NewTarget(cfg Config, h scsi.Handler) (*Target, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.Name == "" {
		return nil, errors.New("iscsi: target needs a name")
	}
	if len(cfg.Portals) == 0 {
		return nil, errors.New("iscsi: target needs at least one portal")
	}
	if cfg.Limits.MaxRecvDataSegment == 0 {
		cfg.Limits = DefaultLimits()
	}
	if cfg.CmdWindow == 0 {
		cfg.CmdWindow = 128
	}
	if cfg.LoginTimeout == 0 {
		cfg.LoginTimeout = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.applyLimitDefaults()
	if cfg.Listen == nil {
		cfg.Listen = net.Listen
	}
	return &Target{cfg: cfg, handler: h, log: cfg.Logger, sessions: map[sessionKey]*session{},
		conns: map[*conn]struct{}{}}, nil
}

// Listen opens every portal. It returns once all are listening.
func (t *Target) Listen() error {
	for _, p := range t.cfg.Portals {
		l, err := t.cfg.Listen("tcp", p.Addr)
		if err != nil {
			t.Close()
			return fmt.Errorf("iscsi: portal %s/%s: %w", p.Node, p.Name, err)
		}
		t.mu.Lock()
		t.listeners = append(t.listeners, l)
		t.bound = append(t.bound, l.Addr().String())
		t.mu.Unlock()
		t.wg.Add(1)
		go t.accept(l, p)
	}
	return nil
}

// Addrs returns the bound address of each portal (useful with port 0).
func (t *Target) Addrs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.bound...)
}

// closeListener stops a portal listening: connections to it are refused.
func (t *Target) closeListener(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i < len(t.listeners) && t.listeners[i] != nil {
		t.listeners[i].Close()
		t.listeners[i] = nil
	}
}

// reopenListener listens again on a portal's bound address.
func (t *Target) reopenListener(i int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing || i >= len(t.listeners) || t.listeners[i] != nil {
		return nil
	}
	l, err := t.cfg.Listen("tcp", t.bound[i])
	if err != nil {
		return fmt.Errorf("iscsi: portal %s/%s listening again on %s: %w", t.cfg.Portals[i].Node,
			t.cfg.Portals[i].Name, t.bound[i], err)
	}
	t.listeners[i] = l
	t.wg.Add(1)
	go t.accept(l, t.cfg.Portals[i])
	return nil
}

func (t *Target) accept(l net.Listener, p fabric.Portal) {
	defer t.wg.Done()
	for {
		raw, err := l.Accept()
		if err != nil {
			return
		}
		if tc, ok := raw.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		switch t.PortMode(p.RelativeID) {
		case fabric.PortSilent:
			t.hold(p.RelativeID, raw) // accepted by the kernel, never answered
			continue
		case fabric.PortReset:
			resetConn(raw)
			continue
		case fabric.PortDown:
			raw.Close() // the port is disabled
			continue
		}
		nc := &wireConn{Conn: raw, t: t, port: p.RelativeID}
		c := newConn(t, nc, p)
		t.mu.Lock()
		if t.closing {
			t.mu.Unlock()
			nc.Close()
			return
		}
		if len(t.conns) >= t.cfg.MaxConnections {
			t.mu.Unlock()
			t.limits.connRefused.Add(1)
			nc.Close()
			continue
		}
		t.conns[c] = struct{}{}
		t.mu.Unlock()
		// A mode change after the check above and before the connection
		// was listed did not see it: apply the port's mode now.
		if t.PortMode(p.RelativeID) != fabric.PortUp {
			t.applyMode(c)
			c.close("path down")
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			c.serve()
			t.mu.Lock()
			delete(t.conns, c)
			t.mu.Unlock()
		}()
	}
}

// Shutdown stops accepting, lets in-flight commands finish (bounded by
// ctx), then closes every connection.
func (t *Target) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.closing = true
	for _, l := range t.listeners {
		if l != nil {
			l.Close()
		}
	}
	conns := make([]*conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		c.stopReading()
	}
	done := make(chan struct{})
	go func() {
		for _, c := range conns {
			// A read loop may still be admitting the command it read
			// as stopReading was called: wait for it to stop before
			// the tasks (WaitGroup: no Add concurrent with Wait at 0).
			<-c.readDone
			c.tasksWG.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	for _, c := range conns {
		c.close("shutdown")
	}
	t.faults.mu.Lock()
	held := t.faults.held
	t.faults.held = nil
	t.faults.mu.Unlock()
	for _, hs := range held {
		for _, nc := range hs {
			resetConn(nc)
		}
	}
	t.wg.Wait()
	return ctx.Err()
}

// Close shuts down without waiting for commands.
func (t *Target) Close() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t.Shutdown(ctx)
}

func (t *Target) event(e fabric.Event) {
	if t.cfg.OnEvent != nil {
		t.cfg.OnEvent(e)
	}
}

// sendTargets builds the SendTargets answer (RFC 7143 13.3, appendix C):
// the target name and every portal with its TPGT.
func (t *Target) sendTargets(value string) []KV {
	if value != "All" && value != "" && !strings.EqualFold(value, t.cfg.Name) {
		return nil
	}
	out := []KV{{"TargetName", t.cfg.Name}}
	for i, p := range t.cfg.Portals {
		addr := p.Addr
		if as := t.Addrs(); i < len(as) {
			addr = as[i]
		}
		out = append(out, KV{"TargetAddress", targetAddress(addr, p.TPGT)})
	}
	for _, p := range t.cfg.Listed {
		// An address a host cannot dial (any host, port 0) is not named.
		if h, port, err := net.SplitHostPort(p.Addr); err != nil || port == "0" || h == "" || net.ParseIP(h).IsUnspecified() {
			continue
		}
		out = append(out, KV{"TargetAddress", targetAddress(p.Addr, p.TPGT)})
	}
	return out
}

// targetAddress is a TargetAddress value: the address (an IPv6 host in
// brackets) and the portal group tag.
func targetAddress(addr string, tpgt uint16) string {
	if h, port, err := net.SplitHostPort(addr); err == nil && strings.Contains(h, ":") {
		addr = "[" + h + "]:" + port
	}
	return fmt.Sprintf("%s,%d", addr, tpgt)
}

// bindSession attaches a logged-in connection to a session: a new one
// (TSIH 0), with reinstatement of an old session with the same ISID
// (RFC 7143 6.3.5), or connection reinstatement of an existing TSIH.
func (t *Target) bindSession(c *conn, l *Login) (*session, LoginStatus) {
	t.mu.Lock()
	key := sessionKey{strings.ToLower(l.Initiator), l.ISID, c.portal.TPGT}
	old := t.sessions[key]
	if l.TSIH != 0 {
		if old == nil || old.tsih != l.TSIH {
			t.mu.Unlock()
			return nil, LoginSessionDoesNotExist
		}
		if old.discovery != (l.SessionType == "Discovery") {
			t.mu.Unlock()
			return nil, LoginCantIncludeInSess
		}
		// One connection per session: a login with the same CID reinstates it.
		t.mu.Unlock()
		if oc := old.currentConn(); oc != nil && oc.cid != l.CID {
			return nil, LoginTooManyConnections
		}
		if !old.replaceConn(c) {
			return nil, LoginSessionDoesNotExist
		}
		return old, LoginSuccess
	}
	if old == nil && !t.sessionLimitLocked(key.initiator) {
		t.mu.Unlock()
		t.limits.sessRefused.Add(1)
		return nil, LoginOutOfResources
	}
	t.nextTSIH++
	if t.nextTSIH == 0 {
		t.nextTSIH = 1
	}
	s := newSession(t, key, t.nextTSIH, l, c.portal)
	s.prev = old
	t.sessions[key] = s
	t.mu.Unlock()
	if old != nil {
		t.log.Info("session reinstatement", "initiator", l.Initiator, "isid", FormatISID(l.ISID))
		old.close("reinstated")
	}
	return s, LoginSuccess
}

func (t *Target) dropSession(s *session) {
	t.mu.Lock()
	if t.sessions[s.key] == s {
		delete(t.sessions, s.key)
	}
	t.mu.Unlock()
}

// SessionCount reports the number of live sessions.
func (t *Target) SessionCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}

// PathStats reports every logged-in normal session.
func (t *Target) PathStats() []fabric.PathStat {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]fabric.PathStat, 0, len(t.sessions))
	for _, s := range t.sessions {
		if s.discovery {
			continue
		}
		out = append(out, fabric.PathStat{Nexus: s.nexus, Exchanges: s.exchanges.Load(),
			Exchange: time.Duration(s.exchNanos.Load()), Since: s.since})
	}
	return out
}

// resetHostSessions closes every session of keep's initiator but keep
// itself (TARGET COLD RESET). SAM-5 6.3.1 ends every I_T nexus on a cold
// reset; on an array shared by many hosts that lets any one initiator
// drop every other host's paths at will, so here it ends only the
// caller's own (the logical units are still reset for everyone, as a
// warm reset does, with the unit attention that goes with it).
func (t *Target) resetHostSessions(keep *session) {
	t.mu.Lock()
	var victims []*session
	for _, s := range t.sessions {
		if s != keep && s.key.initiator == keep.key.initiator {
			victims = append(victims, s)
		}
	}
	t.mu.Unlock()
	for _, s := range victims {
		s.close("target cold reset")
	}
}
