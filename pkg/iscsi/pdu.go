// Package iscsi is aluad's pure-Go iSCSI target (RFC 7143): PDU codec, login
// negotiation, sessions and connections, discovery, and the data transfer
// machinery (R2T, Data-In/Out, digests). It is a fabric front end: it turns
// iSCSI PDUs into scsi.Command values and hands them to a scsi.Handler. It
// owns no SCSI semantics (no CDB decoding, no sense building) and must not
// import pkg/array, pkg/cache or pkg/media.
//
// PDU parsing and building are pure functions over byte slices (ParseBHS,
// BHS.Marshal, ParseText) so they can be tested and fuzzed without a socket.
package iscsi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Opcode is the 6-bit iSCSI PDU opcode (RFC 7143 11.2.1.2).
type Opcode uint8

// Initiator opcodes.
const (
	OpNOPOut     Opcode = 0x00
	OpSCSICmd    Opcode = 0x01
	OpTaskMgmt   Opcode = 0x02
	OpLoginReq   Opcode = 0x03
	OpTextReq    Opcode = 0x04
	OpDataOut    Opcode = 0x05
	OpLogoutReq  Opcode = 0x06
	OpSNACKReq   Opcode = 0x10
	OpNOPIn      Opcode = 0x20
	OpSCSIResp   Opcode = 0x21
	OpTaskResp   Opcode = 0x22
	OpLoginResp  Opcode = 0x23
	OpTextResp   Opcode = 0x24
	OpDataIn     Opcode = 0x25
	OpLogoutResp Opcode = 0x26
	OpR2T        Opcode = 0x31
	OpAsync      Opcode = 0x32
	OpReject     Opcode = 0x3f
)

var opNames = map[Opcode]string{
	OpNOPOut: "NOP-Out", OpSCSICmd: "SCSI-Command", OpTaskMgmt: "TMF-Request",
	OpLoginReq: "Login-Request", OpTextReq: "Text-Request", OpDataOut: "Data-Out",
	OpLogoutReq: "Logout-Request", OpSNACKReq: "SNACK", OpNOPIn: "NOP-In",
	OpSCSIResp: "SCSI-Response", OpTaskResp: "TMF-Response", OpLoginResp: "Login-Response",
	OpTextResp: "Text-Response", OpDataIn: "Data-In", OpLogoutResp: "Logout-Response",
	OpR2T: "R2T", OpAsync: "Async-Message", OpReject: "Reject",
}

func (o Opcode) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("Opcode(0x%02x)", uint8(o))
}

// BHSLen is the length of the Basic Header Segment.
const BHSLen = 48

// ReservedTag is the all-ones task tag (RFC 7143 11.18, 11.19).
const ReservedTag = 0xffffffff

// Common BHS flag bits.
const (
	FlagFinal     = 0x80 // F: final PDU of a sequence
	FlagImmediate = 0x40 // I: immediate delivery (byte 0)
	FlagRead      = 0x40 // R in SCSI Command
	FlagWrite     = 0x20 // W in SCSI Command
	FlagContinue  = 0x40 // C in Login/Text
	FlagTransit   = 0x80 // T in Login
	FlagAck       = 0x40 // A in Data-In
	FlagOverflow  = 0x04 // O in SCSI Response / Data-In
	FlagUnderflow = 0x02 // U in SCSI Response / Data-In
	FlagStatus    = 0x01 // S in Data-In
)

// BHS is the 48-byte Basic Header Segment, kept as raw bytes with typed
// accessors so every opcode's layout is one line of code and nothing is lost
// on a round trip.
type BHS [BHSLen]byte

// ErrShortPDU is returned for a header shorter than 48 bytes.
var ErrShortPDU = errors.New("iscsi: PDU shorter than the 48-byte BHS")

// ParseBHS copies a BHS out of b. It validates only what every PDU shares.
func ParseBHS(b []byte) (BHS, error) {
	var h BHS
	if len(b) < BHSLen {
		return h, ErrShortPDU
	}
	copy(h[:], b)
	return h, nil
}

func (h *BHS) Opcode() Opcode          { return Opcode(h[0] & 0x3f) }
func (h *BHS) SetOpcode(o Opcode)      { h[0] = h[0]&0xc0 | byte(o)&0x3f }
func (h *BHS) Immediate() bool         { return h[0]&FlagImmediate != 0 }
func (h *BHS) Flags() byte             { return h[1] }
func (h *BHS) SetFlags(f byte)         { h[1] = f }
func (h *BHS) Final() bool             { return h[1]&FlagFinal != 0 }
func (h *BHS) TotalAHSLen() int        { return int(h[4]) * 4 }
func (h *BHS) DataLen() int            { return int(h[5])<<16 | int(h[6])<<8 | int(h[7]) }
func (h *BHS) LUN() [8]byte            { var l [8]byte; copy(l[:], h[8:16]); return l }
func (h *BHS) SetLUN(l [8]byte)        { copy(h[8:16], l[:]) }
func (h *BHS) ITT() uint32             { return h.u32(16) }
func (h *BHS) SetITT(v uint32)         { h.put32(16, v) }
func (h *BHS) u32(off int) uint32      { return binary.BigEndian.Uint32(h[off:]) }
func (h *BHS) put32(off int, v uint32) { binary.BigEndian.PutUint32(h[off:], v) }
func (h *BHS) u16(off int) uint16      { return binary.BigEndian.Uint16(h[off:]) }
func (h *BHS) put16(off int, v uint16) { binary.BigEndian.PutUint16(h[off:], v) }

