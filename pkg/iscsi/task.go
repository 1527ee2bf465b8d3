package iscsi

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/scsi"
)

// task is one SCSI command in the connection's task set.
type task struct {
	c         *conn
	itt       uint32
	lunRaw    [8]byte
	lun       uint64
	lunOK     bool
	cdb       []byte
	edtl      int
	read      bool
	write     bool
	immediate bool
	arrived   time.Time // the command PDU was read

	// Data-Out collection (writes).
	data        []byte
	dataBuf     *scsi.Buffer // data's pooled buffer, released by finish
	received    int
	unsolEnd    int  // end of the unsolicited region
	unsolDone   bool // unsolicited sequence finished (F seen or none expected)
	r2tOffset   int  // offset of the outstanding R2T, -1 when none
	r2tLen      int
	r2tTTT      uint32
	r2tSN       uint32
	nextDataSN  uint32
	solicitNext int // next offset to ask for

	dataErr bool // a Data-Out sequence error: fail instead of executing
	// refused: the limits turned the write away; its data is drained and
	// dropped, then this is the answer.
	refused  *scsi.Response
	reserved int64 // write buffer booked against the budgets

	started atomic.Bool
	aborted atomic.Bool
	// outcome decides, once, whether the task is answered or aborted:
	// execute and ABORT TASK race for it, so a task is never both given
	// a response and reported aborted.
	outcome atomic.Int32
	// finished: finish has run; done, made only when someone waits
	// (doneCh), is closed then. Both under c.mu.
	finished bool
	done     chan struct{}

	// Allocated with the task: its CDB (16 bytes, more from an AHS), the
	// command the device server runs and the PDU carrying its status.
	cdbArr [16]byte
	cmd    scsi.Command
	out    outPDU
}

// doneCh is a channel closed when t has finished, or nil if it has.
// c.mu is held.
func (t *task) doneCh() chan struct{} {
	if t.finished {
		return nil
	}
	if t.done == nil {
		t.done = make(chan struct{})
	}
	return t.done
}

// wait waits until t has finished or the connection has ended.
func (c *conn) wait(t *task) {
	c.mu.Lock()
	ch := t.doneCh()
	c.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-c.done:
	}
}

// plainWrite: WRITE(6), (10), (12) or (16).
func plainWrite(op byte) bool { return op == 0x0a || op == 0x2a || op == 0xaa || op == 0x8a }

// run proceeds with the task once its CmdSN is in order (a runner).
func (t *task) run() { t.c.proceed(t) }

const (
	outcomeOpen = iota
	outcomeAnswered
	outcomeAborted
)

