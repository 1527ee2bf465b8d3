// Package initiator is a small iSCSI initiator (RFC 7143) in Go: login with
// negotiation, discovery, SCSI commands with immediate data and R2T-driven
// Data-Out, NOP-Out pings, task management and logout. A command its
// caller stopped waiting for fails with Abandoned, and EndTask ends it at
// the target (ABORT TASK, LOGICAL UNIT RESET, then the session dropped)
// before the caller may retry it elsewhere. It is used by the tests and
// benchmarks and grows into the emulated host stacks of the lab.
// It shares the PDU codec of pkg/iscsi and imports nothing of the target side.
package initiator

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/iscsi"
)

// Config says how to log in.
type Config struct {
	Addr          string // host:port of a portal
	Target        string // target IQN (empty for discovery)
	InitiatorName string
	ISID          [6]byte
	HeaderDigest  bool
	DataDigest    bool
	// MaxRecvDataSegment is what we accept (declared to the target).
	MaxRecvDataSegment int
	Discovery          bool
	DialTimeout        time.Duration
	// CHAP, when set, authenticates with CHAP: Initiator is what this
	// initiator proves; a set Target asks for mutual CHAP and the login
	// fails unless the target proves Target.Secret.
	CHAP *iscsi.CHAPCreds
	// CHAPAlgorithms is the CHAP_A list offered (default "5", MD5).
	CHAPAlgorithms string
	// NopInterval and NopTimeout are open-iscsi's connection ping
	// (noop_out_interval, noop_out_timeout): when nothing has arrived
	// for NopInterval a NOP-Out is sent, and when no answer comes within
	// NopTimeout the connection is declared dead (ErrNopTimeout). Zero
	// disables. It is how a host learns of a target that went silent.
	NopInterval, NopTimeout time.Duration
	// Dial connects to Addr (nil: a TCP dial bounded by DialTimeout;
	// tests pass an in-memory network's, pkg/memnet).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// ErrNopTimeout ends a session whose NOP-Out ping went unanswered.
var ErrNopTimeout = errors.New("initiator: NOP-Out timed out (the target is silent)")

// Result is a completed SCSI command.
type Result struct {
	Status   byte
	Sense    []byte
	Data     []byte
	Overflow bool
	Under    bool
	Residual uint32
}

// Session is one logged-in iSCSI session with a single connection.
type Session struct {
	cfg    Config
	nc     net.Conn
	br     *bufio.Reader
	params iscsi.Params
	TPGT   uint16
	TSIH   uint16

	wmu sync.Mutex // serialises writes to nc

	mu        sync.Mutex
	cond      *sync.Cond
	itt       uint32
	cmdSN     uint32
	maxCmdSN  uint32
	expStatSN uint32
	calls     map[uint32]*call
	err       error
	done      chan struct{}
	// lastRecv is when a PDU last arrived (unix nanoseconds).
	lastRecv atomic.Int64
}

type call struct {
	res     Result
	dataOut []byte
	edtl    int
	lun     [8]byte
	ch      chan struct{}
	kind    iscsi.Opcode
	resp    *iscsi.PDU
}

// ErrClosed is returned after the session has ended.
var ErrClosed = errors.New("initiator: session closed")

// Dial connects and logs in.
func Dial(ctx context.Context, cfg Config) (*Session, error) {
	if cfg.InitiatorName == "" {
		cfg.InitiatorName = "iqn.2026-11.org.aluad:initiator"
	}
	if cfg.ISID == ([6]byte{}) {
		cfg.ISID = [6]byte{0x80, 0, 0, 0, 0, 1}
	}
	if cfg.MaxRecvDataSegment == 0 {
		cfg.MaxRecvDataSegment = 262144
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.Dial == nil {
		d := net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	nc, err := cfg.Dial(dctx, "tcp", cfg.Addr)
	cancel()
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	s := &Session{cfg: cfg, nc: nc, br: bufio.NewReaderSize(nc, 256*1024), calls: map[uint32]*call{},
		done: make(chan struct{}), cmdSN: 1}
	s.cond = sync.NewCond(&s.mu)
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	} else {
		nc.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if err := s.login(); err != nil {
		nc.Close()
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	s.lastRecv.Store(time.Now().UnixNano())
	go s.readLoop()
	if cfg.NopInterval > 0 && cfg.NopTimeout > 0 {
		go s.keepalive()
	}
	return s, nil
}

// keepalive pings the target when nothing has arrived for NopInterval
// and ends the session when a ping goes unanswered for NopTimeout.
func (s *Session) keepalive() {
	tick := min(s.cfg.NopInterval, s.cfg.NopTimeout) / 4
	t := time.NewTicker(max(tick, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, s.lastRecv.Load())) < s.cfg.NopInterval {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.NopTimeout)
		_, err := s.Ping(ctx, nil)
		cancel()
		if err != nil && ctx.Err() != nil {
			s.fail(ErrNopTimeout)
			return
		}
	}
}

// LoginError is a login rejected by the target.
type LoginError struct{ Class, Detail byte }

func (e *LoginError) Error() string {
	return fmt.Sprintf("initiator: login rejected, status class 0x%02x detail 0x%02x", e.Class, e.Detail)
}

// ErrMutualCHAP is returned when the target fails to prove the mutual
// CHAP secret.
var ErrMutualCHAP = errors.New("initiator: the target failed mutual CHAP authentication")

func (s *Session) login() error {
	st := "Normal"
	if s.cfg.Discovery {
		st = "Discovery"
	}
	digest := func(on bool) string {
		if on {
			return "CRC32C,None"
		}
		return "None"
	}
	lead := []iscsi.KV{{Key: "InitiatorName", Value: s.cfg.InitiatorName}, {Key: "SessionType", Value: st}}
	if !s.cfg.Discovery {
		lead = append(lead, iscsi.KV{Key: "TargetName", Value: s.cfg.Target})
	}
	s.params = iscsi.DefaultParams()
	s.params.MaxRecvDataSegment = s.cfg.MaxRecvDataSegment
	if s.cfg.CHAP != nil {
		if err := s.chap(lead); err != nil {
			return err
		}
	} else if _, err := s.loginStep(0, 1, true, append(lead, iscsi.KV{Key: "AuthMethod", Value: "None"})); err != nil {
		return err
	}
	_, err := s.loginStep(1, 3, true, []iscsi.KV{{Key: "HeaderDigest", Value: digest(s.cfg.HeaderDigest)},
		{Key: "DataDigest", Value: digest(s.cfg.DataDigest)},
		{Key: "MaxRecvDataSegmentLength", Value: strconv.Itoa(s.cfg.MaxRecvDataSegment)},
		{Key: "InitialR2T", Value: "Yes"}, {Key: "ImmediateData", Value: "Yes"},
		{Key: "MaxBurstLength", Value: "1048576"}, {Key: "FirstBurstLength", Value: "262144"},
		{Key: "MaxConnections", Value: "1"}, {Key: "ErrorRecoveryLevel", Value: "0"}})
	return err
}

// chap runs the security stage with CHAP (RFC 7143 12.1.3).
func (s *Session) chap(lead []iscsi.KV) error {
	c := s.cfg.CHAP
	if _, err := s.loginStep(0, 1, false, append(lead, iscsi.KV{Key: "AuthMethod", Value: "CHAP"})); err != nil {
		return err
	}
	algs := s.cfg.CHAPAlgorithms
	if algs == "" {
		algs = "5"
	}
	kvs, err := s.loginStep(0, 1, false, []iscsi.KV{{Key: "CHAP_A", Value: algs}})
	if err != nil {
		return err
	}
	aS, _ := iscsi.Lookup(kvs, "CHAP_A")
	iS, _ := iscsi.Lookup(kvs, "CHAP_I")
	cS, _ := iscsi.Lookup(kvs, "CHAP_C")
	alg, err1 := strconv.Atoi(aS)
	id, err2 := strconv.Atoi(iS)
	ch, err3 := iscsi.DecodeBinary(cS)
	if err1 != nil || err2 != nil || err3 != nil || id < 0 || id > 255 || iscsi.CHAPResponse(alg, 0, "", nil) == nil {
		return fmt.Errorf("initiator: bad CHAP challenge from the target (CHAP_A=%q CHAP_I=%q)", aS, iS)
	}
	out := []iscsi.KV{{Key: "CHAP_N", Value: c.Initiator.User},
		{Key: "CHAP_R", Value: "0x" + hex.EncodeToString(iscsi.CHAPResponse(alg, byte(id), c.Initiator.Secret, ch))}}
	var myID byte
	var myCh []byte
	if c.Target.Set() {
		buf := make([]byte, 17)
		if _, err := rand.Read(buf); err != nil {
			return err
		}
		myID, myCh = buf[0], buf[1:]
		out = append(out, iscsi.KV{Key: "CHAP_I", Value: strconv.Itoa(int(myID))},
			iscsi.KV{Key: "CHAP_C", Value: "0x" + hex.EncodeToString(myCh)})
	}
	kvs, err = s.loginStep(0, 1, true, out)
	if err != nil || !c.Target.Set() {
		return err
	}
	n, _ := iscsi.Lookup(kvs, "CHAP_N")
	rS, _ := iscsi.Lookup(kvs, "CHAP_R")
	r, err := iscsi.DecodeBinary(rS)
	want := iscsi.CHAPResponse(alg, myID, c.Target.Secret, myCh)
	if err != nil || n != c.Target.User || subtle.ConstantTimeCompare(r, want) != 1 {
		return ErrMutualCHAP
	}
	return nil
}

// loginStep sends one Login Request and reads its response; with transit
// it insists the target moves on to nsg.
func (s *Session) loginStep(csg, nsg int, transit bool, kvs []iscsi.KV) ([]iscsi.KV, error) {
	var h iscsi.BHS
	h.SetOpcode(iscsi.OpLoginReq)
	h[0] |= iscsi.FlagImmediate
	f := byte(csg<<2 | nsg)
	if transit {
		f |= iscsi.FlagTransit
	}
	h.SetFlags(f)
	h.SetISID(s.cfg.ISID)
	h.SetTSIH(s.TSIH)
	h.SetITT(s.itt)
	h.SetCmdSN(s.cmdSN)
	h.SetExpStatSN(s.expStatSN)
	p := &iscsi.PDU{BHS: h, Data: iscsi.AppendText(nil, kvs)}
	if _, err := s.nc.Write(iscsi.AppendPDU(nil, p, iscsi.Digests{})); err != nil {
		return nil, err
	}
	r, err := iscsi.ReadPDU(s.br, iscsi.Digests{}, 1<<20, nil)
	if err != nil {
		return nil, err
	}
	if r.BHS.Opcode() != iscsi.OpLoginResp {
		return nil, fmt.Errorf("initiator: expected a login response, got %v", r.BHS.Opcode())
	}
	if c, d := r.BHS[36], r.BHS[37]; c != 0 {
		return nil, &LoginError{c, d}
	}
	s.expStatSN = r.BHS.StatSN() + 1
	s.maxCmdSN = r.BHS.MaxCmdSN()
	s.TSIH = r.BHS.TSIH()
	out, err := iscsi.ParseText(r.Data)
	if err != nil {
		return nil, err
	}
	s.apply(out)
	if transit && !r.BHS.Transit() {
		return nil, fmt.Errorf("initiator: target did not allow the stage transition")
	}
	return out, nil
}

func (s *Session) apply(kvs []iscsi.KV) {
	for _, kv := range kvs {
		n, _ := strconv.Atoi(kv.Value)
		switch kv.Key {
		case "HeaderDigest":
			s.params.HeaderDigest = kv.Value == "CRC32C"
		case "DataDigest":
			s.params.DataDigest = kv.Value == "CRC32C"
		case "MaxRecvDataSegmentLength":
			s.params.MaxXmitDataSegment = n
		case "MaxBurstLength":
			s.params.MaxBurstLength = n
		case "FirstBurstLength":
			s.params.FirstBurstLength = n
		case "ImmediateData":
			s.params.ImmediateData = kv.Value == "Yes"
		case "InitialR2T":
			s.params.InitialR2T = kv.Value == "Yes"
		case "TargetPortalGroupTag":
			s.TPGT = uint16(n)
		}
	}
}

// Params returns the negotiated parameters.
func (s *Session) Params() iscsi.Params { return s.params }

func (s *Session) digests() iscsi.Digests {
	return iscsi.Digests{Header: s.params.HeaderDigest, Data: s.params.DataDigest}
}

func (s *Session) write(p *iscsi.PDU) error {
	b := iscsi.AppendPDU(make([]byte, 0, iscsi.BHSLen+8+len(p.Data)+8), p, s.digests())
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.nc.Write(b)
	return err
}

// begin allocates an ITT and, for a non-immediate command, a CmdSN,
// waiting for room in the target's window.
func (s *Session) begin(ctx context.Context, c *call, immediate bool) (itt, cmdSN uint32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !immediate && iscsi.SerialLess(s.maxCmdSN, s.cmdSN) && s.err == nil {
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		s.cond.Wait()
	}
	if s.err != nil {
		return 0, 0, s.err
	}
	s.itt++
	if s.itt == iscsi.ReservedTag {
		s.itt = 1
	}
	itt, cmdSN = s.itt, s.cmdSN
	if !immediate {
		s.cmdSN++
	}
	s.calls[itt] = c
	return itt, cmdSN, nil
}

// Execute sends one SCSI command. dataOut is written (W bit) when non-nil;
// dataInLen > 0 sets the R bit with that expected length.
func (s *Session) Execute(ctx context.Context, lun uint64, cdb []byte, dataOut []byte, dataInLen int) (*Result, error) {
	if len(cdb) > 16 {
		return nil, errors.New("initiator: CDBs longer than 16 bytes are not supported")
	}
	c := &call{ch: make(chan struct{}), dataOut: dataOut, lun: iscsi.EncodeLUN(lun), kind: iscsi.OpSCSICmd}
	edtl := dataInLen
	if dataOut != nil {
		edtl = len(dataOut)
	}
	c.edtl = edtl
	if dataInLen > 0 {
		c.res.Data = make([]byte, dataInLen)
	}
	itt, cmdSN, err := s.begin(ctx, c, false)
	if err != nil {
		return nil, err
	}
	var h iscsi.BHS
	h.SetOpcode(iscsi.OpSCSICmd)
	f := byte(iscsi.FlagFinal | 0x01) // SIMPLE task attribute
	if dataOut != nil {
		f |= iscsi.FlagWrite
	}
	if dataInLen > 0 {
		f |= iscsi.FlagRead
	}
	h.SetFlags(f)
	h.SetLUN(c.lun)
	h.SetITT(itt)
	h.SetExpectedDataLen(uint32(edtl))
	h.SetCmdSN(cmdSN)
	s.mu.Lock()
	h.SetExpStatSN(s.expStatSN)
	s.mu.Unlock()
	copy(h.CDB(), cdb)
	p := &iscsi.PDU{BHS: h}
	if dataOut != nil && s.params.ImmediateData {
		n := min(len(dataOut), s.params.FirstBurstLength, s.params.MaxXmitDataSegment)
		p.Data = dataOut[:n]
	}
	if err := s.write(p); err != nil {
		s.fail(err)
	}
	r, err := s.wait(ctx, itt, c)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, &Abandoned{Err: err, LUN: lun, Tag: itt, CmdSN: cmdSN}
	}
	return r, err
}

func (s *Session) wait(ctx context.Context, itt uint32, c *call) (*Result, error) {
	select {
	case <-c.ch:
		return &c.res, nil
	case <-s.done:
		select { // the response may have arrived just before the connection closed
		case <-c.ch:
			return &c.res, nil
		default:
		}
		return nil, s.sessionErr()
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.calls, itt)
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (s *Session) sessionErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return ErrClosed
}

func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		close(s.done)
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.nc.Close()
}

// Close drops the connection without logging out.
func (s *Session) Close() error {
	s.fail(ErrClosed)
	return nil
}

// Done is closed when the session ends.
func (s *Session) Done() <-chan struct{} { return s.done }

func (s *Session) readLoop() {
	for {
		p, err := iscsi.ReadPDU(s.br, s.digests(), 16<<20, nil)
		if err != nil {
			s.fail(err)
			return
		}
		s.lastRecv.Store(time.Now().UnixNano())
		s.handle(p)
	}
}

func (s *Session) handle(p *iscsi.PDU) {
	h := &p.BHS
	s.mu.Lock()
	if op := h.Opcode(); op != iscsi.OpDataIn || h.Flags()&iscsi.FlagStatus != 0 {
		if op != iscsi.OpR2T && op != iscsi.OpDataIn || h.Flags()&iscsi.FlagStatus != 0 {
			if iscsi.SerialLE(s.expStatSN, h.StatSN()) && (op != iscsi.OpNOPIn || h.ITT() != iscsi.ReservedTag) {
				s.expStatSN = h.StatSN() + 1
			}
		}
	}
	if op := h.Opcode(); op != iscsi.OpDataIn || h.Flags()&iscsi.FlagStatus != 0 {
		if max := h.MaxCmdSN(); iscsi.SerialLess(s.maxCmdSN, max) {
			s.maxCmdSN = max
			s.cond.Broadcast()
		}
	}
	c := s.calls[h.ITT()]
	s.mu.Unlock()
	switch h.Opcode() {
	case iscsi.OpNOPIn:
		if h.ITT() == iscsi.ReservedTag {
			s.answerPing(h)
			return
		}
		s.complete(h.ITT(), c, p)
	case iscsi.OpDataIn:
		if c == nil {
			return
		}
		off := int(h.BufferOffset())
		if off+len(p.Data) <= len(c.res.Data) {
			copy(c.res.Data[off:], p.Data)
		}
		if h.Flags()&iscsi.FlagStatus != 0 {
			c.res.Status = h[3]
			c.res.Overflow = h.Flags()&iscsi.FlagOverflow != 0
			c.res.Under = h.Flags()&iscsi.FlagUnderflow != 0
			c.res.Residual = h.Word44()
			s.complete(h.ITT(), c, nil)
		}
	case iscsi.OpSCSIResp:
		if c == nil {
			return
		}
		c.res.Status = h[3]
		c.res.Overflow = h.Flags()&iscsi.FlagOverflow != 0
		c.res.Under = h.Flags()&iscsi.FlagUnderflow != 0
		c.res.Residual = h.Word44()
		if len(p.Data) >= 2 {
			n := int(binary.BigEndian.Uint16(p.Data))
			if 2+n <= len(p.Data) {
				c.res.Sense = append([]byte(nil), p.Data[2:2+n]...)
			}
		}
		s.complete(h.ITT(), c, nil)
	case iscsi.OpR2T:
		if c != nil {
			go s.sendData(h.ITT(), c, h.TTT(), int(h.BufferOffset()), int(h.Word44()))
		}
	case iscsi.OpTaskResp, iscsi.OpLogoutResp, iscsi.OpTextResp:
		s.complete(h.ITT(), c, p)
	case iscsi.OpReject:
		if len(p.Data) >= iscsi.BHSLen {
			rej, _ := iscsi.ParseBHS(p.Data)
			s.mu.Lock()
			rc := s.calls[rej.ITT()]
			s.mu.Unlock()
			if rc != nil {
				rc.res.Status = 0xff
				s.complete(rej.ITT(), rc, p)
			}
		}
	case iscsi.OpAsync:
		if h[36] == 1 { // target requests logout
			go s.Logout(context.Background())
		}
	}
}

func (s *Session) complete(itt uint32, c *call, p *iscsi.PDU) {
	if c == nil {
		return
	}
	if c.res.Under && c.res.Data != nil && int(c.res.Residual) <= len(c.res.Data) {
		c.res.Data = c.res.Data[:len(c.res.Data)-int(c.res.Residual)]
	}
	s.mu.Lock()
	if s.calls[itt] != c {
		s.mu.Unlock()
		return
	}
	delete(s.calls, itt)
	s.mu.Unlock()
	if p != nil {
		c.resp = p
	}
	close(c.ch)
}

// sendData answers an R2T with Data-Out PDUs.
func (s *Session) sendData(itt uint32, c *call, ttt uint32, off, n int) {
	seg := s.params.MaxXmitDataSegment
	var sn uint32
	for done := 0; done < n; {
		l := min(seg, n-done)
		var h iscsi.BHS
		h.SetOpcode(iscsi.OpDataOut)
		if done+l == n {
			h.SetFlags(iscsi.FlagFinal)
		}
		h.SetLUN(c.lun)
		h.SetITT(itt)
		h.SetTTT(ttt)
		s.mu.Lock()
		h.SetExpStatSN(s.expStatSN)
		s.mu.Unlock()
		h.SetDataSN(sn)
		h.SetBufferOffset(uint32(off + done))
		end := min(off+done+l, len(c.dataOut))
		start := min(off+done, end)
		if err := s.write(&iscsi.PDU{BHS: h, Data: c.dataOut[start:end]}); err != nil {
			s.fail(err)
			return
		}
		sn++
		done += l
	}
}

func (s *Session) answerPing(in *iscsi.BHS) {
	var h iscsi.BHS
	h.SetOpcode(iscsi.OpNOPOut)
	h[0] |= iscsi.FlagImmediate
	h.SetFlags(iscsi.FlagFinal)
	h.SetITT(iscsi.ReservedTag)
	h.SetTTT(in.TTT())
	s.mu.Lock()
	h.SetCmdSN(s.cmdSN)
	h.SetExpStatSN(s.expStatSN)
	s.mu.Unlock()
	s.write(&iscsi.PDU{BHS: h})
}

// simple sends a non-SCSI request and waits for its response PDU.
func (s *Session) simple(ctx context.Context, op iscsi.Opcode, flags byte, immediate bool, fill func(h *iscsi.BHS), data []byte) (*iscsi.PDU, error) {
	c := &call{ch: make(chan struct{}), kind: op}
	itt, cmdSN, err := s.begin(ctx, c, immediate)
	if err != nil {
		return nil, err
	}
	var h iscsi.BHS
	h.SetOpcode(op)
	if immediate {
		h[0] |= iscsi.FlagImmediate
	}
	h.SetFlags(flags)
	h.SetITT(itt)
	h.SetCmdSN(cmdSN)
	s.mu.Lock()
	h.SetExpStatSN(s.expStatSN)
	s.mu.Unlock()
	if fill != nil {
		fill(&h)
	}
	if err := s.write(&iscsi.PDU{BHS: h, Data: data}); err != nil {
		s.fail(err)
		return nil, err
	}
	if _, err := s.wait(ctx, itt, c); err != nil {
		return nil, err
	}
	if c.resp == nil {
		return nil, errors.New("initiator: no response PDU")
	}
	if c.resp.BHS.Opcode() == iscsi.OpReject {
		return nil, fmt.Errorf("initiator: target rejected %v (reason 0x%02x)", op, c.resp.BHS[2])
	}
	return c.resp, nil
}

// Ping sends a NOP-Out and waits for the NOP-In; it returns the round trip.
func (s *Session) Ping(ctx context.Context, payload []byte) (time.Duration, error) {
	t0 := time.Now()
	r, err := s.simple(ctx, iscsi.OpNOPOut, iscsi.FlagFinal, true, func(h *iscsi.BHS) { h.SetTTT(iscsi.ReservedTag) }, payload)
	if err != nil {
		return 0, err
	}
	if string(r.Data) != string(payload) {
		return 0, errors.New("initiator: NOP-In did not echo the ping data")
	}
	return time.Since(t0), nil
}

// TMF functions.
const (
	TMFAbortTask       = 1
	TMFAbortTaskSet    = 2
	TMFLUNReset        = 5
	TMFTargetWarmReset = 6
	TMFTargetColdReset = 7
)

// TaskMgmt issues a task management function and returns the response code.
func (s *Session) TaskMgmt(ctx context.Context, fn byte, lun uint64, refTask uint32) (byte, error) {
	return s.taskMgmt(ctx, fn, lun, refTask, 0)
}

// taskMgmt sends a TMF request; refCmdSN is the referenced task's CmdSN
// (ABORT TASK, RFC 7143 11.5.4).
func (s *Session) taskMgmt(ctx context.Context, fn byte, lun uint64, refTask, refCmdSN uint32) (byte, error) {
	r, err := s.simple(ctx, iscsi.OpTaskMgmt, iscsi.FlagFinal|fn, true, func(h *iscsi.BHS) {
		h.SetLUN(iscsi.EncodeLUN(lun))
		h.SetTTT(refTask) // Referenced Task Tag
		binary.BigEndian.PutUint32(h[32:], refCmdSN)
	}, nil)
	if err != nil {
		return 0, err
	}
	return r.BHS[2], nil
}

// SendTargets asks for the target list (discovery or normal session).
func (s *Session) SendTargets(ctx context.Context) ([]iscsi.KV, error) {
	var all []byte
	ttt := uint32(iscsi.ReservedTag)
	data := iscsi.AppendText(nil, []iscsi.KV{{Key: "SendTargets", Value: "All"}})
	for {
		t := ttt
		r, err := s.simple(ctx, iscsi.OpTextReq, iscsi.FlagFinal, false, func(h *iscsi.BHS) { h.SetTTT(t) }, data)
		if err != nil {
			return nil, err
		}
		all = append(all, r.Data...)
		if r.BHS.Flags()&iscsi.FlagContinue == 0 {
			break
		}
		ttt, data = r.BHS.TTT(), nil
	}
	return iscsi.ParseText(all)
}

// Logout closes the session cleanly.
func (s *Session) Logout(ctx context.Context) error {
	_, err := s.simple(ctx, iscsi.OpLogoutReq, iscsi.FlagFinal, true, nil, nil)
	s.fail(ErrClosed)
	return err
}
