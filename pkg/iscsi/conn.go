package iscsi

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// Reject reasons (RFC 7143 11.17.1).
const (
	RejectDataDigest      = 0x02
	RejectSNACK           = 0x03
	RejectProtocolError   = 0x04
	RejectNotSupported    = 0x05
	RejectImmediate       = 0x06
	RejectTaskInProgress  = 0x07
	RejectInvalidDataAck  = 0x08
	RejectInvalidPDUField = 0x09
	RejectLongOperation   = 0x0a
	RejectWaitingLogout   = 0x0c
)

// outPDU is a PDU queued for the writer. The writer fills in StatSN,
// ExpCmdSN and MaxCmdSN at send time so they are always in order.
type outPDU struct {
	pdu      PDU
	advance  bool // consumes a StatSN (a response)
	noStatSN bool // StatSN field reserved (Data-In without status)
	noWindow bool // ExpCmdSN/MaxCmdSN not carried (login uses its own)
	// buf is the pooled buffer the data lies in, released once the PDU
	// is written or dropped (on the last PDU that uses it).
	buf *scsi.Buffer
	// drop: not to be sent; only its buffer released (in order).
	drop bool
	// lent: the data is the media's own bytes (scsi.Buffer.Lent): only
	// the kernel reads them, never copied into the writer's arena.
	lent      bool
	closeConn bool      // close after sending
	due       time.Time // an injected path delay: not sent before
	// started: this PDU carries a command's status; the command arrived
	// then (the exchange time is measured when it is written).
	started time.Time
}

// conn is one TCP connection of a session.
type conn struct {
	t      *Target
	nc     net.Conn
	portal fabric.Portal
	br     *bufio.Reader
	cid    uint16

	params Params
	sess   *session

	out      chan *outPDU
	writerWG sync.WaitGroup
	statSN   uint32 // owned by the writer (login: by serve before the writer starts)

	mu        sync.Mutex
	tasks     map[uint32]*task // by ITT
	nextTTT   uint32
	closed    bool
	detached  bool
	outClosed bool // out is closed (serve's end)
	closeOnce sync.Once
	done      chan struct{}
	tasksWG   sync.WaitGroup
	// readDone is closed when serve has stopped reading PDUs (its read
	// loop ended, or its login failed): no task is added after it, so
	// tasksWG may be waited on from outside (Target.Shutdown).
	readDone chan struct{}

	// running counts the tasks executing in the device server: while
	// any is, the writer waits a little for their responses (gather).
	running atomic.Int32
	// work hands a task to an idle worker (startExec).
	work chan *task

	// dataReserved is the write data this connection's tasks hold.
	dataReserved atomic.Int64

	ini        atomic.Pointer[string] // initiator name, once the login names it
	lastRecv   atomic.Int64
	pingTTT    atomic.Uint32
	pingSentAt atomic.Int64
	stopRead   atomic.Bool
	// loggedOut: the initiator asked to close the session or connection
	// with a Logout Request, which was answered: an orderly end.
	loggedOut atomic.Bool

	textPending []byte // accumulating a Text Request with the C bit
	textOut     []byte // remaining Text Response data after a C bit
	textTTT     uint32
}

func newConn(t *Target, nc net.Conn, p fabric.Portal) *conn {
	return &conn{t: t, nc: nc, portal: p, br: bufio.NewReaderSize(nc, 64*1024),
		out: make(chan *outPDU, 512), work: make(chan *task), tasks: map[uint32]*task{}, done: make(chan struct{}),
		readDone: make(chan struct{}), nextTTT: 1}
}

func (c *conn) close(reason string) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.done)
		c.nc.Close()
	})
}

// stopReading makes the read loop exit at the next PDU boundary (graceful shutdown).
func (c *conn) stopReading() {
	c.stopRead.Store(true)
	c.nc.SetReadDeadline(time.Now())
}

// detach marks the connection as replaced: its end does not end the session.
func (c *conn) detach() {
	c.mu.Lock()
	c.detached = true
	c.mu.Unlock()
}