func (c *conn) onSCSICommand(p *PDU) error {
	h := &p.BHS
	t := &task{c: c, itt: h.ITT(), lunRaw: h.LUN(), edtl: int(h.ExpectedDataLen()),
		read: h.Flags()&FlagRead != 0, write: h.Flags()&FlagWrite != 0, immediate: h.Immediate(),
		r2tOffset: -1, arrived: time.Now()}
	t.cdbArr = [16]byte(h.CDB())
	t.cdb = t.cdbArr[:]
	t.lun, t.lunOK = ParseLUN(t.lunRaw)
	if len(p.AHS) > 0 {
		// Extended CDB AHS (type 1) carries CDB bytes past 16 (RFC 7143 11.3.1.1).
		if ahsType := p.AHS[2]; ahsType == 1 && len(p.AHS) >= 4 {
			l := int(binary.BigEndian.Uint16(p.AHS[0:])) - 1
			if l > 0 && 4+l <= len(p.AHS) {
				t.cdb = append(t.cdb, p.AHS[4:4+l]...)
			}
		}
	}
	if !t.write && len(p.Data) > 0 {
		c.reject(h, RejectProtocolError)
		return nil
	}
	if t.write && t.edtl > 0 {
		if len(p.Data) > t.edtl || len(p.Data) > c.params.FirstBurstLength || (!c.params.ImmediateData && len(p.Data) > 0) {
			c.reject(h, RejectProtocolError)
			return nil
		}
		if t.refused = c.reserve(t); t.refused == nil {
			if plainWrite(t.cdb[0]) {
				// WRITE's data is read by the device server while it
				// runs and by no one after: it can come from the pool.
				t.dataBuf = scsi.GetBuffer(t.edtl)
			}
			if t.dataBuf != nil {
				t.data = t.dataBuf.Bytes()
				clear(t.data[len(p.Data):]) // what no Data-Out covers reads as zeros
			} else {
				t.data = make([]byte, t.edtl)
			}
			copy(t.data, p.Data)
		}
		t.received = len(p.Data)
		t.unsolEnd = len(p.Data)
		t.unsolDone = true
		if !c.params.InitialR2T && !h.Final() {
			t.unsolEnd = min(c.params.FirstBurstLength, t.edtl)
			t.unsolDone = t.received >= t.unsolEnd
		}
		t.solicitNext = t.unsolEnd
	}
	c.mu.Lock()
	if _, dup := c.tasks[t.itt]; dup {
		c.mu.Unlock()
		c.unreserve(t)
		c.reject(h, RejectTaskInProgress)
		return nil
	}
	if t.immediate && len(c.tasks) >= int(c.t.cfg.CmdWindow)+maxImmediate {
		c.mu.Unlock()
		c.unreserve(t)
		c.t.limits.immRejected.Add(1)
		c.reject(h, RejectImmediate)
		return nil
	}
	c.tasks[t.itt] = t
	c.mu.Unlock()
	c.tasksWG.Add(1)
	cmdSN := h.CmdSN()
	res, more := c.sess.admit(cmdSN, t.immediate, t)
	switch res {
	case cmdSNDrop:
		c.removeTask(t)
		c.unreserve(t)
		c.tasksWG.Done()
	case cmdSNRun:
		c.proceed(t)
		for _, r := range more {
			r.run()
		}
	}
	return nil
}

// proceed either solicits more data or runs the command.
func (c *conn) proceed(t *task) {
	if t.aborted.Load() {
		if t.started.CompareAndSwap(false, true) {
			c.finish(t)
		}
		return
	}
	if t.refused != nil {
		if t.write && t.received < t.edtl && !t.unsolDone {
			return // drain the unsolicited Data-Out sequence first
		}
		if t.started.CompareAndSwap(false, true) {
			go c.answerRefused(t)
		}
		return
	}
	if t.write && t.received < t.edtl {
		if !t.unsolDone {
			return // wait for the unsolicited Data-Out sequence
		}
		c.mu.Lock()
		need := t.r2tOffset < 0
		c.mu.Unlock()
		if need {
			c.sendR2T(t)
		}
		return
	}
	if !t.started.CompareAndSwap(false, true) {
		return
	}
	c.startExec(t)
}

// startExec runs t on one of the connection's workers: an idle one if
// one is waiting, else a new one. Workers live as long as the connection,
// so a command costs no goroutine start and no stack growth.
func (c *conn) startExec(t *task) {
	c.running.Add(1)
	select {
	case c.work <- t:
	default:
		go c.worker(t)
	}
}

func (c *conn) worker(t *task) {
	for {
		c.execute(t)
		select {
		case t = <-c.work:
		case <-c.done:
			return
		}
	}
}

func (c *conn) sendR2T(t *task) {
	c.mu.Lock()
	off := t.solicitNext
	n := min(t.edtl-off, c.params.MaxBurstLength)
	t.r2tOffset, t.r2tLen = off, n
	t.solicitNext = off + n
	c.nextTTT++
	if c.nextTTT == ReservedTag || c.nextTTT == 0 {
		c.nextTTT = 1
	}
	t.r2tTTT = c.nextTTT
	t.nextDataSN = 0
	sn := t.r2tSN
	t.r2tSN++
	c.mu.Unlock()
	var r BHS
	r.SetOpcode(OpR2T)
	r.SetFlags(FlagFinal)
	r.SetLUN(t.lunRaw)
	r.SetITT(t.itt)
	r.SetTTT(t.r2tTTT)
	r.SetDataSN(sn)
	r.SetBufferOffset(uint32(off))
	r.SetWord44(uint32(n))
	c.send(&outPDU{pdu: PDU{BHS: r}})
}

