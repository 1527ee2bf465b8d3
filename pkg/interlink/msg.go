package interlink

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The payloads. Each field is written in order: integers as varints,
// strings and byte slices with a varint length first.

// Hello opens a connection, each way: who speaks, for which array, and
// the sender's link clock as it sent the hello (Stamp, set by the
// connection: see Ping).
type Hello struct {
	Array, Node string
	Stamp       int64
}

// Ping is a heartbeat and its reply. Stamp is the sender's link clock
// when it sent the frame: nanoseconds since its own epoch for this
// connection, a number only the sender's clock gives meaning to. The
// receiver keeps the last one with its own clock's reading when it
// arrived, so it knows a moment of the peer's clock that came no later
// than a moment of its own (see Forward.Deadline).
type Ping struct {
	Stamp int64
}

// Forward is a SCSI command received on a non-owner's port, for the owner
// to execute: the nexus it came on, the CDB, its data-out, how much
// data-in the host allows, and its deadline.
type Forward struct {
	Token         int64
	Initiator     string
	InitiatorPort string
	TargetPort    uint16
	CDB           []byte
	DataOut       []byte
	DataInLen     uint32
	// Deadline is on the receiver's link clock (see Ping): a command that
	// has not taken effect by then must not (Live). The sender computes
	// it from the receiver's last stamp (Conn.Forward), so it passes no
	// later, in real time, than the lifetime the sender gave the command
	// after it sent it, however late the frame arrives.
	Deadline int64
}

// ForwardReply is the owner's answer: SCSI status, sense, data-in.
type ForwardReply struct {
	Status byte
	Sense  []byte
	DataIn []byte
}

// Mirror is a write-back copy for the partner's mirror: the pages of the
// LUN at a byte offset, at a version (the owner's write order: a copy
// never replaces a newer one of the same page).
type Mirror struct {
	Token int64
	// Inc and Gen are the sender's incarnation and its mirror generation
	// in it: a copy of an older generation than the one the cluster's
	// state holds for that incarnation was voided (the sender lost its
	// link to this partner and went on without it).
	Inc, Gen int64
	Offset   int64
	Ver      uint64
	Data     []byte
}

// Drop releases the mirror copies of a range that the owner has destaged
// at version Ver: copies not newer than it are dropped, newer ones kept.
type Drop struct {
	Token          int64
	Offset, Length int64
	Ver            uint64
}

// Flush asks the owner to write the LUN's dirty cache to the media (a
// move's first step).
type Flush struct {
	Token int64
}

// Code is an acknowledgement's outcome.
type Code byte

// The outcomes.
const (
	OK       Code = 0
	Fenced   Code = 1 // the token is not the one the receiver holds
	NotOwner Code = 2 // the receiver does not serve the LUN as owner
	Failed   Code = 3 // the request failed (Msg says why)
	Expired  Code = 4 // a forwarded command's link ended or its deadline passed before it took effect
)

// Ack answers Mirror, Drop and Flush, and any request that failed.
type Ack struct {
	Code Code
	Msg  string
}

// ErrFenced, ErrNotOwner, ErrFailed and ErrExpired are an Ack's codes as
// errors.
var (
	ErrFenced   = errors.New("interlink: stale fencing token")
	ErrNotOwner = errors.New("interlink: not the owner")
	ErrFailed   = errors.New("interlink: request failed")
	ErrExpired  = errors.New("interlink: the forwarded command expired before it took effect")
)

// Err is the ack as an error (nil for OK).
func (a Ack) Err() error {
	var base error
	switch a.Code {
	case OK:
		return nil
	case Fenced:
		base = ErrFenced
	case NotOwner:
		base = ErrNotOwner
	case Expired:
		base = ErrExpired
	default:
		base = ErrFailed
	}
	if a.Msg == "" {
		return base
	}
	return fmt.Errorf("%w: %s", base, a.Msg)
}

type enc []byte

func (e enc) u(v uint64) enc   { return binary.AppendUvarint(e, v) }
func (e enc) i(v int64) enc    { return binary.AppendVarint(e, v) }
func (e enc) b(v []byte) enc   { return append(e.u(uint64(len(v))), v...) }
func (e enc) s(v string) enc   { return append(e.u(uint64(len(v))), v...) }
func (e enc) by(v byte) enc    { return append(e, v) }
func (e enc) u16(v uint16) enc { return e.u(uint64(v)) }

// dec reads fields in order; the first error sticks.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrFrame, what)
	}
}

