package iscsi

import (
	"errors"
	"fmt"
	"io"
)

// Limits on what a peer may send before we read it into memory.
const (
	// MaxDataSegment is the largest data segment accepted on the wire,
	// whatever was negotiated: 16 MiB - 1 is the 24-bit field maximum.
	MaxDataSegment = 1<<24 - 1
)

// ErrDigest is returned when a header or data digest does not match.
type ErrDigest struct{ Header bool }

func (e ErrDigest) Error() string {
	if e.Header {
		return "iscsi: header digest mismatch"
	}
	return "iscsi: data digest mismatch"
}

// ErrTooLarge is returned when a data segment exceeds the receive limit.
var ErrTooLarge = errors.New("iscsi: data segment exceeds MaxRecvDataSegmentLength")

// Digests says which digests are on for a direction.
type Digests struct{ Header, Data bool }

// ReadPDU reads one PDU from r. maxData bounds the data segment (0 means
// MaxDataSegment). buf, if large enough, is reused for the data segment.
// A data digest error returns the PDU (header valid) and an ErrDigest so the
// caller can reject just that PDU (RFC 7143 7.8) instead of dropping the
// connection.
func ReadPDU(r io.Reader, dg Digests, maxData int, buf []byte) (*PDU, error) {
	p := &PDU{}
	hdr, err := readPDUInto(r, p, dg, maxData, buf)
	if !hdr {
		return nil, err
	}
	return p, err
}

// readPDUInto is ReadPDU into p (its fields are replaced). It reports
// whether p holds a header for the caller to answer (a digest or length
// error) or, with no error, a whole PDU.
func readPDUInto(r io.Reader, p *PDU, dg Digests, maxData int, buf []byte) (bool, error) {
	if _, err := io.ReadFull(r, p.BHS[:]); err != nil {
		return false, err
	}
	p.AHS, p.Data = nil, nil
	if n := p.BHS.TotalAHSLen(); n > 0 {
		p.AHS = make([]byte, n)
		if _, err := io.ReadFull(r, p.AHS); err != nil {
			return false, err
		}
	}
	if dg.Header {
		var d [4]byte
		if _, err := io.ReadFull(r, d[:]); err != nil {
			return false, err
		}
		if CRC32C(p.BHS[:], p.AHS) != ReadDigest(d[:]) {
			return true, ErrDigest{Header: true}
		}
	}
	n := p.BHS.DataLen()
	if maxData <= 0 {
		maxData = MaxDataSegment
	}
	if n > maxData {
		return true, fmt.Errorf("%w: %d > %d", ErrTooLarge, n, maxData)
	}
	if n == 0 {
		return true, nil
	}
	padded := Pad4(n)
	total := padded
	if dg.Data {
		total += 4
	}
	if cap(buf) >= total {
		buf = buf[:total]
	} else {
		buf = make([]byte, total)
	}
	if _, err := io.ReadFull(r, buf); err != nil {
		return false, err
	}
	p.Data = buf[:n]
	if dg.Data && CRC32C(buf[:padded]) != ReadDigest(buf[padded:]) {
		return true, ErrDigest{}
	}
	return true, nil
}

// clone is a copy of p that shares nothing with it (p's buffers are the
// connection's, reused by its next read).
func (p *PDU) clone() *PDU {
	return &PDU{BHS: p.BHS, AHS: append([]byte(nil), p.AHS...), Data: append([]byte(nil), p.Data...)}
}

var zeroPad [4]byte

// AppendPDU serialises p (setting its data length) onto b, with digests.
// data may be supplied separately so large payloads are not copied twice by
// callers that use vectored writes; here it is appended.
func AppendPDU(b []byte, p *PDU, dg Digests) []byte {
	p.BHS.SetDataLen(len(p.Data))
	p.BHS[4] = byte(len(p.AHS) / 4)
	start := len(b)
	b = append(b, p.BHS[:]...)
	b = append(b, p.AHS...)
	if dg.Header {
		b = AppendDigest(b, CRC32C(b[start:]))
	}
	if len(p.Data) > 0 {
		ds := len(b)
		b = append(b, p.Data...)
		b = append(b, zeroPad[:Pad4(len(p.Data))-len(p.Data)]...)
		if dg.Data {
			b = AppendDigest(b, CRC32C(b[ds:]))
		}
	}
	return b
}

// HeaderBytes returns the wire bytes of p's header (BHS, AHS, header digest)
// and the trailer to write after p.Data (padding and data digest). Used for
// vectored writes of large Data-In payloads without copying them.
func HeaderBytes(p *PDU, dg Digests) (head, trailer []byte) {
	p.BHS.SetDataLen(len(p.Data))
	p.BHS[4] = byte(len(p.AHS) / 4)
	head = make([]byte, 0, BHSLen+len(p.AHS)+4)
	head = append(head, p.BHS[:]...)
	head = append(head, p.AHS...)
	if dg.Header {
		head = AppendDigest(head, CRC32C(head))
	}
	if len(p.Data) == 0 {
		return head, nil
	}
	pad := zeroPad[:Pad4(len(p.Data))-len(p.Data)]
	trailer = append([]byte(nil), pad...)
	if dg.Data {
		trailer = AppendDigest(trailer, CRC32C(p.Data, pad))
	}
	return head, trailer
}