// onDataOut places solicited or unsolicited data (RFC 7143 11.7).
func (c *conn) onDataOut(p *PDU) error {
	h := &p.BHS
	c.mu.Lock()
	t := c.tasks[h.ITT()]
	if t == nil || !t.write || t.started.Load() {
		c.mu.Unlock()
		if t == nil {
			// Data for an aborted or dropped command is discarded (RFC 7143 4.2.2.4? / 7.1).
			return nil
		}
		c.reject(h, RejectProtocolError)
		return nil
	}
	off, n := int(h.BufferOffset()), len(p.Data)
	solicited := h.TTT() != ReservedTag
	if solicited && (t.r2tOffset < 0 || h.TTT() != t.r2tTTT) || !solicited && t.unsolDone {
		c.mu.Unlock()
		c.reject(h, RejectProtocolError)
		return nil
	}
	var lo, hi int
	if solicited {
		lo, hi = t.r2tOffset, t.r2tOffset+t.r2tLen
	} else {
		lo, hi = 0, t.unsolEnd
	}
	if off < lo || off+n > hi {
		c.mu.Unlock()
		c.reject(h, RejectProtocolError)
		return nil
	}
	if h.DataSN() != t.nextDataSN {
		// ERL 0 cannot recover a DataSN error (RFC 7143 7.1.4): the
		// command completes with ABORTED COMMAND / DATA PHASE ERROR once
		// its data has arrived, and the session carries on.
		t.dataErr = true
	}
	t.nextDataSN = h.DataSN() + 1
	if t.data != nil {
		copy(t.data[off:], p.Data)
	}
	t.received += n
	final := h.Final()
	if final {
		if solicited {
			t.r2tOffset = -1
		} else {
			t.unsolDone = true
			t.nextDataSN = 0
		}
	}
	c.mu.Unlock()
	if final {
		c.proceed(t)
	}
	return nil
}

// execute runs the command through the device server and sends the result.
func (c *conn) execute(t *task) {
	defer c.finish(t)
	if t.aborted.Load() {
		c.running.Add(-1)
		return
	}
	cmd := &t.cmd
	*cmd = scsi.Command{Nexus: c.sess.nexus, LUN: t.lun, CDB: t.cdb, Data: t.data,
		Releases: !c.params.DataDigest} // a data digest is Go code reading the data
	if t.read {
		cmd.DataInLen = t.edtl
	}
	if !t.lunOK {
		cmd.LUN = ^uint64(0)
	}
	var resp scsi.Response
	if t.dataErr {
		resp = scsi.Response{Status: scsi.StatusCheckCondition, DataOutLen: t.edtl,
			Sense: scsi.BuildSense(scsi.Sense(scsi.ReasonDataPhaseError), false)}
	} else {
		resp = c.t.handler.Execute(cmd)
	}
	// No longer running: the writer need not wait for more than the
	// response queued next.
	c.running.Add(-1)
	if !t.outcome.CompareAndSwap(outcomeOpen, outcomeAnswered) {
		resp.Buf.Release() // nothing queued from it
		return             // aborted while it ran: no response (RFC 7143 4.2.3.2)
	}
	c.respond(t, &resp)
}

// finish removes the task and releases its window slot.
func (c *conn) finish(t *task) {
	c.removeTask(t) // no Data-Out reaches t.data after this
	c.unreserve(t)
	if !t.immediate {
		c.sess.completed()
	}
	t.dataBuf.Release() // the device server is done with it, or never ran
	c.mu.Lock()
	t.finished = true
	if t.done != nil {
		close(t.done)
	}
	c.mu.Unlock()
	c.tasksWG.Done()
}

func (c *conn) removeTask(t *task) {
	c.mu.Lock()
	if c.tasks[t.itt] == t {
		delete(c.tasks, t.itt)
	}
	c.mu.Unlock()
}

