package scsi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Sense keys (SPC-4 4.5.6).
const (
	KeyNoSense        = 0x0
	KeyRecoveredError = 0x1
	KeyNotReady       = 0x2
	KeyMediumError    = 0x3
	KeyHardwareError  = 0x4
	KeyIllegalRequest = 0x5
	KeyUnitAttention  = 0x6
	KeyDataProtect    = 0x7
	KeyAbortedCommand = 0xb
	KeyMiscompare     = 0xe
)

// Reason is a typed sense condition. One table (reasons) maps each to its
// key/ASC/ASCQ, as LIO's sense_reason_t does.
type Reason int

const (
	ReasonNone Reason = iota
	ReasonInvalidOpcode
	ReasonInvalidFieldInCDB
	ReasonInvalidFieldInParam
	ReasonParamListLength
	ReasonLBAOutOfRange
	ReasonLUNotSupported
	ReasonSavingParamsUnsupported
	ReasonMiscompare
	ReasonWriteProtected
	ReasonMediumReadError
	ReasonMediumWriteError
	ReasonHardwareError
	ReasonNotReadyInitCmdRequired
	ReasonNotReadyTransitioning // 04/0A: asymmetric access state transition
	ReasonNotReadyStandby       // 04/0B: target port in standby state
	ReasonNotReadyUnavailable   // 04/0C: target port in unavailable state
	ReasonMediumNotPresent
	ReasonUAPowerOn                  // 29/00
	ReasonUAPowerOnOccurred          // 29/01
	ReasonUABusDeviceReset           // 29/03
	ReasonUAITNexusLoss              // 29/07
	ReasonUAModeParamsChanged        // 2A/01
	ReasonUAReservationsPreempted    // 2A/03
	ReasonUAReservationsReleased     // 2A/04
	ReasonUARegistrationsPreempted   // 2A/05
	ReasonUAAsymmetricChanged        // 2A/06
	ReasonUAImplicitTransitionFailed // 2A/07
	ReasonUACapacityChanged          // 2A/09
	ReasonUAReportedLUNsChanged      // 3F/0E
	ReasonUACommandsClearedByAnother // 2F/00
	ReasonInsufficientRegistrationResources
	ReasonSavedParamsNotSupported
	ReasonMediumRemovalPrevented
	ReasonCommandSequenceError
	ReasonInvalidReleaseOfPR
	ReasonUnmapLengthError
	ReasonLowPowerCondition
	ReasonDataPhaseError
	ReasonSTPGFailed // 67/0A
	// ReasonInvalidFieldInIU: the transport carried less data-out than
	// the CDB asks for (05/0E/03, SAM-5 5.4.3, RFC 7143 11.4.5.1).
	ReasonInvalidFieldInIU
)

type senseCode struct {
	key       byte
	asc, ascq byte
	text      string
}