func (c *conn) serve() {
	defer c.close("done")
	readEnded := sync.OnceFunc(func() { close(c.readDone) })
	defer readEnded()
	sess, ok := c.login()
	if !ok {
		return
	}
	c.sess = sess
	c.writerWG.Add(1)
	go c.writer()
	if c.t.cfg.NopInterval > 0 {
		go c.keepalive()
	}
	err := c.readLoop()
	readEnded()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errSilenced) && !c.stopRead.Load() {
		c.t.log.Debug("connection ended", "initiator", sess.initiator, "err", err)
	}
	c.abortAll()
	c.tasksWG.Wait()
	c.mu.Lock()
	c.outClosed = true // the keepalive, outside the tasks, sends no more
	close(c.out)
	c.mu.Unlock()
	c.writerWG.Wait()
	c.mu.Lock()
	detached := c.detached
	c.mu.Unlock()
	if !detached {
		reason := "connection closed"
		if c.loggedOut.Load() {
			reason = fabric.ReasonLogout
		}
		sess.close(reason)
	}
}

// login runs the login phase with a deadline.
func (c *conn) login() (*session, bool) {
	c.nc.SetDeadline(time.Now().Add(c.t.cfg.LoginTimeout))
	defer c.nc.SetDeadline(time.Time{})
	lg := NewLogin(LoginConfig{TargetName: c.t.cfg.Name, TargetAlias: c.t.cfg.Alias, TPGT: c.portal.TPGT,
		Limits: c.t.cfg.Limits, Auth: c.t.cfg.Auth, Authorize: c.t.cfg.Authorize})
	first := true
	var cmdSN uint32
	for {
		p, err := ReadPDU(c.br, Digests{}, 64*1024, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.limits.loginTimeouts.Add(1)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, errSilenced) {
				c.t.limits.protoErrors.Add(1)
			}
			return nil, false
		}
		if p.BHS.Opcode() != OpLoginReq {
			c.sendLoginReject(&p.BHS, LoginInvalidDuringLogin)
			return nil, false
		}
		if first {
			c.statSN = p.BHS.ExpStatSN()
			cmdSN = p.BHS.CmdSN()
			c.cid = p.BHS.CID()
			first = false
		}
		r := lg.Step(&p.BHS, p.Data)
		if lg.Initiator != "" && c.ini.Load() == nil {
			name := lg.Initiator
			c.ini.Store(&name)
		}
		if c.t.faults.down(lg.Initiator, c.portal.RelativeID) {
			c.t.applyMode(c) // silent or reset as the port is; a cut path closes
			return nil, false
		}
		var sess *session
		if r.Status == LoginSuccess && r.Done {
			var st LoginStatus
			sess, st = c.t.bindSession(c, lg)
			if st != LoginSuccess {
				r = LoginReply{Status: st, Done: true}
			}
		}
		tsih := lg.TSIH
		closed := false
		if sess != nil {
			tsih = sess.tsih
			if r.Status == LoginSuccess && lg.TSIH == 0 {
				// The new session has its connection before the initiator
				// hears it is logged in: a reset or a reinstatement that
				// follows at once (a cold reset from the host's other path)
				// must find the connection to close.
				sess.start(cmdSN)
				sess.mu.Lock()
				sess.conn = c
				closed = sess.closed
				sess.mu.Unlock()
			}
			if r.Status == LoginSuccess && !closed {
				sess.announce()
			}
		}
		c.writeLoginResponse(&p.BHS, r, tsih, cmdSN)
		if r.Status != LoginSuccess {
			return nil, false
		}
		if r.Done {
			if closed {
				return nil, false // ended while it logged in
			}
			c.params = lg.Params
			return sess, true
		}
	}
}

func (c *conn) writeLoginResponse(req *BHS, r LoginReply, tsih uint16, cmdSN uint32) {
	var h BHS
	h.SetOpcode(OpLoginResp)
	f := byte(r.CSG<<2 | r.NSG)
	if r.Transit {
		f |= FlagTransit
	}
	h.SetFlags(f)
	h.SetISID(req.ISID())
	h.SetTSIH(tsih)
	h.SetITT(req.ITT())
	h.SetStatSN(c.statSN)
	c.statSN++
	h.SetExpCmdSN(cmdSN)
	h.SetMaxCmdSN(cmdSN + c.t.cfg.CmdWindow - 1)
	h.SetStatus(byte(r.Status>>8), byte(r.Status))
	p := &PDU{BHS: h, Data: AppendText(nil, r.KVs)}
	c.nc.Write(AppendPDU(nil, p, Digests{}))
}

func (c *conn) sendLoginReject(req *BHS, st LoginStatus) {
	c.writeLoginResponse(req, LoginReply{Status: st}, 0, req.CmdSN())
}

func (c *conn) digests() Digests {
	return Digests{Header: c.params.HeaderDigest, Data: c.params.DataDigest}
}

