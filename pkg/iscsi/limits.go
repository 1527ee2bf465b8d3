package iscsi

import (
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/scsi"
)

// Limits against misbehaving or hostile initiators. What each bound does
// when reached:
//
//   - connections (MaxConnections, logged in or not): the new TCP
//     connection is closed at accept, before a byte is read;
//   - sessions in total (MaxSessions) and per initiator name
//     (MaxSessionsPerInitiator): the login is refused with status 03/02,
//     out of resources; a reinstatement of an existing session is not a
//     new one;
//   - the login phase (Config.LoginTimeout): a connection that has not
//     reached full feature phase in time is closed (half-open logins);
//   - commands per session: non-immediate ones by the CmdSN window, ones
//     outside it dropped (RFC 7143 4.2.2.1); immediate ones beyond
//     CmdWindow + maxImmediate in the task set are rejected with reason
//     06h (immediate command reject, RFC 7143 11.17.1);
//   - write data per session (MaxSessionData) and in the whole target
//     (MaxTotalData): the buffers a write needs are reserved when its
//     command arrives; a write that would exceed either is answered TASK
//     SET FULL (SAM-5 5.3.1) once its unsolicited data has been drained,
//     and the initiator retries it later. A session holding less than
//     1 MiB is always admitted whatever the others hold, so a few
//     initiators that fill the target's budget cannot starve the rest; a
//     single write larger than MaxCommandData gets ILLEGAL REQUEST /
//     INVALID FIELD IN CDB;
//   - a reader that stops reading (WriteTimeout): the connection whose
//     socket stayed full that long is closed; every connection has its
//     own writer, so the others are not held back;
//   - an oversized or malformed PDU: a Reject where the PDU can be named,
//     then that connection is closed; nothing else is touched;
//   - an idle connection: NOP-In pings (Config.NopInterval) unanswered for
//     NopTimeout close it.

// Default limits.
const (
	DefaultMaxConnections          = 4096
	DefaultMaxSessions             = 2048
	DefaultMaxSessionsPerInitiator = 256
	DefaultMaxSessionData          = 64 << 20
	DefaultMaxTotalData            = 512 << 20
	DefaultMaxCommandData          = 256 << 20
	DefaultWriteTimeout            = 30 * time.Second
	maxImmediate                   = 64
	// sessionFloor is the write data every session may hold even when the
	// target's budget is spent (so at most MaxSessions x 1 MiB beyond it).
	sessionFloor = 1 << 20
)

func (cfg *Config) applyLimitDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.MaxConnections, DefaultMaxConnections)
	def(&cfg.MaxSessions, DefaultMaxSessions)
	def(&cfg.MaxSessionsPerInitiator, DefaultMaxSessionsPerInitiator)
	def(&cfg.MaxSessionData, DefaultMaxSessionData)
	def(&cfg.MaxTotalData, DefaultMaxTotalData)
	def(&cfg.MaxCommandData, DefaultMaxCommandData)
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
}

// LimitStats counts what the limits turned away.
type LimitStats struct {
	ConnectionsRefused uint64 `json:"connections_refused"`
	SessionsRefused    uint64 `json:"sessions_refused"`
	TaskSetFull        uint64 `json:"task_set_full"`
	OversizedWrites    uint64 `json:"oversized_writes"`
	ImmediateRejected  uint64 `json:"immediate_rejected"`
	WriteTimeouts      uint64 `json:"write_timeouts"`
	ProtocolErrors     uint64 `json:"protocol_errors"`
	LoginTimeouts      uint64 `json:"login_timeouts"`
	IdleTimeouts       uint64 `json:"idle_timeouts"`
}

type limitCounters struct {
	connRefused, sessRefused, taskSetFull, oversized, immRejected, writeTimeouts, protoErrors, loginTimeouts, idleTimeouts atomic.Uint64
	// data is the write data reserved in the whole target.
	data atomic.Int64
}

// LimitStats reports the limits' counters.
func (t *Target) LimitStats() LimitStats {
	l := &t.limits
	return LimitStats{ConnectionsRefused: l.connRefused.Load(), SessionsRefused: l.sessRefused.Load(),
		TaskSetFull: l.taskSetFull.Load(), OversizedWrites: l.oversized.Load(), ImmediateRejected: l.immRejected.Load(), WriteTimeouts: l.writeTimeouts.Load(),
		ProtocolErrors: l.protoErrors.Load(), LoginTimeouts: l.loginTimeouts.Load(), IdleTimeouts: l.idleTimeouts.Load()}
}

// ConnCount reports the open TCP connections.
func (t *Target) ConnCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// sessionLimit says whether a new session for initiator may start
// (t.mu held).
func (t *Target) sessionLimitLocked(initiator string) bool {
	if len(t.sessions) >= t.cfg.MaxSessions {
		return false
	}
	n := 0
	for k := range t.sessions {
		if k.initiator == initiator {
			n++
		}
	}
	return n < t.cfg.MaxSessionsPerInitiator
}

// reserve books a write's buffer against the session's and the target's
// budgets. A refusal comes back as the response to give instead.
func (c *conn) reserve(t *task) *scsi.Response {
	n := int64(t.edtl)
	if n > int64(c.t.cfg.MaxCommandData) {
		c.t.limits.oversized.Add(1)
		return &scsi.Response{Status: scsi.StatusCheckCondition,
			Sense: scsi.BuildSense(scsi.Sense(scsi.ReasonInvalidFieldInCDB), false)}
	}
	own := c.dataReserved.Add(n)
	total := c.t.limits.data.Add(n)
	alone := own == n // a single write always fits its own session
	// Every session may hold sessionFloor whatever the others hold, so
	// initiators that fill the target's budget cannot starve the rest.
	floor := own <= sessionFloor
	if (own > int64(c.t.cfg.MaxSessionData) && !alone) || (total > int64(c.t.cfg.MaxTotalData) && !floor) {
		c.dataReserved.Add(-n)
		c.t.limits.data.Add(-n)
		c.t.limits.taskSetFull.Add(1)
		return &scsi.Response{Status: scsi.StatusTaskSetFull}
	}
	t.reserved = n
	return nil
}

// unreserve returns a task's buffer to the budgets.
func (c *conn) unreserve(t *task) {
	if n := t.reserved; n > 0 {
		t.reserved = 0
		c.dataReserved.Add(-n)
		c.t.limits.data.Add(-n)
	}
}

// answerRefused answers a write the limits turned away, once its
// unsolicited data has been drained.
func (c *conn) answerRefused(t *task) {
	defer c.finish(t)
	if t.aborted.Load() || !t.outcome.CompareAndSwap(outcomeOpen, outcomeAnswered) {
		return
	}
	r := *t.refused
	r.DataOutLen = 0
	c.respond(t, &r)
}
