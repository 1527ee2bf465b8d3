package scsi

// The one opcode table (CONVENTIONS 5): per opcode its handler, CDB length,
// how it meets unit attentions and reservations, and its CDB usage map for
// REPORT SUPPORTED OPERATION CODES (SPC-4 6.35). Spec sections are cited by
// each handler.

// Opcodes.
const (
	OpTestUnitReady     = 0x00
	OpRequestSense      = 0x03
	OpRead6             = 0x08
	OpWrite6            = 0x0a
	OpInquiry           = 0x12
	OpModeSelect6       = 0x15
	OpReserve6          = 0x16
	OpRelease6          = 0x17
	OpModeSense6        = 0x1a
	OpStartStopUnit     = 0x1b
	OpSendDiagnostic    = 0x1d
	OpPreventAllow      = 0x1e
	OpReadCapacity10    = 0x25
	OpRead10            = 0x28
	OpWrite10           = 0x2a
	OpWriteVerify10     = 0x2e
	OpVerify10          = 0x2f
	OpPrefetch10        = 0x34
	OpSyncCache10       = 0x35
	OpReadDefect10      = 0x37
	OpWriteSame10       = 0x41
	OpUnmap             = 0x42
	OpLogSense          = 0x4d
	OpModeSelect10      = 0x55
	OpModeSense10       = 0x5a
	OpPRIn              = 0x5e
	OpPROut             = 0x5f
	OpRead16            = 0x88
	OpCompareAndWrite   = 0x89
	OpWrite16           = 0x8a
	OpOrWrite16         = 0x8b
	OpWriteVerify16     = 0x8e
	OpVerify16          = 0x8f
	OpPrefetch16        = 0x90
	OpSyncCache16       = 0x91
	OpWriteSame16       = 0x93
	OpServiceActionIn16 = 0x9e
	OpReportLUNs        = 0xa0
	OpMaintenanceIn     = 0xa3
	OpMaintenanceOut    = 0xa4
	OpRead12            = 0xa8
	OpWrite12           = 0xaa
	OpWriteVerify12     = 0xae
	OpVerify12          = 0xaf
	OpReadDefect12      = 0xb7
)

// Service actions.
const (
	SAReadCapacity16 = 0x10
	SAGetLBAStatus   = 0x12
	SAReportTPG      = 0x0a // MAINTENANCE IN
	SAReportOpcodes  = 0x0c
	SAReportTMFs     = 0x0d
	SASetTPG         = 0x0a // MAINTENANCE OUT
)

// prClass says how a command meets a reservation held by another nexus
// (SPC-4 5.13.1 table 68, SBC-3 4.17 table).
type prClass int

const (
	prAllowed prClass = iota // INQUIRY, REPORT LUNS, TUR, ...: never conflicts
	prRead                   // conflicts under exclusive-access types
	prWrite                  // conflicts under every type
	prPROut                  // PERSISTENT RESERVE OUT: PR checks its own rules
)

type handlerFunc func(x *exec) ([]byte, error)

type serviceAction struct {
	name    string
	handler handlerFunc
	usage   []byte
}

type opEntry struct {
	name        string
	cdbLen      int
	handler     handlerFunc
	noLU        bool // answered for a LUN that does not exist
	noUA        bool // neither reports nor clears a unit attention (SPC-4 5.14)
	needsMedium bool // NOT READY while the unit is stopped
	pr          prClass
	// resv2OK: allowed while another nexus holds an SPC-2 reservation.
	resv2OK bool
	usage   []byte
	sa      map[byte]serviceAction
	// unlisted: left out of REPORT SUPPORTED OPERATION CODES' own table.
	unlisted bool
	// saInByte1: the service action is in byte 1 bits 4-0.
	saInByte1 bool
	timeout   uint32 // nominal command timeout, seconds (RCTD)
	// alua: the non-active access states this command is allowed in (the
	// ALUA gate in alua.go; service actions are resolved there).
	alua aluaAllow
	// io classifies the command for per-nexus I/O statistics.
	io ioClass
}

var opTable [256]opEntry

func init() { opTable = buildOpTable() }

func u(b ...byte) []byte { return b }