// SetDataLen stores the data segment length (24 bits).
func (h *BHS) SetDataLen(n int) {
	h[5], h[6], h[7] = byte(n>>16), byte(n>>8), byte(n)
}

// Field accessors named after RFC 7143 fields. Offsets differ per opcode, so
// each accessor documents the PDUs it applies to.

// CmdSN is at 24 in initiator PDUs that carry it.
func (h *BHS) CmdSN() uint32         { return h.u32(24) }
func (h *BHS) SetCmdSN(v uint32)     { h.put32(24, v) }
func (h *BHS) ExpStatSN() uint32     { return h.u32(28) }
func (h *BHS) SetExpStatSN(v uint32) { h.put32(28, v) }

// StatSN/ExpCmdSN/MaxCmdSN are at 24/28/32 in target PDUs.
func (h *BHS) StatSN() uint32       { return h.u32(24) }
func (h *BHS) SetStatSN(v uint32)   { h.put32(24, v) }
func (h *BHS) ExpCmdSN() uint32     { return h.u32(28) }
func (h *BHS) SetExpCmdSN(v uint32) { h.put32(28, v) }
func (h *BHS) MaxCmdSN() uint32     { return h.u32(32) }
func (h *BHS) SetMaxCmdSN(v uint32) { h.put32(32, v) }

// SCSI Command: expected data transfer length at 20, CDB at 32..47.
func (h *BHS) ExpectedDataLen() uint32     { return h.u32(20) }
func (h *BHS) SetExpectedDataLen(v uint32) { h.put32(20, v) }
func (h *BHS) CDB() []byte                 { return h[32:48] }

// TTT at 20 (Data-Out, Data-In, R2T, NOP, Text).
func (h *BHS) TTT() uint32     { return h.u32(20) }
func (h *BHS) SetTTT(v uint32) { h.put32(20, v) }

// DataSN / R2TSN / ExpDataSN at 36; buffer offset at 40; 44 is residual or
// desired data transfer length.
func (h *BHS) DataSN() uint32           { return h.u32(36) }
func (h *BHS) SetDataSN(v uint32)       { h.put32(36, v) }
func (h *BHS) BufferOffset() uint32     { return h.u32(40) }
func (h *BHS) SetBufferOffset(v uint32) { h.put32(40, v) }
func (h *BHS) Word44() uint32           { return h.u32(44) }
func (h *BHS) SetWord44(v uint32)       { h.put32(44, v) }

// Login: ISID 8..13, TSIH 14..15, CID 20..21, status 36..37.
func (h *BHS) ISID() [6]byte                { var v [6]byte; copy(v[:], h[8:14]); return v }
func (h *BHS) SetISID(v [6]byte)            { copy(h[8:14], v[:]) }
func (h *BHS) TSIH() uint16                 { return h.u16(14) }
func (h *BHS) SetTSIH(v uint16)             { h.put16(14, v) }
func (h *BHS) CID() uint16                  { return h.u16(20) }
func (h *BHS) SetCID(v uint16)              { h.put16(20, v) }
func (h *BHS) CSG() int                     { return int(h[1]>>2) & 3 }
func (h *BHS) NSG() int                     { return int(h[1]) & 3 }
func (h *BHS) Transit() bool                { return h[1]&FlagTransit != 0 }
func (h *BHS) Continue() bool               { return h[1]&FlagContinue != 0 }
func (h *BHS) SetStatus(class, detail byte) { h[36], h[37] = class, detail }

// PDU is a BHS with its optional AHS and data segment.
type PDU struct {
	BHS  BHS
	AHS  []byte
	Data []byte
}

// Pad4 rounds n up to a multiple of four.
func Pad4(n int) int { return (n + 3) &^ 3 }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the iSCSI digest of the concatenation of parts.
func CRC32C(parts ...[]byte) uint32 {
	var c uint32
	for _, p := range parts {
		c = crc32.Update(c, castagnoli, p)
	}
	return c
}

// AppendDigest appends d in the wire order of RFC 7143 (least significant byte first,
// as the CRC register is shifted out).
func AppendDigest(b []byte, d uint32) []byte {
	return binary.LittleEndian.AppendUint32(b, d)
}

// ReadDigest reads a wire-order digest.
func ReadDigest(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// ParseLUN decodes the 8-byte SAM LUN field for the addressing methods a
// target of this size uses: peripheral (00b) and flat (01b). Other methods
// return ok=false and the command is answered as for a LUN that does not exist.
func ParseLUN(l [8]byte) (lun uint64, ok bool) {
	switch l[0] >> 6 {
	case 0:
		if l[0] != 0 { // bus identifier must be 0
			return 0, false
		}
		return uint64(l[1]), true
	case 1:
		return uint64(l[0]&0x3f)<<8 | uint64(l[1]), true
	}
	return 0, false
}

// EncodeLUN is the inverse of ParseLUN: peripheral for < 256, flat above.
func EncodeLUN(lun uint64) [8]byte {
	var l [8]byte
	if lun < 256 {
		l[1] = byte(lun)
	} else {
		l[0] = 0x40 | byte(lun>>8)&0x3f
		l[1] = byte(lun)
	}
	return l
}

// SerialLess compares 32-bit sequence numbers in serial arithmetic (RFC 1982),
// as RFC 7143 requires for CmdSN and StatSN.
func SerialLess(a, b uint32) bool { return a != b && int32(a-b) < 0 }

// SerialLE is SerialLess or equal.
func SerialLE(a, b uint32) bool { return a == b || SerialLess(a, b) }
