package iscsi

import (
	"fmt"
	"strconv"
	"strings"
)

// Login stages (RFC 7143 11.12.3: CSG/NSG).
const (
	StageSecurity    = 0
	StageOperational = 1
	StageFullFeature = 3
)

// Login status classes and details (RFC 7143 11.13.5).
type LoginStatus uint16

const (
	LoginSuccess             LoginStatus = 0x0000
	LoginInitiatorError      LoginStatus = 0x0200
	LoginAuthFailure         LoginStatus = 0x0201
	LoginAuthorizationFail   LoginStatus = 0x0202
	LoginNotFound            LoginStatus = 0x0203
	LoginUnsupportedVersion  LoginStatus = 0x0205
	LoginTooManyConnections  LoginStatus = 0x0206
	LoginMissingParameter    LoginStatus = 0x0207
	LoginCantIncludeInSess   LoginStatus = 0x0208
	LoginSessionTypeUnsupp   LoginStatus = 0x0209
	LoginSessionDoesNotExist LoginStatus = 0x020a
	LoginInvalidDuringLogin  LoginStatus = 0x020b
	LoginTargetError         LoginStatus = 0x0300
	LoginServiceUnavailable  LoginStatus = 0x0301
	LoginOutOfResources      LoginStatus = 0x0302
)

// Params are the negotiated operational parameters of a connection/session
// (RFC 7143 13). Lengths are in bytes.
type Params struct {
	HeaderDigest, DataDigest bool
	// MaxXmitDataSegment is the initiator's MaxRecvDataSegmentLength: the
	// largest data segment we may send it.
	MaxXmitDataSegment int
	// MaxRecvDataSegment is ours: the largest we accept.
	MaxRecvDataSegment  int
	MaxBurstLength      int
	FirstBurstLength    int
	InitialR2T          bool
	ImmediateData       bool
	MaxOutstandingR2T   int
	MaxConnections      int
	DataPDUInOrder      bool
	DataSequenceInOrder bool
	ErrorRecoveryLevel  int
	DefaultTime2Wait    int
	DefaultTime2Retain  int
}

// DefaultParams are the RFC 7143 defaults, used for keys not negotiated.
func DefaultParams() Params {
	return Params{
		MaxXmitDataSegment: 8192, MaxRecvDataSegment: 8192,
		MaxBurstLength: 262144, FirstBurstLength: 65536,
		InitialR2T: true, ImmediateData: true, MaxOutstandingR2T: 1, MaxConnections: 1,
		DataPDUInOrder: true, DataSequenceInOrder: true, DefaultTime2Wait: 2, DefaultTime2Retain: 20,
	}
}

// Limits are what the target is willing to accept; negotiation never goes past them.
type Limits struct {
	MaxRecvDataSegment int // declared to the initiator
	MaxBurstLength     int
	FirstBurstLength   int
	MaxOutstandingR2T  int
	// ImmediateData / InitialR2T preferences (AND / OR with the initiator's).
	ImmediateData bool
	InitialR2T    bool
}

// DefaultLimits favour throughput: 256 KiB segments, 1 MiB bursts, immediate data.
func DefaultLimits() Limits {
	return Limits{MaxRecvDataSegment: 262144, MaxBurstLength: 1 << 20, FirstBurstLength: 262144,
		MaxOutstandingR2T: 1, ImmediateData: true, InitialR2T: false}
}

// Authenticator runs one login's security stage (CHAP, RFC 7143 12.1.3).
// Step is fed the keys of each security-stage PDU once AuthMethod has been
// chosen; it returns keys to send and whether authentication is complete.
// An error status ends the login.
type Authenticator interface {
	// Methods lists the AuthMethod values it accepts, in preference order.
	Methods() []string
	// Step advances the exchange for the chosen method.
	Step(method string, in []KV) (out []KV, done bool, status LoginStatus)
}

// AuthPolicy decides per login whether the initiator must authenticate:
// Begin returns a fresh Authenticator, or nil when none is required.
type AuthPolicy interface {
	Begin(initiator string, discovery bool) Authenticator
}

// LoginConfig is what a portal tells the login state machine.
type LoginConfig struct {
	TargetName  string
	TargetAlias string
	TPGT        uint16
	Limits      Limits
	// Auth is nil for AuthMethod=None for everyone.
	Auth AuthPolicy
	// Authorize, when set, says whether an initiator may log in to this
	// target at all (an ACL); a refusal is LoginAuthorizationFail (02/02).
	Authorize func(initiator string, discovery bool) bool
}