// writer is the only goroutine writing to the socket after login. It
// gathers the PDUs queued meanwhile into one vectored write: headers and
// small data segments are copied into an arena, large data segments (read
// data) are sent from where they lie. While commands of the connection
// are still executing it yields to them before writing, so a queue of
// commands is answered in a few system calls rather than one per PDU.
func (c *conn) writer() {
	defer c.writerWG.Done()
	w := newPDUWriter(c.digests(), c.sess)
	var deadlineSet time.Time
	broken := false
	var batch []*outPDU
	for {
		o, ok := <-c.out
		if !ok {
			break
		}
		batch = append(batch[:0], o)
		closed := c.gather(&batch)
		for _, o := range batch {
			if broken {
				o.buf.Release()
				continue
			}
			if o.drop {
				w.sent = append(w.sent, o) // released after what is before it
				continue
			}
			if !o.due.IsZero() {
				if d := time.Until(o.due); d > 0 {
					if err := w.flush(c.nc); err != nil {
						broken = c.writeFailed(err)
						o.buf.Release()
						continue
					}
					time.Sleep(d)
				}
			}
			if now := time.Now(); now.Sub(deadlineSet) > c.t.cfg.WriteTimeout/4 {
				c.nc.SetWriteDeadline(now.Add(c.t.cfg.WriteTimeout))
				deadlineSet = now
			}
			h := &o.pdu.BHS
			if !o.noStatSN {
				h.SetStatSN(c.statSN)
			}
			if o.advance {
				c.statSN++
			}
			if !o.noWindow && c.sess != nil {
				exp, max := c.sess.window()
				h.SetExpCmdSN(exp)
				h.SetMaxCmdSN(max)
			}
			w.add(o)
			if o.closeConn || w.full() {
				if err := w.flush(c.nc); err != nil {
					broken = c.writeFailed(err)
					continue
				}
			}
			if o.closeConn {
				broken = true
				c.close("logout")
			}
		}
		if !broken {
			if err := w.flush(c.nc); err != nil {
				broken = c.writeFailed(err)
			}
		}
		w.done()
		clear(batch) // a status PDU lives in its task: keep no task alive
		if closed {
			break
		}
	}
	if !broken {
		w.flush(c.nc)
	}
	w.done()
}

// maxYields bounds how often the writer yields to executing commands
// before it writes what it has (measured on the bench: 4 gathers most of
// a queue of 32 reads; more adds latency for nothing).
const maxYields = 4

// maxBatch bounds the PDUs one vectored write carries.
const maxBatch = 64

// gather adds to batch what is queued for the writer, first yielding to
// the connection's executing commands while they may add more. It
// reports whether the queue was closed.
func (c *conn) gather(batch *[]*outPDU) (closed bool) {
	yields := 0
	for len(*batch) < maxBatch {
		select {
		case o, ok := <-c.out:
			if !ok {
				return true
			}
			*batch = append(*batch, o)
			continue
		default:
		}
		if yields >= maxYields || c.running.Load() == 0 {
			return false
		}
		yields++
		runtime.Gosched()
	}
	return false
}

// writeFailed ends the connection after a failed write; it returns true
// (the connection is broken).
func (c *conn) writeFailed(err error) bool {
	var ne net.Error
	w, wired := c.nc.(*wireConn)
	if errors.As(err, &ne) && ne.Timeout() && !(wired && w.silent.Load()) {
		c.t.limits.writeTimeouts.Add(1)
		c.t.log.Warn("initiator stopped reading; connection closed", "initiator", c.sess.initiator,
			"after", c.t.cfg.WriteTimeout)
	}
	c.close("write error")
	return true
}

// pduWriter builds one vectored write of several PDUs.
type pduWriter struct {
	dg    Digests
	arena []byte      // headers, small data segments, pads and digests
	seg   int         // start of the arena's part not yet in bufs
	bufs  net.Buffers // what the next flush writes
	iov   net.Buffers // what WriteTo consumes
	sent  []*outPDU   // PDUs in bufs: released once written
	wrote []*outPDU   // PDUs written, to release (done)
	// sess counts the exchanges (command in, status out).
	sess *session
}

// copyMax: data segments up to this size are copied into the arena.
const copyMax = 1024

// arenaSize bounds the arena: a flush makes room.
const arenaSize = 64 * 1024