var reasons = map[Reason]senseCode{
	ReasonInvalidOpcode:                     {KeyIllegalRequest, 0x20, 0x00, "INVALID COMMAND OPERATION CODE"},
	ReasonInvalidFieldInCDB:                 {KeyIllegalRequest, 0x24, 0x00, "INVALID FIELD IN CDB"},
	ReasonInvalidFieldInParam:               {KeyIllegalRequest, 0x26, 0x00, "INVALID FIELD IN PARAMETER LIST"},
	ReasonParamListLength:                   {KeyIllegalRequest, 0x1a, 0x00, "PARAMETER LIST LENGTH ERROR"},
	ReasonInvalidFieldInIU:                  {KeyIllegalRequest, 0x0e, 0x03, "INVALID FIELD IN COMMAND INFORMATION UNIT"},
	ReasonLBAOutOfRange:                     {KeyIllegalRequest, 0x21, 0x00, "LOGICAL BLOCK ADDRESS OUT OF RANGE"},
	ReasonLUNotSupported:                    {KeyIllegalRequest, 0x25, 0x00, "LOGICAL UNIT NOT SUPPORTED"},
	ReasonSavingParamsUnsupported:           {KeyIllegalRequest, 0x39, 0x00, "SAVING PARAMETERS NOT SUPPORTED"},
	ReasonSavedParamsNotSupported:           {KeyIllegalRequest, 0x39, 0x00, "SAVING PARAMETERS NOT SUPPORTED"},
	ReasonMiscompare:                        {KeyMiscompare, 0x1d, 0x00, "MISCOMPARE DURING VERIFY OPERATION"},
	ReasonWriteProtected:                    {KeyDataProtect, 0x27, 0x00, "WRITE PROTECTED"},
	ReasonMediumReadError:                   {KeyMediumError, 0x11, 0x00, "UNRECOVERED READ ERROR"},
	ReasonMediumWriteError:                  {KeyMediumError, 0x0c, 0x00, "WRITE ERROR"},
	ReasonHardwareError:                     {KeyHardwareError, 0x44, 0x00, "INTERNAL TARGET FAILURE"},
	ReasonNotReadyInitCmdRequired:           {KeyNotReady, 0x04, 0x02, "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED"},
	ReasonNotReadyTransitioning:             {KeyNotReady, 0x04, 0x0a, "LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION"},
	ReasonNotReadyStandby:                   {KeyNotReady, 0x04, 0x0b, "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE"},
	ReasonNotReadyUnavailable:               {KeyNotReady, 0x04, 0x0c, "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE"},
	ReasonMediumNotPresent:                  {KeyNotReady, 0x3a, 0x00, "MEDIUM NOT PRESENT"},
	ReasonUAPowerOn:                         {KeyUnitAttention, 0x29, 0x00, "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED"},
	ReasonUAPowerOnOccurred:                 {KeyUnitAttention, 0x29, 0x01, "POWER ON OCCURRED"},
	ReasonUABusDeviceReset:                  {KeyUnitAttention, 0x29, 0x03, "BUS DEVICE RESET FUNCTION OCCURRED"},
	ReasonUAITNexusLoss:                     {KeyUnitAttention, 0x29, 0x07, "I_T NEXUS LOSS OCCURRED"},
	ReasonUAModeParamsChanged:               {KeyUnitAttention, 0x2a, 0x01, "MODE PARAMETERS CHANGED"},
	ReasonUAReservationsPreempted:           {KeyUnitAttention, 0x2a, 0x03, "RESERVATIONS PREEMPTED"},
	ReasonUAReservationsReleased:            {KeyUnitAttention, 0x2a, 0x04, "RESERVATIONS RELEASED"},
	ReasonUARegistrationsPreempted:          {KeyUnitAttention, 0x2a, 0x05, "REGISTRATIONS PREEMPTED"},
	ReasonUAAsymmetricChanged:               {KeyUnitAttention, 0x2a, 0x06, "ASYMMETRIC ACCESS STATE CHANGED"},
	ReasonUAImplicitTransitionFailed:        {KeyUnitAttention, 0x2a, 0x07, "IMPLICIT ASYMMETRIC ACCESS STATE TRANSITION FAILED"},
	ReasonUACapacityChanged:                 {KeyUnitAttention, 0x2a, 0x09, "CAPACITY DATA HAS CHANGED"},
	ReasonUAReportedLUNsChanged:             {KeyUnitAttention, 0x3f, 0x0e, "REPORTED LUNS DATA HAS CHANGED"},
	ReasonSTPGFailed:                        {KeyHardwareError, 0x67, 0x0a, "SET TARGET PORT GROUPS COMMAND FAILED"},
	ReasonUACommandsClearedByAnother:        {KeyUnitAttention, 0x2f, 0x00, "COMMANDS CLEARED BY ANOTHER INITIATOR"},
	ReasonInsufficientRegistrationResources: {KeyIllegalRequest, 0x55, 0x04, "INSUFFICIENT REGISTRATION RESOURCES"},
	ReasonMediumRemovalPrevented:            {KeyIllegalRequest, 0x53, 0x02, "MEDIUM REMOVAL PREVENTED"},
	ReasonCommandSequenceError:              {KeyIllegalRequest, 0x2c, 0x00, "COMMAND SEQUENCE ERROR"},
	ReasonInvalidReleaseOfPR:                {KeyIllegalRequest, 0x26, 0x04, "INVALID RELEASE OF PERSISTENT RESERVATION"},
	ReasonUnmapLengthError:                  {KeyIllegalRequest, 0x26, 0x00, "INVALID FIELD IN PARAMETER LIST"},
	ReasonDataPhaseError:                    {KeyAbortedCommand, 0x4b, 0x00, "DATA PHASE ERROR"},
	ReasonLowPowerCondition:                 {KeyNotReady, 0x04, 0x11, "LOGICAL UNIT NOT READY, NOTIFY (ENABLE SPINUP) REQUIRED"},
}

