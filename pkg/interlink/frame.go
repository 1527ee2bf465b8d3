// Package interlink owns the link between controllers in cluster mode: one
// TCP connection per pair of controllers carrying framed messages, each
// request answered by its id, so commands of many hosts share one
// connection without waiting for each other. It carries what must not go
// through etcd because of its rate: heartbeats, SCSI commands forwarded
// from a non-owner's port to the owner, write-cache mirror copies (a write
// is acknowledged to the host only once the partner holds its copy), and
// the steps of a move (flush, hand over). Every message about a LUN
// carries the fencing token of the ownership record it was sent under
// (pkg/cluster), and the receiver refuses a token other than the one it
// holds.
//
// A frame is a 24-byte header (magic "AL", version, type, flags, a
// reserved byte, the request id, the LUN, the payload length) and a
// payload of at most MaxPayload bytes, big-endian throughout.
package interlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version a frame carries (2: hellos and pings
// carry the link clock, forwarded commands a deadline).
const Version = 2

// HeaderLen is a frame header's length; MaxPayload bounds a payload;
// MaxData bounds the data of one forwarded command either way, so its
// request and its reply fit a payload (the sender splits larger commands,
// and mirror copies, below it).
const (
	HeaderLen  = 24
	MaxPayload = 16 << 20
	MaxData    = MaxPayload - 64<<10
)

// Type is a message type.
type Type byte

// The message types. A request's reply has the reply bit set.
const (
	THello   Type = 1 // node and array ids; the first frame each way
	TPing    Type = 2
	TForward Type = 3 // a SCSI command for the owner
	TMirror  Type = 4 // a write-back copy for the partner's mirror
	TDrop    Type = 5 // mirror copies no longer needed (destaged)
	TFlush   Type = 6 // a move's step: flush the LUN's cache to media
	TReport  Type = 7 // a controller's observations of the hosts, for the leader
	TMove    Type = 8 // an operator's move, for the leader
	TReply   Type = 0x80
)

func (t Type) String() string {
	name := map[Type]string{THello: "hello", TPing: "ping", TForward: "forward", TMirror: "mirror", TDrop: "drop",
		TFlush: "flush", TReport: "report", TMove: "move"}[t&^TReply]
	if name == "" {
		name = fmt.Sprintf("type-%d", byte(t&^TReply))
	}
	if t&TReply != 0 {
		return name + "-reply"
	}
	return name
}

// Header is a frame's header.
type Header struct {
	Type  Type
	Flags byte
	ID    uint64
	LUN   uint32
	Len   uint32
}

// Frame is one message.
type Frame struct {
	Header
	Payload []byte
}

// ErrFrame is a malformed frame: the connection that sent it is closed.
var ErrFrame = errors.New("interlink: malformed frame")

// MarshalHeader writes h into b (at least HeaderLen bytes).
func MarshalHeader(b []byte, h Header) {
	b[0], b[1], b[2], b[3] = 'A', 'L', Version, byte(h.Type)
	b[4], b[5], b[6], b[7] = h.Flags, 0, 0, 0
	binary.BigEndian.PutUint64(b[8:], h.ID)
	binary.BigEndian.PutUint32(b[16:], h.LUN)
	binary.BigEndian.PutUint32(b[20:], h.Len)
}

// ParseHeader reads a header, refusing a foreign magic, another version,
// reserved bytes that are not zero or an oversized payload.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("%w: %d header bytes", ErrFrame, len(b))
	}
	if b[0] != 'A' || b[1] != 'L' {
		return Header{}, fmt.Errorf("%w: bad magic %q", ErrFrame, b[:2])
	}
	if b[2] != Version {
		return Header{}, fmt.Errorf("%w: version %d (this side speaks %d)", ErrFrame, b[2], Version)
	}
	if b[5]|b[6]|b[7] != 0 {
		return Header{}, fmt.Errorf("%w: reserved bytes % x are not zero", ErrFrame, b[5:8])
	}
	h := Header{Type: Type(b[3]), Flags: b[4], ID: binary.BigEndian.Uint64(b[8:]),
		LUN: binary.BigEndian.Uint32(b[16:]), Len: binary.BigEndian.Uint32(b[20:])}
	if h.Len > MaxPayload {
		return Header{}, fmt.Errorf("%w: a %d-byte payload (at most %d)", ErrFrame, h.Len, MaxPayload)
	}
	return h, nil
}

// ReadFrame reads one frame.
func ReadFrame(r io.Reader) (Frame, error) {
	var hb [HeaderLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Frame{}, err
	}
	h, err := ParseHeader(hb[:])
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Header: h, Payload: make([]byte, h.Len)}
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return Frame{}, err
	}
	return f, nil
}

// AppendFrame appends f (its header's Len set from the payload) to b.
func AppendFrame(b []byte, f Frame) []byte {
	f.Len = uint32(len(f.Payload))
	n := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	MarshalHeader(b[n:], f.Header)
	return append(b, f.Payload...)
}