func newPDUWriter(dg Digests, sess *session) *pduWriter {
	return &pduWriter{dg: dg, sess: sess, arena: make([]byte, 0, arenaSize+BHSLen+1024+copyMax+16)}
}

// full: the next PDU may not fit.
func (w *pduWriter) full() bool { return len(w.arena) > arenaSize || len(w.bufs) > 1000 }

// add appends o's wire bytes.
func (w *pduWriter) add(o *outPDU) {
	p := &o.pdu
	p.BHS.SetDataLen(len(p.Data))
	p.BHS[4] = byte(len(p.AHS) / 4)
	start := len(w.arena)
	w.arena = append(w.arena, p.BHS[:]...)
	w.arena = append(w.arena, p.AHS...)
	if w.dg.Header {
		w.arena = AppendDigest(w.arena, CRC32C(w.arena[start:]))
	}
	if n := len(p.Data); n > 0 {
		pad := zeroPad[:Pad4(n)-n]
		if n <= copyMax && !o.lent {
			w.arena = append(w.arena, p.Data...)
		} else {
			w.cut()
			w.bufs = append(w.bufs, p.Data)
		}
		w.arena = append(w.arena, pad...)
		if w.dg.Data {
			w.arena = AppendDigest(w.arena, CRC32C(p.Data, pad))
		}
	}
	w.sent = append(w.sent, o)
	if !o.started.IsZero() && w.sess != nil {
		// The exchange ends as its status is put on the wire: counted
		// before the initiator can read it, timed without the write.
		w.sess.recordExchange(time.Since(o.started))
	}
}

// cut moves the arena's pending bytes into bufs.
func (w *pduWriter) cut() {
	if len(w.arena) > w.seg {
		w.bufs = append(w.bufs, w.arena[w.seg:len(w.arena):len(w.arena)])
		w.seg = len(w.arena)
	}
}

// flush writes what was added in one vectored write.
func (w *pduWriter) flush(nc net.Conn) error {
	w.cut()
	var err error
	if len(w.bufs) > 0 {
		w.iov = w.bufs // WriteTo consumes its receiver
		if wc, ok := nc.(*wireConn); ok {
			_, err = wc.writeBuffers(&w.iov)
		} else {
			_, err = w.iov.WriteTo(nc)
		}
	}
	clear(w.bufs)
	w.bufs = w.bufs[:0]
	w.arena, w.seg = w.arena[:0], 0
	w.wrote = append(w.wrote, w.sent...) // written, or dropped on an error
	clear(w.sent)
	w.sent = w.sent[:0]
	return err
}

// done releases the PDUs written (or dropped).
func (w *pduWriter) done() {
	for _, o := range w.sent {
		o.buf.Release()
	}
	clear(w.sent)
	w.sent = w.sent[:0]
	for _, o := range w.wrote {
		o.buf.Release()
	}
	clear(w.wrote)
	w.wrote = w.wrote[:0]
}

// headerInto is HeaderBytes reusing b.
func headerInto(b []byte, p *PDU, dg Digests) (head, trailer []byte) {
	p.BHS.SetDataLen(len(p.Data))
	p.BHS[4] = byte(len(p.AHS) / 4)
	b = append(b, p.BHS[:]...)
	b = append(b, p.AHS...)
	if dg.Header {
		b = AppendDigest(b, CRC32C(b))
	}
	if len(p.Data) == 0 {
		return b, nil
	}
	pad := zeroPad[:Pad4(len(p.Data))-len(p.Data)]
	trailer = pad
	if dg.Data {
		trailer = AppendDigest(append([]byte(nil), pad...), CRC32C(p.Data, pad))
	}
	return b, trailer
}

// send queues a PDU; it returns false if the connection is gone.
func (c *conn) send(o *outPDU) bool {
	if ini := c.ini.Load(); ini != nil {
		if d := c.t.faults.delayOf(*ini, c.portal.RelativeID); d > 0 {
			o.due = time.Now().Add(d)
		}
	}
	if o.buf != nil {
		// Its buffer is released by the writer, after the PDUs queued
		// before it (sent from the same buffer): queued even on a closed
		// connection, whose writer drops it. c.out outlives every task,
		// the only senders of buffers.
		select {
		case <-c.done:
			o.drop = true
			c.out <- o
			return false
		case c.out <- o:
			return true
		}
	}
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.out <- o:
		return true
	case <-c.done:
		return false
	}
}

// drop releases buf through the writer, after the PDUs queued before.
func (c *conn) drop(buf *scsi.Buffer) {
	if buf != nil {
		c.send(&outPDU{drop: true, buf: buf})
	}
}