// String names the reason by its ASC/ASCQ text.
func (r Reason) String() string {
	if c, ok := reasons[r]; ok {
		return c.text
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Codes returns key, ASC, ASCQ.
func (r Reason) Codes() (key, asc, ascq byte) {
	c := reasons[r]
	return c.key, c.asc, c.ascq
}

// SenseError carries a reason and optional extra fields out of a handler.
type SenseError struct {
	Reason Reason
	// Info is the INFORMATION field (e.g. miscompare offset), valid if HasInfo.
	Info    uint64
	HasInfo bool
	// Field pointer (SKSV) for ILLEGAL REQUEST: byte and bit of the bad field.
	HasField  bool
	InCDB     bool
	FieldByte uint16
	FieldBit  int8 // -1 when no bit pointer
}

func (e *SenseError) Error() string { return e.Reason.String() }

// Sense returns a SenseError for r.
func Sense(r Reason) *SenseError { return &SenseError{Reason: r} }

// InvalidCDBField returns INVALID FIELD IN CDB with a sense-key-specific
// field pointer at byte b (SPC-4 4.5.2.4.2).
func InvalidCDBField(b int, bit int) *SenseError {
	return &SenseError{Reason: ReasonInvalidFieldInCDB, HasField: true, InCDB: true,
		FieldByte: uint16(b), FieldBit: int8(bit)}
}

// AsSense extracts a SenseError from err; other errors become a hardware error.
func AsSense(err error) *SenseError {
	var se *SenseError
	if errors.As(err, &se) {
		return se
	}
	return Sense(ReasonHardwareError)
}

// Fixed- and descriptor-format sense data (SPC-4 4.5.3, 4.5.2).

// BuildSense renders e as fixed format (70h) or, when desc is set,
// descriptor format (72h).
func BuildSense(e *SenseError, desc bool) []byte {
	key, asc, ascq := e.Reason.Codes()
	if desc {
		return buildDescSense(e, key, asc, ascq)
	}
	b := make([]byte, 18)
	b[0] = 0x70
	if e.HasInfo && e.Info <= 0xffffffff {
		b[0] |= 0x80 // VALID
		binary.BigEndian.PutUint32(b[3:], uint32(e.Info))
	}
	b[2] = key
	b[7] = 10 // additional sense length
	b[12], b[13] = asc, ascq
	if e.HasField {
		b[15] = 0x80 // SKSV
		if e.InCDB {
			b[15] |= 0x40 // C/D
		}
		if e.FieldBit >= 0 {
			b[15] |= 0x08 | byte(e.FieldBit)&7 // BPV + bit pointer
		}
		binary.BigEndian.PutUint16(b[16:], e.FieldByte)
	}
	return b
}

func buildDescSense(e *SenseError, key, asc, ascq byte) []byte {
	b := make([]byte, 8, 32)
	b[0] = 0x72
	b[1], b[2], b[3] = key, asc, ascq
	if e.HasInfo {
		d := make([]byte, 12)
		d[0], d[1], d[2] = 0x00, 0x0a, 0x80 // information descriptor, VALID
		binary.BigEndian.PutUint64(d[4:], e.Info)
		b = append(b, d...)
	}
	if e.HasField {
		d := make([]byte, 8)
		d[0], d[1] = 0x02, 0x06 // sense key specific descriptor
		d[4] = 0x80
		if e.InCDB {
			d[4] |= 0x40
		}
		if e.FieldBit >= 0 {
			d[4] |= 0x08 | byte(e.FieldBit)&7
		}
		binary.BigEndian.PutUint16(d[5:], e.FieldByte)
		b = append(b, d...)
	}
	b[7] = byte(len(b) - 8)
	return b
}

// ParsedSense is sense data decoded from either format.
type ParsedSense struct {
	Key, ASC, ASCQ byte
	Info           uint64
	HasInfo        bool
	Descriptor     bool
}

// ParseSense decodes fixed or descriptor sense data.
func ParseSense(b []byte) (ParsedSense, error) {
	var s ParsedSense
	if len(b) < 1 {
		return s, errors.New("scsi: empty sense data")
	}
	switch b[0] & 0x7f {
	case 0x70, 0x71:
		if len(b) < 14 {
			return s, fmt.Errorf("scsi: fixed sense too short (%d bytes)", len(b))
		}
		s.Key, s.ASC, s.ASCQ = b[2]&0x0f, b[12], b[13]
		if b[0]&0x80 != 0 {
			s.HasInfo, s.Info = true, uint64(binary.BigEndian.Uint32(b[3:]))
		}
	case 0x72, 0x73:
		if len(b) < 8 {
			return s, fmt.Errorf("scsi: descriptor sense too short (%d bytes)", len(b))
		}
		s.Descriptor = true
		s.Key, s.ASC, s.ASCQ = b[1]&0x0f, b[2], b[3]
		d := b[8:]
		if n := int(b[7]); n < len(d) {
			d = d[:n]
		}
		for len(d) >= 2 {
			l := int(d[1]) + 2
			if l > len(d) {
				break
			}
			if d[0] == 0 && l >= 12 {
				s.HasInfo, s.Info = true, binary.BigEndian.Uint64(d[4:12])
			}
			d = d[l:]
		}
	default:
		return s, fmt.Errorf("scsi: unknown sense response code 0x%02x", b[0])
	}
	return s, nil
}