// Login is the pure login-phase state machine of one connection. It is fed
// each Login Request and returns the response; it does no I/O.
type Login struct {
	cfg         LoginConfig
	stage       int
	Initiator   string
	Target      string
	SessionType string // "Normal" or "Discovery"
	Params      Params
	authMethod  string
	authDone    bool
	auth        Authenticator
	pending     []byte // data of a request with the C bit
	first       bool
	sentTPGT    bool
	sentMRDSL   bool
	ISID        [6]byte
	TSIH        uint16
	CID         uint16
	ITT         uint32
}

// NewLogin starts a login on a connection to cfg's portal.
func NewLogin(cfg LoginConfig) *Login {
	p := DefaultParams()
	p.MaxRecvDataSegment = cfg.Limits.MaxRecvDataSegment
	return &Login{cfg: cfg, Params: p, first: true, SessionType: "Normal"}
}

// LoginReply is one Login Response to send.
type LoginReply struct {
	Transit  bool
	CSG, NSG int
	Status   LoginStatus
	KVs      []KV
	// Done is set on the final response (success into full feature phase,
	// or a failure after which the connection closes).
	Done bool
}

// Step consumes one Login Request.
func (l *Login) Step(h *BHS, data []byte) LoginReply {
	if l.first {
		l.ISID, l.TSIH, l.CID, l.ITT = h.ISID(), h.TSIH(), h.CID(), h.ITT()
		if h[3] > 0 { // VersionMin must allow 0x00
			return l.fail(LoginUnsupportedVersion)
		}
	}
	csg, nsg := h.CSG(), h.NSG()
	if csg == 2 || csg == StageFullFeature || (h.Transit() && (nsg == 2 || nsg <= csg)) {
		return l.fail(LoginInitiatorError)
	}
	if csg < l.stage {
		return l.fail(LoginInitiatorError)
	}
	l.stage = csg
	if h.Continue() {
		if h.Transit() {
			return l.fail(LoginInitiatorError)
		}
		l.pending = append(l.pending, data...)
		if len(l.pending) > 64*1024 {
			return l.fail(LoginOutOfResources)
		}
		return LoginReply{CSG: csg, NSG: nsg}
	}
	if len(l.pending) > 0 {
		data = append(l.pending, data...)
		l.pending = nil
	}
	kvs, err := ParseText(data)
	if err != nil {
		return l.fail(LoginInitiatorError)
	}
	if l.first {
		if st := l.leading(kvs); st != LoginSuccess {
			return l.fail(st)
		}
		l.first = false
	}
	var out []KV
	var st LoginStatus
	switch csg {
	case StageSecurity:
		out, st = l.security(kvs)
	case StageOperational:
		if l.needAuth() && !l.authDone {
			return l.fail(LoginAuthFailure)
		}
		out, st = l.operational(kvs)
	}
	if st != LoginSuccess {
		return l.fail(st)
	}
	r := LoginReply{CSG: csg, NSG: nsg, KVs: l.leadingReplies(out)}
	if h.Transit() {
		if csg == StageSecurity && l.needAuth() && !l.authDone {
			r.Transit = false // keep exchanging until the method completes
		} else {
			r.Transit = true
		}
	}
	if r.Transit && nsg == StageFullFeature {
		r.KVs = append(r.KVs, l.declarations()...)
		r.Done = true
	}
	if !r.Transit {
		r.NSG = 0
	}
	return r
}

func (l *Login) fail(st LoginStatus) LoginReply {
	return LoginReply{Status: st, Done: true}
}

func (l *Login) needAuth() bool { return l.auth != nil }

// leading checks the keys the first request must carry (RFC 7143 13.11, 13.4).
func (l *Login) leading(kvs []KV) LoginStatus {
	name, ok := Lookup(kvs, "InitiatorName")
	if !ok || name == "" {
		return LoginMissingParameter
	}
	l.Initiator = name
	if st, ok := Lookup(kvs, "SessionType"); ok {
		switch st {
		case "Normal", "Discovery":
			l.SessionType = st
		default:
			return LoginSessionTypeUnsupp
		}
	}
	if l.SessionType == "Normal" {
		t, ok := Lookup(kvs, "TargetName")
		if !ok || t == "" {
			return LoginMissingParameter
		}
		if !strings.EqualFold(t, l.cfg.TargetName) {
			return LoginNotFound
		}
		l.Target = l.cfg.TargetName
	}
	disc := l.SessionType == "Discovery"
	if l.cfg.Authorize != nil && !l.cfg.Authorize(name, disc) {
		return LoginAuthorizationFail
	}
	if l.cfg.Auth != nil {
		l.auth = l.cfg.Auth.Begin(name, disc)
	}
	return LoginSuccess
}