func (c *conn) reject(h *BHS, reason byte) {
	var r BHS
	r.SetOpcode(OpReject)
	r.SetFlags(FlagFinal)
	r[2] = reason
	r.SetITT(ReservedTag)
	c.send(&outPDU{pdu: PDU{BHS: r, Data: append([]byte(nil), h[:]...)}, advance: true})
}

func (c *conn) readLoop() error {
	dg := c.digests()
	maxData := c.params.MaxRecvDataSegment
	// One PDU and one data buffer serve every read: what a handler keeps
	// past dispatch it copies (clone).
	p := &PDU{}
	var buf []byte
	for {
		if c.stopRead.Load() {
			return nil
		}
		hdr, err := readPDUInto(c.br, p, dg, maxData, buf)
		if cap(p.Data) > cap(buf) {
			buf = p.Data[:0]
		}
		if err != nil {
			var de ErrDigest
			if errors.As(err, &de) && !de.Header && hdr {
				c.reject(&p.BHS, RejectDataDigest)
				continue
			}
			if hdr && errors.Is(err, ErrTooLarge) {
				c.reject(&p.BHS, RejectProtocolError)
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, errSilenced) && !c.stopRead.Load() {
				c.t.limits.protoErrors.Add(1)
			}
			return err
		}
		c.lastRecv.Store(c.t.cfg.Clock.Now().UnixNano())
		if err := c.dispatch(p); err != nil {
			return err
		}
	}
}

var errCloseConn = errors.New("iscsi: connection closed by protocol")

func (c *conn) dispatch(p *PDU) error {
	h := &p.BHS
	if c.sess.discovery {
		switch h.Opcode() {
		case OpTextReq, OpLogoutReq, OpNOPOut:
		default:
			c.reject(h, RejectProtocolError)
			return nil
		}
	}
	switch h.Opcode() {
	case OpSCSICmd:
		return c.onSCSICommand(p)
	case OpDataOut:
		return c.onDataOut(p)
	case OpNOPOut:
		return c.onNOPOut(p)
	case OpTaskMgmt:
		q := p.clone()
		c.admitThen(h, func() { c.onTaskMgmt(q) })
	case OpTextReq:
		q := p.clone()
		c.admitThen(h, func() { c.onText(q) })
	case OpLogoutReq:
		q := p.clone()
		c.admitThen(h, func() { c.onLogout(q) })
	case OpSNACKReq:
		c.reject(h, RejectNotSupported) // ERL 0: no SNACK
	case OpLoginReq:
		c.reject(h, RejectProtocolError)
	default:
		c.reject(h, RejectNotSupported)
	}
	return nil
}

// admitThen runs f under CmdSN ordering. Non-SCSI commands hold no window
// slot once run.
func (c *conn) admitThen(h *BHS, f func()) {
	imm := h.Immediate()
	run := func() {
		f()
		if !imm {
			c.sess.completed()
		}
	}
	if res, more := c.sess.admit(h.CmdSN(), imm, runFunc(run)); res == cmdSNRun {
		run()
		for _, r := range more {
			r.run()
		}
	}
}

func (c *conn) onNOPOut(p *PDU) error {
	hdr := p.BHS // p is reused once this returns
	h := &hdr
	if h.ITT() == ReservedTag {
		// Answer to our NOP-In ping.
		if h.TTT() == c.pingTTT.Load() {
			c.pingSentAt.Store(0)
		}
		return nil
	}
	data := append([]byte(nil), p.Data...)
	c.admitThen(h, func() {
		var r BHS
		r.SetOpcode(OpNOPIn)
		r.SetFlags(FlagFinal)
		r.SetLUN(h.LUN())
		r.SetITT(h.ITT())
		r.SetTTT(ReservedTag)
		if len(data) > c.params.MaxXmitDataSegment {
			data = data[:c.params.MaxXmitDataSegment]
		}
		c.send(&outPDU{pdu: PDU{BHS: r, Data: data}, advance: true})
	})
	return nil
}