// respond sends Data-In (with phase-collapsed status where allowed) and/or
// a SCSI Response, with residuals against the Expected Data Transfer Length
// (RFC 7143 11.4.5).
func (c *conn) respond(t *task, r *scsi.Response) {
	var flags byte
	var residual int
	switch {
	case t.write || r.DataOutLen > 0 && !t.read:
		// A command that wants data-out, sent without the W bit (nothing
		// carried), reports all of it as overflow.
		if d := t.edtl - r.DataOutLen; d > 0 {
			flags, residual = FlagUnderflow, d
		} else if d < 0 {
			flags, residual = FlagOverflow, -d
		}
	default:
		want := len(r.Data)
		expect := 0
		if t.read {
			expect = t.edtl
		}
		if want > expect {
			flags, residual = FlagOverflow, want-expect
			r.Data = r.Data[:expect]
		} else if want < expect {
			flags, residual = FlagUnderflow, expect-want
		}
	}
	collapse := len(r.Sense) == 0 && len(r.Data) > 0 && t.read
	dataSN := c.sendDataIn(t, r.Data, collapse, r.Status, flags, residual, r.Buf)
	if collapse {
		return
	}
	var h BHS
	h.SetOpcode(OpSCSIResp)
	h.SetFlags(FlagFinal | flags)
	h[2] = 0 // command completed at target
	h[3] = byte(r.Status)
	h.SetITT(t.itt)
	h.SetDataSN(dataSN) // ExpDataSN
	h.SetWord44(uint32(residual))
	var data []byte
	if len(r.Sense) > 0 {
		data = make([]byte, 2+len(r.Sense))
		binary.BigEndian.PutUint16(data, uint16(len(r.Sense)))
		copy(data[2:], r.Sense)
	}
	// The status goes after any Data-In: it releases the data's buffer.
	t.out = outPDU{pdu: PDU{BHS: h, Data: data}, advance: true, started: t.arrived, buf: r.Buf}
	c.send(&t.out)
}

// sendDataIn splits data into Data-In PDUs of at most the initiator's
// MaxRecvDataSegmentLength, with F at the end of each MaxBurstLength
// sequence. It returns the number of PDUs sent (the next DataSN).
func (c *conn) sendDataIn(t *task, data []byte, withStatus bool, st scsi.Status, flags byte, residual int, buf *scsi.Buffer) uint32 {
	var sn uint32
	lent := buf.Lent()
	seg := c.params.MaxXmitDataSegment
	burst := c.params.MaxBurstLength
	for off := 0; off < len(data); {
		n := min(seg, len(data)-off)
		if inBurst := burst - off%burst; n > inBurst {
			n = inBurst
		}
		last := off+n == len(data)
		var h BHS
		h.SetOpcode(OpDataIn)
		var f byte
		if last || (off+n)%burst == 0 {
			f |= FlagFinal
		}
		var o *outPDU
		if last && withStatus {
			f |= FlagStatus | flags
			h[3] = byte(st)
			h.SetWord44(uint32(residual))
			// The task's own PDU; the last one sent from buf releases it.
			o = &t.out
			*o = outPDU{advance: true, started: t.arrived, buf: buf}
		} else {
			o = &outPDU{noStatSN: true}
		}
		h.SetFlags(f)
		h.SetLUN(t.lunRaw)
		h.SetITT(t.itt)
		h.SetTTT(ReservedTag)
		h.SetDataSN(sn)
		h.SetBufferOffset(uint32(off))
		o.pdu = PDU{BHS: h, Data: data[off : off+n]}
		o.lent = lent
		if !c.send(o) {
			if withStatus && !last {
				c.drop(buf) // the PDU that would release it is not sent
			}
			return sn
		}
		sn++
		off += n
	}
	return sn
}

// abortAll marks every task aborted (connection loss: ERL 0 drops them).
func (c *conn) abortAll() {
	c.mu.Lock()
	var waiting []*task
	for _, t := range c.tasks {
		t.aborted.Store(true)
		if !t.started.Load() {
			waiting = append(waiting, t)
		}
	}
	c.mu.Unlock()
	for _, t := range waiting {
		if t.started.CompareAndSwap(false, true) {
			c.finish(t)
		}
	}
}

