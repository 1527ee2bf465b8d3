package interlink

import (
	"context"
	"fmt"
	"math"
)

// The control messages: what a controller observes of the hosts goes to
// the leader, which runs the ownership core for the whole array, and an
// operator's move asked of any controller goes to the leader too.

// ObsKind is what an observation is.
type ObsKind byte

// The observations.
const (
	ObsLogin  ObsKind = 1 // a nexus logged in
	ObsLogout ObsKind = 2 // a nexus ended (Flag: orderly)
	ObsRTPG   ObsKind = 3 // an RTPG for LUN on a nexus (Flag: extended header)
	ObsIO     ObsKind = 4 // an interval of a host's I/O to LUN at the node
	ObsPath   ObsKind = 5 // an interval of a nexus's exchanges
)

// Obs is one observation of the node that sends it. A nexus is Host,
// Initiator, ISID and Port; IO uses Host and LUN, Ops, Media, Bytes, Time
// (mean response time, µs) and Interval (its length in the ownership
// core's ticks: every controller reads the same configuration); Path uses
// Ops and Time (mean exchange time, µs).
type Obs struct {
	Kind                  ObsKind
	Host, Initiator, ISID string
	Port                  uint16
	LUN                   uint64
	Flag                  bool
	Ops, Media, Bytes     float64
	Time                  float64
	Interval              int64
}

// Report carries a node's observations, in the order it made them. A
// snapshot replaces everything the receiver holds of the node: its
// nexuses logged in now and the RTPGs seen on them (sent on every new
// link, so a leader elected later, or a peer that restarted, knows them).
// Inc is the sender's incarnation (its membership's join revision) and
// Seq numbers its reports in it: a receiver drops a report older than
// one it has (an earlier incarnation's, or one a replaced link delivered
// late).
type Report struct {
	Node     string
	Inc      int64
	Seq      uint64
	Snapshot bool
	Obs      []Obs
}

// Move is an operator's move of LUNs to a node, asked of the leader.
type Move struct {
	LUNs  []uint64
	To    string
	Cause string
}

// ControlLane is the LUN field of control messages: they are served one
// at a time, in the order they arrived.
const ControlLane = math.MaxUint32

func (e enc) f(v float64) enc { return e.u(math.Float64bits(v)) }
func (e enc) bo(v bool) enc {
	if v {
		return e.by(1)
	}
	return e.by(0)
}

func (d *dec) f() float64 {
	v := math.Float64frombits(d.u())
	if d.err == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v < 0) {
		d.fail("a count that is negative or not a number")
	}
	return v
}

func (d *dec) bo() bool {
	v := d.by()
	if v > 1 {
		d.fail("a flag that is neither 0 nor 1")
	}
	return v == 1
}

// Marshal encodes the payload.
func (m Report) Marshal() []byte {
	e := enc(nil).s(m.Node).i(m.Inc).u(m.Seq).bo(m.Snapshot).u(uint64(len(m.Obs)))
	for _, o := range m.Obs {
		e = e.by(byte(o.Kind)).s(o.Host).s(o.Initiator).s(o.ISID).u16(o.Port).u(o.LUN).bo(o.Flag).
			f(o.Ops).f(o.Media).f(o.Bytes).f(o.Time).i(o.Interval)
	}
	return e
}

// Unmarshal decodes it.
func (m *Report) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Node, m.Inc, m.Seq, m.Snapshot = d.str(), d.i(), d.u(), d.bo()
	n := d.u()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("%d observations in %d bytes", n, len(d.b)))
	}
	m.Obs = nil
	for i := uint64(0); i < n && d.err == nil; i++ {
		var o Obs
		o.Kind = ObsKind(d.by())
		if d.err == nil && (o.Kind < ObsLogin || o.Kind > ObsPath) {
			d.fail(fmt.Sprintf("an observation of kind %d", o.Kind))
		}
		o.Host, o.Initiator, o.ISID, o.Port, o.LUN, o.Flag = d.str(), d.str(), d.str(), d.u16(), d.u(), d.bo()
		o.Ops, o.Media, o.Bytes, o.Time, o.Interval = d.f(), d.f(), d.f(), d.f(), d.i()
		m.Obs = append(m.Obs, o)
	}
	if d.err == nil && m.Node == "" {
		d.fail("a report of no node")
	}
	return d.end()
}

// Marshal encodes the payload.
func (m Move) Marshal() []byte {
	e := enc(nil).u(uint64(len(m.LUNs)))
	for _, l := range m.LUNs {
		e = e.u(l)
	}
	return e.s(m.To).s(m.Cause)
}

// Unmarshal decodes it.
func (m *Move) Unmarshal(b []byte) error {
	d := dec{b: b}
	n := d.u()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("%d LUNs in %d bytes", n, len(d.b)))
	}
	m.LUNs = nil
	for i := uint64(0); i < n && d.err == nil; i++ {
		m.LUNs = append(m.LUNs, d.u())
	}
	m.To, m.Cause = d.str(), d.str()
	if d.err == nil && (len(m.LUNs) == 0 || m.To == "") {
		d.fail("a move of no LUN or to no node")
	}
	return d.end()
}

// PostReport queues observations to be sent after everything posted
// before them; the peer serves them in that order. Drain does not wait
// for them (a hand-over does not wait for statistics).
func (c *Conn) PostReport(m Report) *Pending {
	return c.postAs(TReport, ControlLane, m.Marshal(), false)
}

// Move asks the peer (the leader) to move LUNs; it returns once the move
// is done or refused.
func (c *Conn) Move(ctx context.Context, m Move) error {
	f, err := c.call(ctx, TMove, ControlLane, m.Marshal())
	if err != nil {
		return err
	}
	return ack(f)
}