// keepalive pings an idle initiator and drops the connection if it does
// not answer (the target side of iSCSI path-failure detection).
func (c *conn) keepalive() {
	iv, to := c.t.cfg.NopInterval, c.t.cfg.NopTimeout
	tick := c.t.cfg.Clock.NewTicker(iv / 2)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return
		case now := <-tick.C():
			if sent := c.pingSentAt.Load(); sent != 0 {
				if to > 0 && now.Sub(time.Unix(0, sent)) > to {
					c.t.log.Warn("NOP-In ping not answered; dropping connection", "initiator", c.sess.initiator)
					c.t.limits.idleTimeouts.Add(1)
					c.close("nop timeout")
					return
				}
				continue
			}
			if now.Sub(time.Unix(0, c.lastRecv.Load())) < iv {
				continue
			}
			ttt := c.allocTTT()
			c.pingTTT.Store(ttt)
			c.pingSentAt.Store(now.UnixNano())
			var r BHS
			r.SetOpcode(OpNOPIn)
			r.SetFlags(FlagFinal)
			r.SetITT(ReservedTag)
			r.SetTTT(ttt)
			c.ping(&outPDU{pdu: PDU{BHS: r}})
		}
	}
}

// ping queues a NOP-In unless the connection's queue is closed (the
// keepalive runs beside serve, which closes it) or full (one is dropped).
func (c *conn) ping(o *outPDU) {
	if ini := c.ini.Load(); ini != nil {
		if d := c.t.faults.delayOf(*ini, c.portal.RelativeID); d > 0 {
			o.due = time.Now().Add(d)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.outClosed {
		return
	}
	select {
	case c.out <- o:
	default:
	}
}

func (c *conn) allocTTT() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextTTT++
	if c.nextTTT == ReservedTag || c.nextTTT == 0 {
		c.nextTTT = 1
	}
	return c.nextTTT
}

// onLogout waits for in-flight commands, answers and closes (RFC 7143 11.14).
func (c *conn) onLogout(p *PDU) {
	h := &p.BHS
	reason := h.Flags() & 0x7f
	var r BHS
	r.SetOpcode(OpLogoutResp)
	r.SetFlags(FlagFinal)
	r.SetITT(h.ITT())
	switch reason {
	case 0, 1:
		c.waitTasksExcept(nil)
		if c.sess != nil {
			c.sess.releaseForLogout() // one connection per session: the session ends
		}
		r[2] = 0
	default:
		r[2] = 2 // connection recovery is not supported
		c.send(&outPDU{pdu: PDU{BHS: r}, advance: true})
		return
	}
	c.stopRead.Store(true)
	c.loggedOut.Store(true)
	c.send(&outPDU{pdu: PDU{BHS: r}, advance: true, closeConn: true})
}

// onText answers Text Requests: SendTargets, declarations, continuation.
func (c *conn) onText(p *PDU) {
	h := &p.BHS
	var r BHS
	r.SetOpcode(OpTextResp)
	r.SetITT(h.ITT())
	r.SetLUN(h.LUN())
	if h.TTT() != ReservedTag && h.TTT() == c.textTTT && len(c.textOut) > 0 {
		c.sendTextChunk(r)
		return
	}
	if h.Continue() {
		c.textPending = append(c.textPending, p.Data...)
		if len(c.textPending) > 64*1024 {
			c.textPending = nil
			c.reject(h, RejectProtocolError)
			return
		}
		r.SetTTT(c.allocTTT())
		c.send(&outPDU{pdu: PDU{BHS: r}, advance: true})
		return
	}
	data := append(c.textPending, p.Data...)
	c.textPending = nil
	kvs, err := ParseText(data)
	if err != nil {
		c.reject(h, RejectProtocolError)
		return
	}
	var out []KV
	for _, kv := range kvs {
		switch kv.Key {
		case "SendTargets":
			out = append(out, c.t.sendTargets(kv.Value)...)
		case "MaxRecvDataSegmentLength":
			// Declarative; renegotiation takes effect for later PDUs.
		default:
			out = append(out, KV{kv.Key, "NotUnderstood"})
		}
	}
	c.textOut = AppendText(nil, out)
	c.sendTextChunk(r)
}

func (c *conn) sendTextChunk(r BHS) {
	n := min(len(c.textOut), c.params.MaxXmitDataSegment)
	chunk := c.textOut[:n]
	c.textOut = c.textOut[n:]
	if len(c.textOut) > 0 {
		r.SetFlags(FlagContinue)
		c.textTTT = c.allocTTT()
		r.SetTTT(c.textTTT)
	} else {
		r.SetFlags(FlagFinal)
		r.SetTTT(ReservedTag)
		c.textOut, c.textTTT = nil, 0
	}
	c.send(&outPDU{pdu: PDU{BHS: r, Data: chunk}, advance: true})
}