func buildOpTable() [256]opEntry {
	var t [256]opEntry
	rw10 := func(op byte) []byte { return u(op, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0x00) }
	rw12 := func(op byte) []byte {
		return u(op, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00)
	}
	rw16 := func(op byte) []byte {
		return u(op, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0x00)
	}
	t[OpTestUnitReady] = opEntry{name: "TEST UNIT READY", cdbLen: 6, handler: testUnitReady, needsMedium: true,
		usage: u(0x00, 0, 0, 0, 0, 0)}
	t[OpRequestSense] = opEntry{alua: allowAll, name: "REQUEST SENSE", cdbLen: 6, handler: requestSense, noLU: true, noUA: true,
		resv2OK: true, usage: u(0x03, 0x01, 0, 0, 0xff, 0)}
	t[OpRead6] = opEntry{io: ioRead, name: "READ(6)", cdbLen: 6, handler: read6, needsMedium: true, pr: prRead,
		usage: u(0x08, 0x1f, 0xff, 0xff, 0xff, 0)}
	t[OpWrite6] = opEntry{io: ioWrite, name: "WRITE(6)", cdbLen: 6, handler: write6, needsMedium: true, pr: prWrite,
		usage: u(0x0a, 0x1f, 0xff, 0xff, 0xff, 0)}
	t[OpInquiry] = opEntry{alua: allowAll, name: "INQUIRY", cdbLen: 6, handler: inquiry, noLU: true, noUA: true, resv2OK: true,
		usage: u(0x12, 0x01, 0xff, 0xff, 0xff, 0)}
	t[OpModeSelect6] = opEntry{alua: allowStandby, name: "MODE SELECT(6)", cdbLen: 6, handler: modeSelect6, pr: prWrite,
		usage: u(0x15, 0x11, 0, 0, 0xff, 0)}
	t[OpReserve6] = opEntry{name: "RESERVE(6)", cdbLen: 6, handler: reserve6, pr: prWrite,
		usage: u(0x16, 0, 0, 0, 0, 0)}
	t[OpRelease6] = opEntry{name: "RELEASE(6)", cdbLen: 6, handler: release6, pr: prWrite, resv2OK: true,
		usage: u(0x17, 0, 0, 0, 0, 0)}
	t[OpModeSense6] = opEntry{alua: allowStandby, name: "MODE SENSE(6)", cdbLen: 6, handler: modeSense6, pr: prRead,
		usage: u(0x1a, 0x08, 0xff, 0xff, 0xff, 0)}
	t[OpStartStopUnit] = opEntry{name: "START STOP UNIT", cdbLen: 6, handler: startStopUnit, pr: prWrite,
		usage: u(0x1b, 0x01, 0, 0x0f, 0xf7, 0)}
	t[OpSendDiagnostic] = opEntry{alua: allowStandby, name: "SEND DIAGNOSTIC", cdbLen: 6, handler: sendDiagnostic, pr: prWrite,
		usage: u(0x1d, 0xf7, 0, 0xff, 0xff, 0)}
	t[OpPreventAllow] = opEntry{name: "PREVENT ALLOW MEDIUM REMOVAL", cdbLen: 6, handler: preventAllow, pr: prWrite,
		usage: u(0x1e, 0, 0, 0, 0x03, 0)}
	t[OpReadCapacity10] = opEntry{alua: allowStandby, name: "READ CAPACITY(10)", cdbLen: 10, handler: readCapacity10,
		needsMedium: true, usage: u(0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0)}
	t[OpRead10] = opEntry{io: ioRead, name: "READ(10)", cdbLen: 10, handler: readN, needsMedium: true, pr: prRead, usage: rw10(OpRead10)}
	t[OpWrite10] = opEntry{io: ioWrite, name: "WRITE(10)", cdbLen: 10, handler: writeN, needsMedium: true, pr: prWrite, usage: rw10(OpWrite10)}
	t[OpWriteVerify10] = opEntry{io: ioWrite, name: "WRITE AND VERIFY(10)", cdbLen: 10, handler: writeVerify, needsMedium: true,
		pr: prWrite, usage: u(0x2e, 0xf2, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0)}
	t[OpVerify10] = opEntry{io: ioMediaOther, name: "VERIFY(10)", cdbLen: 10, handler: verify, needsMedium: true, pr: prRead,
		usage: u(0x2f, 0xf6, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0)}
	t[OpPrefetch10] = opEntry{name: "PRE-FETCH(10)", cdbLen: 10, handler: prefetch, needsMedium: true, pr: prRead,
		usage: u(0x34, 0x02, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0)}
	t[OpSyncCache10] = opEntry{io: ioMediaOther, name: "SYNCHRONIZE CACHE(10)", cdbLen: 10, handler: syncCache, needsMedium: true,
		pr: prWrite, usage: u(0x35, 0x02, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0)}
	t[OpReadDefect10] = opEntry{name: "READ DEFECT DATA(10)", cdbLen: 10, handler: readDefect, pr: prRead,
		usage: u(0x37, 0, 0x1f, 0, 0, 0, 0, 0xff, 0xff, 0)}
	t[OpWriteSame10] = opEntry{io: ioWrite, name: "WRITE SAME(10)", cdbLen: 10, handler: writeSame, needsMedium: true, pr: prWrite,
		usage: u(0x41, 0xe8, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, 0)}
	t[OpUnmap] = opEntry{io: ioWrite, name: "UNMAP", cdbLen: 10, handler: unmap, needsMedium: true, pr: prWrite,
		usage: u(0x42, 0x01, 0, 0, 0, 0, 0x1f, 0xff, 0xff, 0)}
	t[OpLogSense] = opEntry{alua: allowStandby, name: "LOG SENSE", cdbLen: 10, handler: logSense,
		usage: u(0x4d, 0x03, 0xff, 0xff, 0, 0xff, 0xff, 0xff, 0xff, 0)}
	t[OpModeSelect10] = opEntry{alua: allowStandby, name: "MODE SELECT(10)", cdbLen: 10, handler: modeSelect10, pr: prWrite,
		usage: u(0x55, 0x11, 0, 0, 0, 0, 0, 0xff, 0xff, 0)}
	t[OpModeSense10] = opEntry{alua: allowStandby, name: "MODE SENSE(10)", cdbLen: 10, handler: modeSense10, pr: prRead,
		usage: u(0x5a, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, 0)}
	t[OpPRIn] = opEntry{alua: allowStandby, name: "PERSISTENT RESERVE IN", cdbLen: 10, handler: prIn, saInByte1: true,
		usage: u(0x5e, 0x1f, 0, 0, 0, 0, 0, 0xff, 0xff, 0),
		sa: map[byte]serviceAction{0: {name: "READ KEYS"}, 1: {name: "READ RESERVATION"},
			2: {name: "REPORT CAPABILITIES"}, 3: {name: "READ FULL STATUS"}}}
	t[OpPROut] = opEntry{alua: allowStandby, name: "PERSISTENT RESERVE OUT", cdbLen: 10, handler: prOut, pr: prPROut, saInByte1: true,
		usage: u(0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0),
		sa: map[byte]serviceAction{0: {name: "REGISTER"}, 1: {name: "RESERVE"}, 2: {name: "RELEASE"},
			3: {name: "CLEAR"}, 4: {name: "PREEMPT"}, 5: {name: "PREEMPT AND ABORT"},
			6: {name: "REGISTER AND IGNORE EXISTING KEY"}, 7: {name: "REGISTER AND MOVE"}}}
	t[OpRead16] = opEntry{io: ioRead, name: "READ(16)", cdbLen: 16, handler: readN, needsMedium: true, pr: prRead, usage: rw16(OpRead16)}
	t[OpCompareAndWrite] = opEntry{io: ioWrite, name: "COMPARE AND WRITE", cdbLen: 16, handler: compareAndWrite, needsMedium: true,
		pr: prWrite, usage: u(0x89, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0xff, 0x1f, 0)}
	t[OpWrite16] = opEntry{io: ioWrite, name: "WRITE(16)", cdbLen: 16, handler: writeN, needsMedium: true, pr: prWrite, usage: rw16(OpWrite16)}
	t[OpOrWrite16] = opEntry{io: ioWrite, name: "ORWRITE(16)", cdbLen: 16, handler: orWrite, needsMedium: true, pr: prWrite, usage: rw16(OpOrWrite16)}
	t[OpWriteVerify16] = opEntry{io: ioWrite, name: "WRITE AND VERIFY(16)", cdbLen: 16, handler: writeVerify, needsMedium: true,
		pr: prWrite, usage: u(0x8e, 0xf2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0)}
	t[OpVerify16] = opEntry{io: ioMediaOther, name: "VERIFY(16)", cdbLen: 16, handler: verify, needsMedium: true, pr: prRead,
		usage: u(0x8f, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0)}
	t[OpPrefetch16] = opEntry{name: "PRE-FETCH(16)", cdbLen: 16, handler: prefetch, needsMedium: true, pr: prRead,
		usage: u(0x90, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0)}
	t[OpSyncCache16] = opEntry{io: ioMediaOther, name: "SYNCHRONIZE CACHE(16)", cdbLen: 16, handler: syncCache, needsMedium: true,
		pr: prWrite, usage: u(0x91, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0)}
	t[OpWriteSame16] = opEntry{io: ioWrite, name: "WRITE SAME(16)", cdbLen: 16, handler: writeSame, needsMedium: true, pr: prWrite,
		usage: u(0x93, 0xe9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0)}
	t[OpServiceActionIn16] = opEntry{name: "SERVICE ACTION IN(16)", cdbLen: 16, handler: serviceActionIn16,
		saInByte1: true, needsMedium: true,
		sa: map[byte]serviceAction{
			SAReadCapacity16: {name: "READ CAPACITY(16)",
				usage: u(0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0)},
			SAGetLBAStatus: {name: "GET LBA STATUS", usage: u(0x9e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				0xff, 0xff, 0xff, 0xff, 0, 0)},
		}}
	t[OpReportLUNs] = opEntry{alua: allowAll, name: "REPORT LUNS", cdbLen: 12, handler: reportLUNs, noLU: true, noUA: true, resv2OK: true,
		usage: u(0xa0, 0, 0xff, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0)}
	t[OpMaintenanceIn] = opEntry{name: "MAINTENANCE IN", cdbLen: 12, handler: maintenanceIn, saInByte1: true, resv2OK: true,
		sa: map[byte]serviceAction{
			SAReportOpcodes: {name: "REPORT SUPPORTED OPERATION CODES",
				usage: u(0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0)},
			SAReportTMFs: {name: "REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS",
				usage: u(0xa3, 0x0d, 0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0)},
		}}
	// MAINTENANCE OUT carries only SET TARGET PORT GROUPS, listed by REPORT
	// SUPPORTED OPERATION CODES in the explicit mode only (opsWithALUA).
	t[OpMaintenanceOut] = opEntry{name: "MAINTENANCE OUT", cdbLen: 12, handler: maintenanceOut, saInByte1: true,
		pr: prWrite, unlisted: true}
	t[OpRead12] = opEntry{io: ioRead, name: "READ(12)", cdbLen: 12, handler: readN, needsMedium: true, pr: prRead, usage: rw12(OpRead12)}
	t[OpWrite12] = opEntry{io: ioWrite, name: "WRITE(12)", cdbLen: 12, handler: writeN, needsMedium: true, pr: prWrite, usage: rw12(OpWrite12)}
	t[OpWriteVerify12] = opEntry{io: ioWrite, name: "WRITE AND VERIFY(12)", cdbLen: 12, handler: writeVerify, needsMedium: true,
		pr: prWrite, usage: u(0xae, 0xf2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0)}
	t[OpVerify12] = opEntry{io: ioMediaOther, name: "VERIFY(12)", cdbLen: 12, handler: verify, needsMedium: true, pr: prRead,
		usage: u(0xaf, 0xf6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, 0)}
	t[OpReadDefect12] = opEntry{name: "READ DEFECT DATA(12)", cdbLen: 12, handler: readDefect, pr: prRead,
		usage: u(0xb7, 0x1f, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0)}
	for i := range t {
		if t[i].handler != nil && t[i].timeout == 0 {
			t[i].timeout = 30
		}
	}
	return t
}