func (d *dec) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("a bad varint")
		return 0
	}
	if n != len(binary.AppendUvarint(nil, v)) {
		d.fail("a varint not in its shortest form")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) i() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("a bad varint")
		return 0
	}
	if n != len(binary.AppendVarint(nil, v)) {
		d.fail("a varint not in its shortest form")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) bytes() []byte {
	n := d.u()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(fmt.Sprintf("a %d-byte field in %d bytes", n, len(d.b)))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) str() string { return string(d.bytes()) }

func (d *dec) by() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("a missing byte")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *dec) u16() uint16 {
	v := d.u()
	if v > 0xffff {
		d.fail("a port id above 65535")
	}
	return uint16(v)
}

func (d *dec) u32() uint32 {
	v := d.u()
	if v > 0xffffffff {
		d.fail("a length above 4 GiB")
	}
	return uint32(v)
}

// end checks that the payload was read to its end.
func (d *dec) end() error {
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d bytes after the last field", len(d.b)))
	}
	return d.err
}

// Marshal encodes the payload.
func (m Hello) Marshal() []byte { return enc(nil).s(m.Array).s(m.Node).i(m.Stamp) }

// Unmarshal decodes it.
func (m *Hello) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Array, m.Node, m.Stamp = d.str(), d.str(), d.i()
	return d.end()
}

// Marshal encodes the payload.
func (m Ping) Marshal() []byte { return enc(nil).i(m.Stamp) }

// Unmarshal decodes it.
func (m *Ping) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Stamp = d.i()
	return d.end()
}

// Marshal encodes the payload.
func (m Forward) Marshal() []byte {
	return enc(nil).i(m.Token).s(m.Initiator).s(m.InitiatorPort).u16(m.TargetPort).b(m.CDB).b(m.DataOut).u(uint64(m.DataInLen)).
		i(m.Deadline)
}

// Unmarshal decodes it.
func (m *Forward) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Token, m.Initiator, m.InitiatorPort, m.TargetPort = d.i(), d.str(), d.str(), d.u16()
	m.CDB, m.DataOut, m.DataInLen, m.Deadline = d.bytes(), d.bytes(), d.u32(), d.i()
	if d.err == nil && (len(m.CDB) < 6 || len(m.CDB) > 260) {
		d.fail(fmt.Sprintf("a %d-byte CDB", len(m.CDB)))
	}
	if d.err == nil && (m.DataInLen > MaxData || len(m.DataOut) > MaxData) {
		d.fail(fmt.Sprintf("a transfer of %d bytes in, %d out (at most %d: larger commands are split)",
			m.DataInLen, len(m.DataOut), MaxData))
	}
	return d.end()
}

// Marshal encodes the payload.
func (m ForwardReply) Marshal() []byte { return enc(nil).by(m.Status).b(m.Sense).b(m.DataIn) }

// Unmarshal decodes it.
func (m *ForwardReply) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Status, m.Sense, m.DataIn = d.by(), d.bytes(), d.bytes()
	return d.end()
}

// Marshal encodes the payload.
func (m Mirror) Marshal() []byte {
	return enc(nil).i(m.Token).i(m.Inc).i(m.Gen).i(m.Offset).u(m.Ver).b(m.Data)
}

// Unmarshal decodes it.
func (m *Mirror) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Token, m.Inc, m.Gen, m.Offset, m.Ver, m.Data = d.i(), d.i(), d.i(), d.i(), d.u(), d.bytes()
	if d.err == nil && m.Offset < 0 {
		d.fail("a negative offset")
	}
	return d.end()
}

// Marshal encodes the payload.
func (m Drop) Marshal() []byte { return enc(nil).i(m.Token).i(m.Offset).i(m.Length).u(m.Ver) }

// Unmarshal decodes it.
func (m *Drop) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Token, m.Offset, m.Length, m.Ver = d.i(), d.i(), d.i(), d.u()
	if d.err == nil && (m.Offset < 0 || m.Length < 0) {
		d.fail("a negative range")
	}
	return d.end()
}

// Marshal encodes the payload.
func (m Flush) Marshal() []byte { return enc(nil).i(m.Token) }

// Unmarshal decodes it.
func (m *Flush) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Token = d.i()
	return d.end()
}

// Marshal encodes the payload.
func (m Ack) Marshal() []byte { return enc(nil).by(byte(m.Code)).s(m.Msg) }

// Unmarshal decodes it.
func (m *Ack) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Code, m.Msg = Code(d.by()), d.str()
	if d.err == nil && m.Code > Expired {
		d.fail(fmt.Sprintf("ack code %d", m.Code))
	}
	return d.end()
}
