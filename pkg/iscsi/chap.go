package iscsi

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
	"strings"
)

// CHAP (RFC 7143 12.1.3, RFC 1994) on the target side.
//
// The exchange, one security-stage PDU each way per step:
//
//	I: AuthMethod=CHAP,None          T: AuthMethod=CHAP
//	I: CHAP_A=<A1,A2...>             T: CHAP_A=<A> CHAP_I=<I> CHAP_C=<C>
//	I: CHAP_N=<N> CHAP_R=<R>         (one-way: T checks R = H(I|secret|C))
//	   [CHAP_I=<I'> CHAP_C=<C'>]     T: CHAP_N=<N'> CHAP_R=<R'> (mutual)
//
// Every failure is the same LoginAuthFailure (status class 02, detail 01):
// a wrong name, a wrong response, a missing key, a reflected challenge or a
// mutual request the target has no secret for all look alike to the
// initiator, so a failed login reveals nothing about which part was wrong.

// CHAP algorithm numbers (IANA "PPP Authentication Algorithms"; RFC 7143
// 12.1.3 names MD5, later initiators offer the SHA family first).
const (
	CHAPMD5     = 5
	CHAPSHA1    = 6
	CHAPSHA256  = 7
	CHAPSHA3256 = 8
)

// chapHash returns the digest for an algorithm number.
func chapHash(a int) (func() hash.Hash, bool) {
	switch a {
	case CHAPMD5:
		return md5.New, true
	case CHAPSHA1:
		return sha1.New, true
	case CHAPSHA256:
		return sha256.New, true
	case CHAPSHA3256:
		return func() hash.Hash { return sha3.New256() }, true
	}
	return nil, false
}

// CHAPResponse computes H(id | secret | challenge) (RFC 1994 4.1).
func CHAPResponse(alg int, id byte, secret string, challenge []byte) []byte {
	newH, ok := chapHash(alg)
	if !ok {
		return nil
	}
	h := newH()
	h.Write([]byte{id})
	h.Write([]byte(secret))
	h.Write(challenge)
	return h.Sum(nil)
}

// CHAPSecret is one direction's credentials: the CHAP name and secret.
type CHAPSecret struct {
	User   string
	Secret string
}

// Set reports whether both halves are present.
func (s CHAPSecret) Set() bool { return s.User != "" && s.Secret != "" }

// CHAPCreds are what one login must satisfy: Initiator is what the
// initiator must prove it knows; Target, when set, lets an initiator ask
// for mutual CHAP (the target proves it knows Target.Secret).
type CHAPCreds struct {
	Initiator CHAPSecret
	Target    CHAPSecret
}

// CHAPPolicy is an AuthPolicy that demands CHAP from the initiators Lookup
// returns credentials for; the others log in without authentication.
type CHAPPolicy struct {
	// Lookup returns the credentials an initiator must present, or false
	// when it needs none.
	Lookup func(initiator string, discovery bool) (CHAPCreds, bool)
	// Rand feeds challenges and identifiers (nil: crypto/rand).
	Rand io.Reader
	// Algorithms are accepted in the initiator's order of preference
	// (nil: SHA3-256, SHA-256, SHA-1 and MD5).
	Algorithms []int
}

// Begin implements AuthPolicy.
func (p CHAPPolicy) Begin(initiator string, discovery bool) Authenticator {
	c, ok := p.Lookup(initiator, discovery)
	if !ok {
		return nil
	}
	r := p.Rand
	if r == nil {
		r = rand.Reader
	}
	algs := p.Algorithms
	if algs == nil {
		algs = []int{CHAPSHA3256, CHAPSHA256, CHAPSHA1, CHAPMD5}
	}
	return &chapAuth{creds: c, rand: r, algs: algs}
}

// chapChallengeLen is the length of the target's challenge.
const chapChallengeLen = 16

// chapMaxChallenge bounds an initiator's challenge (its binary value).
const chapMaxChallenge = 1024

// chapAuth is one login's CHAP exchange.
type chapAuth struct {
	creds     CHAPCreds
	rand      io.Reader
	algs      []int
	step      int
	alg       int
	id        byte
	challenge []byte
}

func (c *chapAuth) Methods() []string { return []string{"CHAP"} }

func (c *chapAuth) Step(method string, in []KV) ([]KV, bool, LoginStatus) {
	switch c.step {
	case 0:
		v, ok := Lookup(in, "CHAP_A")
		if !ok {
			// The PDU that chose the method may carry nothing more.
			if hasCHAPKey(in) {
				return nil, false, LoginAuthFailure
			}
			return nil, false, LoginSuccess
		}
		return c.offer(v)
	case 1:
		return c.verify(in)
	}
	return nil, false, LoginAuthFailure
}

