package iscsi

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

var testCreds = CHAPCreds{
	Initiator: CHAPSecret{User: "host1", Secret: "host1-secret-0123"},
	Target:    CHAPSecret{User: "array", Secret: "array-secret-4567"},
}

func chapPolicy(c CHAPCreds, ok bool) CHAPPolicy {
	return CHAPPolicy{Lookup: func(string, bool) (CHAPCreds, bool) { return c, ok },
		Rand: bytes.NewReader(bytes.Repeat([]byte{7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, 4))}
}

// chapRun plays an initiator through the security stage: it offers algs,
// answers the challenge with secret (as user) and, when mutualChallenge is
// set, asks the target to answer it. It returns the last reply.
type chapRun struct {
	algs            string
	user, secret    string
	mutualChallenge []byte
	encode          func([]byte) string
	dropR           bool
}

func (cr chapRun) do(t *testing.T, l *Login) (LoginReply, int, byte) {
	h, d := loginReq(0, 1, true, KV{"InitiatorName", "iqn.2026-11.org.example:h1"},
		KV{"TargetName", cfg().TargetName}, KV{"AuthMethod", "CHAP,None"})
	r := l.Step(h, d)
	if r.Status != LoginSuccess {
		return r, 0, 0
	}
	require.Contains(t, r.KVs, KV{"AuthMethod", "CHAP"})
	h, d = loginReq(0, 1, false, KV{"CHAP_A", cr.algs})
	r = l.Step(h, d)
	if r.Status != LoginSuccess {
		return r, 0, 0
	}
	aS, _ := Lookup(r.KVs, "CHAP_A")
	iS, _ := Lookup(r.KVs, "CHAP_I")
	cS, _ := Lookup(r.KVs, "CHAP_C")
	alg, _ := strconv.Atoi(aS)
	id, _ := strconv.Atoi(iS)
	ch, err := DecodeBinary(cS)
	require.NoError(t, err)
	enc := cr.encode
	if enc == nil {
		enc = func(b []byte) string { return "0x" + hex.EncodeToString(b) }
	}
	kvs := []KV{{"CHAP_N", cr.user}}
	if !cr.dropR {
		kvs = append(kvs, KV{"CHAP_R", enc(CHAPResponse(alg, byte(id), cr.secret, ch))})
	}
	if cr.mutualChallenge != nil {
		kvs = append(kvs, KV{"CHAP_I", "9"}, KV{"CHAP_C", enc(cr.mutualChallenge)})
	}
	h, d = loginReq(0, 1, true, kvs...)
	return l.Step(h, d), alg, 9
}

func TestCHAP(t *testing.T) {
	good := testCreds.Initiator
	mutual := []byte("initiator-challenge!")
	tests := []struct {
		name   string
		creds  CHAPCreds
		run    chapRun
		want   LoginStatus
		mutual bool
	}{
		{"one-way MD5", testCreds, chapRun{algs: "5", user: good.User, secret: good.Secret}, LoginSuccess, false},
		{"one-way SHA-1", testCreds, chapRun{algs: "6", user: good.User, secret: good.Secret}, LoginSuccess, false},
		{"one-way SHA-256 first choice", testCreds, chapRun{algs: "7,6,5", user: good.User, secret: good.Secret}, LoginSuccess, false},
		{"one-way SHA3-256", testCreds, chapRun{algs: "8", user: good.User, secret: good.Secret}, LoginSuccess, false},
		{"response in base64", testCreds, chapRun{algs: "5", user: good.User, secret: good.Secret,
			encode: func(b []byte) string { return "0b" + base64.StdEncoding.EncodeToString(b) }}, LoginSuccess, false},
		{"wrong secret", testCreds, chapRun{algs: "5", user: good.User, secret: "not-the-secret!"}, LoginAuthFailure, false},
		{"wrong name", testCreds, chapRun{algs: "5", user: "host2", secret: good.Secret}, LoginAuthFailure, false},
		{"no response", testCreds, chapRun{algs: "5", user: good.User, secret: good.Secret, dropR: true}, LoginAuthFailure, false},
		{"unsupported algorithm", testCreds, chapRun{algs: "4,3", user: good.User, secret: good.Secret}, LoginAuthFailure, false},
		{"mutual", testCreds, chapRun{algs: "5", user: good.User, secret: good.Secret, mutualChallenge: mutual}, LoginSuccess, true},
		{"mutual, wrong initiator secret", testCreds, chapRun{algs: "5", user: good.User, secret: "wrong-secret-99", mutualChallenge: mutual}, LoginAuthFailure, false},
		{"mutual without a target secret", CHAPCreds{Initiator: good}, chapRun{algs: "5", user: good.User, secret: good.Secret, mutualChallenge: mutual}, LoginAuthFailure, false},
		{"mutual reusing the initiator secret", CHAPCreds{Initiator: good, Target: CHAPSecret{User: "array", Secret: good.Secret}},
			chapRun{algs: "5", user: good.User, secret: good.Secret, mutualChallenge: mutual}, LoginAuthFailure, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg()
			c.Auth = chapPolicy(tc.creds, true)
			l := NewLogin(c)
			r, alg, id := tc.run.do(t, l)
			require.Equal(t, tc.want, r.Status)
			if tc.want != LoginSuccess {
				require.True(t, r.Done, "a failed login ends")
				require.Empty(t, r.KVs, "a refusal reveals nothing")
				return
			}
			require.True(t, r.Transit, "authenticated: on to the operational stage")
			n, hasN := Lookup(r.KVs, "CHAP_N")
			require.Equal(t, tc.mutual, hasN)
			if tc.mutual {
				require.Equal(t, tc.creds.Target.User, n)
				rS, _ := Lookup(r.KVs, "CHAP_R")
				got, err := DecodeBinary(rS)
				require.NoError(t, err)
				require.Equal(t, CHAPResponse(alg, id, tc.creds.Target.Secret, mutual), got,
					"the target proves the target secret")
				require.NotEqual(t, CHAPResponse(alg, id, "a-wrong-target-secret", mutual), got)
			}
			h, d := loginReq(1, 3, true, KV{"MaxRecvDataSegmentLength", "65536"})
			require.True(t, l.Step(h, d).Done)
		})
	}
}

