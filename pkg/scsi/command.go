// Package scsi is aluad's transport-independent SCSI device server (SPC-4,
// SBC-3). It owns CDB decoding, the opcode table, INQUIRY and VPD pages,
// mode pages, sense data, the unit-attention queues per I_T nexus,
// reservations (SPC-2 RESERVE/RELEASE and persistent reservations), the
// ALUA reporting (TPGS, VPD 0x83 designators, REPORT/SET TARGET PORT
// GROUPS) and the one access-state gate, and per-nexus I/O counters. The
// ALUA states themselves come from the array through the ALUA interface. Fabrics
// (pkg/iscsi, tcmu-handler) feed it Command values and send back its
// Response. Media access goes through the Backend interface that the array
// implements; this package must not import pkg/iscsi, pkg/array, pkg/cache
// or pkg/media.
//
// A SCSI outcome is a value: handlers return a Response or a sense Reason,
// and one table (sense.go) turns reasons into key/ASC/ASCQ. A Go error from
// a Backend means broken machinery and is reported as a MEDIUM or HARDWARE
// ERROR, never a panic.
package scsi

// Status is the SCSI status byte (SAM-5 5.3).
type Status byte

const (
	StatusGood                Status = 0x00
	StatusCheckCondition      Status = 0x02
	StatusConditionMet        Status = 0x04
	StatusBusy                Status = 0x08
	StatusReservationConflict Status = 0x18
	StatusTaskSetFull         Status = 0x28
	StatusTaskAborted         Status = 0x40
)

// Nexus identifies an I_T nexus: one initiator port talking to one target
// port (SAM-5 4.7). InitiatorPort is the full SCSI port name, e.g.
// "iqn.1994-05.com.redhat:h1,i,0x23d000000001".
type Nexus struct {
	InitiatorName string // the initiator node name (IQN)
	InitiatorPort string // node name + ISID
	TargetPort    uint16 // relative target port identifier, unique in the array
}

// Command is one SCSI command as received by a fabric.
type Command struct {
	Nexus Nexus
	LUN   uint64
	CDB   []byte
	// Data is the data-out buffer as received (its length is what the
	// initiator said it would send: the iSCSI Expected Data Transfer Length).
	Data []byte
	// DataInLen is the length of the initiator's data-in buffer.
	DataInLen int
	// Releases: the fabric releases the response's Buf once its data is
	// sent or dropped, always, and reads lent bytes (Buffer.Lent) only
	// through the kernel (a socket write, no digest over them); the
	// device server may then lend it the media's own bytes (RefBackend),
	// which stay lent until then.
	Releases bool

	// x is the command's state in the device server, allocated with it.
	x exec
}

// Response is the outcome of a command.
type Response struct {
	Status Status
	Sense  []byte
	// Data is the data-in payload; a fabric truncates it to the initiator's
	// buffer and reports the residual.
	Data []byte
	// DataOutLen is the data-out length the CDB asks for (for the fabric's
	// residual count against the Expected Data Transfer Length).
	DataOutLen int
	// Buf, when set, is the pooled buffer Data lies in: the fabric
	// releases it once Data has been sent (or will never be).
	Buf *Buffer
}

// TMF is a task management function (SAM-5 7).
type TMF int

const (
	TMFAbortTask TMF = iota + 1
	TMFAbortTaskSet
	TMFClearACA
	TMFClearTaskSet
	TMFLUNReset
	TMFTargetWarmReset
	TMFTargetColdReset
)

// TaskObserver is what a fabric tells of every task management function
// it receives, when its handler implements it (the command trace).
type TaskObserver interface {
	TaskManagement(n Nexus, fn TMF, lun uint64)
}

// Handler is what a fabric needs of the device server.
type Handler interface {
	// Execute runs one command to completion.
	Execute(c *Command) Response
	// NexusUp is called when an I_T nexus is established (login).
	NexusUp(n Nexus)
	// NexusLost is called when an I_T nexus ends (logout, connection loss,
	// session reinstatement): SPC-2 reservations it held are released.
	NexusLost(n Nexus)
	// Reset applies the LU side of a LUN or target reset issued on n.
	Reset(n Nexus, fn TMF, lun uint64)
	// LUNExists tells the fabric whether n may address a LU at lun (TMF
	// replies).
	LUNExists(n Nexus, lun uint64) bool
}