func hasCHAPKey(in []KV) bool {
	for _, kv := range in {
		if strings.HasPrefix(kv.Key, "CHAP_") {
			return true
		}
	}
	return false
}

// offer picks the first algorithm of the initiator's list that is
// accepted and sends the challenge.
func (c *chapAuth) offer(list string) ([]KV, bool, LoginStatus) {
	for _, s := range strings.Split(list, ",") {
		a, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		for _, ok := range c.algs {
			if a == ok {
				c.alg = a
			}
		}
		if c.alg != 0 {
			break
		}
	}
	if c.alg == 0 {
		return nil, false, LoginAuthFailure
	}
	buf := make([]byte, 1+chapChallengeLen)
	if _, err := io.ReadFull(c.rand, buf); err != nil {
		return nil, false, LoginTargetError
	}
	c.id, c.challenge = buf[0], buf[1:]
	c.step = 1
	return []KV{{"CHAP_A", strconv.Itoa(c.alg)}, {"CHAP_I", strconv.Itoa(int(c.id))},
		{"CHAP_C", "0x" + hex.EncodeToString(c.challenge)}}, false, LoginSuccess
}

// verify checks the initiator's answer and, when it asks, answers its
// challenge (mutual CHAP).
func (c *chapAuth) verify(in []KV) ([]KV, bool, LoginStatus) {
	c.step = 2
	name, okN := Lookup(in, "CHAP_N")
	r, okR := Lookup(in, "CHAP_R")
	if !okN || !okR {
		return nil, false, LoginAuthFailure
	}
	resp, err := DecodeBinary(r)
	want := CHAPResponse(c.alg, c.id, c.creds.Initiator.Secret, c.challenge)
	nameOK := subtle.ConstantTimeCompare([]byte(name), []byte(c.creds.Initiator.User)) == 1
	respOK := err == nil && subtle.ConstantTimeCompare(resp, want) == 1
	if !nameOK || !respOK || !c.creds.Initiator.Set() {
		return nil, false, LoginAuthFailure
	}
	idS, okI := Lookup(in, "CHAP_I")
	chS, okC := Lookup(in, "CHAP_C")
	if !okI && !okC {
		return nil, true, LoginSuccess
	}
	if okI != okC || !c.creds.Target.Set() {
		return nil, false, LoginAuthFailure
	}
	id, err := parseNumeric(idS)
	if err != nil || id > 255 {
		return nil, false, LoginAuthFailure
	}
	ch, err := DecodeBinary(chS)
	// RFC 7143 12.1.3: a challenge equal to the target's is a reflection
	// attempt; the target must refuse it.
	if err != nil || len(ch) == 0 || len(ch) > chapMaxChallenge || subtle.ConstantTimeCompare(ch, c.challenge) == 1 {
		return nil, false, LoginAuthFailure
	}
	// RFC 7143 12.1.3: the same secret must not serve both directions.
	if c.creds.Target.Secret == c.creds.Initiator.Secret {
		return nil, false, LoginAuthFailure
	}
	out := CHAPResponse(c.alg, byte(id), c.creds.Target.Secret, ch)
	return []KV{{"CHAP_N", c.creds.Target.User}, {"CHAP_R", "0x" + hex.EncodeToString(out)}}, true, LoginSuccess
}

// DecodeBinary decodes an iSCSI binary-value (RFC 7143 6.1): 0x/0X hex
// (an odd digit count gets a leading zero) or 0b/0B base64.
func DecodeBinary(s string) ([]byte, error) {
	if len(s) < 3 {
		return nil, errBinary
	}
	body := s[2:]
	switch s[:2] {
	case "0x", "0X":
		if len(body)%2 == 1 {
			body = "0" + body
		}
		return hex.DecodeString(body)
	case "0b", "0B":
		return base64.StdEncoding.DecodeString(body)
	}
	return nil, errBinary
}

type binaryError struct{}

func (binaryError) Error() string { return "iscsi: not a binary value (0x... or 0b...)" }

var errBinary = binaryError{}

// parseNumeric parses a numerical-value: decimal, or hex with 0x.
func parseNumeric(s string) (uint64, error) {
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		return strconv.ParseUint(s[2:], 16, 64)
	}
	return strconv.ParseUint(s, 10, 64)
}