// TestCHAPReflection: an initiator echoing the target's challenge back is
// refused (RFC 7143 12.1.3).
func TestCHAPReflection(t *testing.T) {
	c := cfg()
	c.Auth = chapPolicy(testCreds, true)
	l := NewLogin(c)
	h, d := loginReq(0, 1, true, KV{"InitiatorName", "iqn.2026-11.org.example:h1"},
		KV{"TargetName", c.TargetName}, KV{"AuthMethod", "CHAP"})
	require.Equal(t, LoginSuccess, l.Step(h, d).Status)
	h, d = loginReq(0, 1, false, KV{"CHAP_A", "5"})
	r := l.Step(h, d)
	cS, _ := Lookup(r.KVs, "CHAP_C")
	ch, _ := DecodeBinary(cS)
	h, d = loginReq(0, 1, true, KV{"CHAP_N", "host1"}, KV{"CHAP_R", "0x" + hex.EncodeToString(CHAPResponse(5, 7, testCreds.Initiator.Secret, ch))},
		KV{"CHAP_I", "7"}, KV{"CHAP_C", cS})
	require.Equal(t, LoginAuthFailure, l.Step(h, d).Status)
}

// TestCHAPRequired: an initiator with credentials on file cannot skip
// authentication (None only, or straight to the operational stage), and
// one without logs in with None; a policy that says nothing is needed for
// discovery lets discovery through.
func TestCHAPRequired(t *testing.T) {
	c := cfg()
	c.Auth = CHAPPolicy{Lookup: func(ini string, disc bool) (CHAPCreds, bool) {
		return testCreds, ini == "iqn.2026-11.org.example:h1" && !disc
	}}
	cases := []struct {
		name string
		csg  int
		kvs  []KV
		want LoginStatus
	}{
		{"None only", 0, []KV{{"InitiatorName", "iqn.2026-11.org.example:h1"}, {"TargetName", c.TargetName}, {"AuthMethod", "None"}}, LoginAuthFailure},
		{"skips security", 1, []KV{{"InitiatorName", "iqn.2026-11.org.example:h1"}, {"TargetName", c.TargetName}}, LoginAuthFailure},
		{"other initiator, None", 0, []KV{{"InitiatorName", "iqn.2026-11.org.example:h2"}, {"TargetName", c.TargetName}, {"AuthMethod", "CHAP,None"}}, LoginSuccess},
		{"discovery, None", 0, []KV{{"InitiatorName", "iqn.2026-11.org.example:h1"}, {"SessionType", "Discovery"}, {"AuthMethod", "None"}}, LoginSuccess},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLogin(c)
			nsg := 1
			if tc.csg == 1 {
				nsg = 3
			}
			h, d := loginReq(tc.csg, nsg, true, tc.kvs...)
			require.Equal(t, tc.want, l.Step(h, d).Status)
		})
	}
}

// TestLoginAuthorization: an initiator the ACL refuses gets 02/02 whatever
// it offers.
func TestLoginAuthorization(t *testing.T) {
	c := cfg()
	c.Authorize = func(ini string, _ bool) bool { return ini == "iqn.2026-11.org.example:ok" }
	for ini, want := range map[string]LoginStatus{"iqn.2026-11.org.example:ok": LoginSuccess, "iqn.2026-11.org.example:no": LoginAuthorizationFail} {
		l := NewLogin(c)
		h, d := loginReq(0, 1, true, KV{"InitiatorName", ini}, KV{"TargetName", c.TargetName}, KV{"AuthMethod", "None"})
		r := l.Step(h, d)
		require.Equal(t, want, r.Status, ini)
		if want != LoginSuccess {
			require.Equal(t, byte(0x02), byte(r.Status>>8), "status class 02: initiator error")
			require.Empty(t, r.KVs)
		}
	}
}

func TestDecodeBinary(t *testing.T) {
	for in, want := range map[string][]byte{"0x0a0b": {10, 11}, "0Xabc": {0x0a, 0xbc}, "0bAQI=": {1, 2}} {
		got, err := DecodeBinary(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "0x", "12", "0xzz", "0b!!"} {
		_, err := DecodeBinary(bad)
		require.Error(t, err, bad)
	}
}