// leadingReplies adds TargetPortalGroupTag to the first response of a normal
// session (RFC 7143 13.9) and TargetAlias when configured.
func (l *Login) leadingReplies(out []KV) []KV {
	if l.SessionType == "Normal" && !l.sentTPGT {
		l.sentTPGT = true
		out = append(out, KV{"TargetPortalGroupTag", strconv.Itoa(int(l.cfg.TPGT))})
		if l.cfg.TargetAlias != "" {
			out = append(out, KV{"TargetAlias", l.cfg.TargetAlias})
		}
	}
	return out
}

// declarations are sent once before full feature phase: our receive limit.
func (l *Login) declarations() []KV {
	if l.sentMRDSL {
		return nil
	}
	l.sentMRDSL = true
	return []KV{{"MaxRecvDataSegmentLength", strconv.Itoa(l.Params.MaxRecvDataSegment)}}
}

func (l *Login) security(kvs []KV) ([]KV, LoginStatus) {
	var out []KV
	for _, kv := range kvs {
		switch kv.Key {
		case "InitiatorName", "TargetName", "SessionType", "InitiatorAlias":
		case "AuthMethod":
			m, ok := l.chooseAuth(strings.Split(kv.Value, ","))
			if !ok {
				return nil, LoginAuthFailure
			}
			l.authMethod = m
			out = append(out, KV{"AuthMethod", m})
			if m == "None" {
				l.authDone = true
			}
		default:
			if l.authMethod != "" && l.authMethod != "None" {
				continue // the authenticator sees every key below
			}
			// Operational keys may appear in the security stage; answer them.
			o, st := l.negotiate(kv)
			if st != LoginSuccess {
				return nil, st
			}
			out = append(out, o...)
		}
	}
	if l.authMethod != "" && l.authMethod != "None" && !l.authDone {
		o, done, st := l.auth.Step(l.authMethod, kvs)
		if st != LoginSuccess {
			return nil, st
		}
		l.authDone = done
		out = append(out, o...)
	}
	if l.authMethod == "" && l.needAuth() {
		return nil, LoginAuthFailure
	}
	if !l.needAuth() {
		l.authDone = true
	}
	return out, LoginSuccess
}

func (l *Login) chooseAuth(offered []string) (string, bool) {
	if !l.needAuth() {
		for _, m := range offered {
			if m == "None" {
				return "None", true
			}
		}
		return "", false
	}
	for _, want := range l.auth.Methods() {
		for _, m := range offered {
			if m == want {
				return m, true
			}
		}
	}
	return "", false
}

func (l *Login) operational(kvs []KV) ([]KV, LoginStatus) {
	var out []KV
	for _, kv := range kvs {
		o, st := l.negotiate(kv)
		if st != LoginSuccess {
			return nil, st
		}
		out = append(out, o...)
	}
	return out, LoginSuccess
}

// sessionOnlyKeys are irrelevant in a discovery session (RFC 7143 13 table).
var sessionOnlyKeys = map[string]bool{
	"MaxConnections": true, "InitialR2T": true, "ImmediateData": true, "MaxBurstLength": true,
	"FirstBurstLength": true, "MaxOutstandingR2T": true, "DataPDUInOrder": true,
	"DataSequenceInOrder": true,
}