// conflicts applies SPC-2 and persistent reservations (SPC-4 5.13.1). It
// also reads, under the same lock, how many PREEMPT AND ABORTs the LU has
// seen: the task is aborted if a later one preempts its nexus.
func (op *opEntry) conflicts(lu *LU, c *Command, aborts *uint64) bool {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	*aborts = lu.pr.aborts
	if lu.resv != nil && *lu.resv != c.Nexus {
		return !op.resv2OK
	}
	if lu.resv != nil {
		return false
	}
	pr := op.pr
	if c.CDB[0] == OpServiceActionIn16 && len(c.CDB) > 1 && c.CDB[1]&0x1f == SAGetLBAStatus {
		pr = prRead // GET LBA STATUS reads the medium's state (SBC-3 4.17)
	}
	if pr == prAllowed || pr == prPROut {
		return false
	}
	return lu.pr.conflicts(c.Nexus, pr == prWrite)
}

// DataOut reports whether a command with operation code op may carry
// data-out (initiator to target): what a fabric that is not told the
// direction (TCMU's ring entries are not) needs to know to hand the
// buffers to the device server as written data.
func DataOut(op byte) bool {
	switch op {
	case OpWrite6, OpWrite10, OpWrite12, OpWrite16, OpWriteVerify10, OpWriteVerify12, OpWriteVerify16,
		OpVerify10, OpVerify12, OpVerify16, // BYTCHK sends data to compare
		OpWriteSame10, OpWriteSame16, OpUnmap, OpModeSelect6, OpModeSelect10, OpPROut,
		OpCompareAndWrite, OpOrWrite16, OpMaintenanceOut, OpSendDiagnostic:
		return true
	}
	return false
}