// waitTasksExcept waits until every task but skip has finished.
func (c *conn) waitTasksExcept(skip *task) {
	c.mu.Lock()
	var ts []*task
	for _, t := range c.tasks {
		if t != skip {
			ts = append(ts, t)
		}
	}
	c.mu.Unlock()
	for _, t := range ts {
		c.wait(t)
	}
}

// abortMatching aborts tasks selected by match (no response is sent for
// them, RFC 7143 4.2.3.2) and waits for any that are executing to end. It
// returns how many it aborted; a task whose response was already decided
// is waited for but not counted (it completed, it was not aborted).
func (c *conn) abortMatching(match func(*task) bool) int {
	c.mu.Lock()
	var hit []*task
	for _, t := range c.tasks {
		if match(t) {
			hit = append(hit, t)
		}
	}
	c.mu.Unlock()
	n := 0
	for _, t := range hit {
		if t.outcome.CompareAndSwap(outcomeOpen, outcomeAborted) {
			n++
			t.aborted.Store(true)
			if t.started.CompareAndSwap(false, true) {
				c.finish(t) // never started: finish it here
				continue
			}
		}
		c.wait(t)
	}
	return n
}

// TMF response codes (RFC 7143 11.6.1).
const (
	tmfComplete        = 0
	tmfNoTask          = 1
	tmfNoLUN           = 2
	tmfReassignNotSupp = 4
	tmfNotSupported    = 5
)

func (c *conn) onTaskMgmt(p *PDU) {
	h := &p.BHS
	fn := h.Flags() & 0x7f
	lun, lunOK := ParseLUN(h.LUN())
	resp := byte(tmfComplete)
	nexus := c.sess.nexus
	if o, ok := c.t.handler.(scsi.TaskObserver); ok && fn >= 1 && fn <= 7 {
		o.TaskManagement(nexus, scsi.TMF(fn), lun)
	}
	switch fn {
	case 1: // ABORT TASK
		// RFC 7143 11.5.1: a task that is found and terminated is
		// "function complete"; one not found whose RefCmdSN was already
		// received (below ExpCmdSN: it completed) "does not exist"; one
		// not found whose RefCmdSN is still ahead in the window is
		// considered received and "function complete".
		rtt := h.TTT()
		if c.abortMatching(func(t *task) bool { return t.itt == rtt }) == 0 {
			ref := h.u32(32)
			exp, _ := c.sess.window()
			if SerialLess(ref, exp) {
				resp = tmfNoTask
			}
		}
	case 2, 4: // ABORT TASK SET, CLEAR TASK SET
		c.abortMatching(func(t *task) bool { return t.lun == lun && t.itt != h.ITT() })
	case 5: // LUN RESET
		if !lunOK || !c.t.handler.LUNExists(nexus, lun) {
			resp = tmfNoLUN
			break
		}
		c.abortMatching(func(t *task) bool { return t.lun == lun })
		c.t.handler.Reset(nexus, scsi.TMFLUNReset, lun)
	case 6, 7: // TARGET WARM RESET, TARGET COLD RESET
		c.abortMatching(func(*task) bool { return true })
		c.t.handler.Reset(nexus, scsi.TMFTargetWarmReset, 0)
	case 3: // CLEAR ACA: NACA is never set here
		resp = tmfNotSupported
	case 8: // TASK REASSIGN: needs ERL 2
		resp = tmfReassignNotSupp
	default:
		resp = tmfNotSupported
	}
	var r BHS
	r.SetOpcode(OpTaskResp)
	r.SetFlags(FlagFinal)
	r[2] = resp
	r.SetITT(h.ITT())
	cold := fn == 7 && resp == tmfComplete
	c.send(&outPDU{pdu: PDU{BHS: r}, advance: true, closeConn: cold})
	if cold {
		// A cold reset also ends the caller's other sessions (see
		// resetHostSessions for why not every host's).
		c.t.resetHostSessions(c.sess)
	}
}