// negotiate answers one key. It returns the reply pairs (none for
// declarative keys that need no answer).
func (l *Login) negotiate(kv KV) ([]KV, LoginStatus) {
	p := &l.Params
	lim := l.cfg.Limits
	if l.SessionType == "Discovery" && sessionOnlyKeys[kv.Key] {
		return []KV{{kv.Key, "Irrelevant"}}, LoginSuccess
	}
	num := func(max int) (int, bool) {
		n, err := strconv.Atoi(kv.Value)
		if err != nil || n < 0 || n > max {
			return 0, false
		}
		return n, true
	}
	reject := []KV{{kv.Key, "Reject"}}
	switch kv.Key {
	case "InitiatorName", "TargetName", "SessionType", "InitiatorAlias":
		return nil, LoginSuccess
	case "AuthMethod":
		// Offered outside the security stage: only None can be accepted.
		if l.needAuth() {
			return nil, LoginAuthFailure
		}
		return []KV{{"AuthMethod", "None"}}, LoginSuccess
	case "HeaderDigest", "DataDigest":
		choice := ""
		for _, v := range strings.Split(kv.Value, ",") {
			if v == "CRC32C" || v == "None" {
				choice = v
				break
			}
		}
		if choice == "" {
			return reject, LoginSuccess
		}
		on := choice == "CRC32C"
		if kv.Key == "HeaderDigest" {
			p.HeaderDigest = on
		} else {
			p.DataDigest = on
		}
		return []KV{{kv.Key, choice}}, LoginSuccess
	case "MaxRecvDataSegmentLength":
		n, ok := num(1<<24 - 1)
		if !ok || n < 512 {
			return reject, LoginSuccess
		}
		p.MaxXmitDataSegment = n
		return nil, LoginSuccess
	case "MaxBurstLength", "FirstBurstLength":
		n, ok := num(1<<24 - 1)
		if !ok || n < 512 {
			return reject, LoginSuccess
		}
		limit := lim.MaxBurstLength
		if kv.Key == "FirstBurstLength" {
			limit = lim.FirstBurstLength
		}
		n = min(n, limit)
		if kv.Key == "MaxBurstLength" {
			p.MaxBurstLength = n
		} else {
			p.FirstBurstLength = n
		}
		return []KV{{kv.Key, strconv.Itoa(n)}}, LoginSuccess
	case "MaxOutstandingR2T", "MaxConnections":
		n, ok := num(65535)
		if !ok || n < 1 {
			return reject, LoginSuccess
		}
		if kv.Key == "MaxOutstandingR2T" {
			n = min(n, lim.MaxOutstandingR2T)
			p.MaxOutstandingR2T = n
		} else {
			n = 1 // one connection per session (ERL 0, no MC/S)
			p.MaxConnections = n
		}
		return []KV{{kv.Key, strconv.Itoa(n)}}, LoginSuccess
	case "DefaultTime2Wait", "DefaultTime2Retain":
		n, ok := num(3600)
		if !ok {
			return reject, LoginSuccess
		}
		if kv.Key == "DefaultTime2Wait" {
			p.DefaultTime2Wait = n // max(offered, 0)
		} else {
			n = 0 // ERL 0 keeps no connection allegiance
			p.DefaultTime2Retain = n
		}
		return []KV{{kv.Key, strconv.Itoa(n)}}, LoginSuccess
	case "ErrorRecoveryLevel":
		if _, ok := num(2); !ok {
			return reject, LoginSuccess
		}
		p.ErrorRecoveryLevel = 0
		return []KV{{kv.Key, "0"}}, LoginSuccess
	case "InitialR2T", "ImmediateData", "DataPDUInOrder", "DataSequenceInOrder", "IFMarker", "OFMarker":
		v, ok := yesNo(kv.Value)
		if !ok {
			return reject, LoginSuccess
		}
		var res bool
		switch kv.Key {
		case "InitialR2T": // OR
			res = v || lim.InitialR2T
			p.InitialR2T = res
		case "ImmediateData": // AND
			res = v && lim.ImmediateData
			p.ImmediateData = res
		case "DataPDUInOrder", "DataSequenceInOrder": // OR; we require in-order
			res = true
			if kv.Key == "DataPDUInOrder" {
				p.DataPDUInOrder = res
			} else {
				p.DataSequenceInOrder = res
			}
		default: // markers: AND, never supported
			res = false
		}
		return []KV{{kv.Key, boolKey(res)}}, LoginSuccess
	case "OFMarkInt", "IFMarkInt":
		return []KV{{kv.Key, "Irrelevant"}}, LoginSuccess
	case "TargetAlias", "TargetAddress", "TargetPortalGroupTag":
		// Target-declared keys may not be sent by an initiator.
		return nil, LoginInitiatorError
	}
	return []KV{{kv.Key, "NotUnderstood"}}, LoginSuccess
}

func yesNo(s string) (bool, bool) {
	switch s {
	case "Yes":
		return true, true
	case "No":
		return false, true
	}
	return false, false
}

func boolKey(b bool) string {
	if b {
		return "Yes"
	}
	return "No"
}

// String summarises the negotiated parameters for logs.
func (p Params) String() string {
	return fmt.Sprintf("hd=%v dd=%v mrdsl=%d/%d mbl=%d fbl=%d ir2t=%v imm=%v",
		p.HeaderDigest, p.DataDigest, p.MaxRecvDataSegment, p.MaxXmitDataSegment,
		p.MaxBurstLength, p.FirstBurstLength, p.InitialR2T, p.ImmediateData)
}
