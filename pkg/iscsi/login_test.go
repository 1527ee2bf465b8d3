package iscsi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func loginReq(csg, nsg int, transit bool, kvs ...KV) (*BHS, []byte) {
	var h BHS
	h.SetOpcode(OpLoginReq)
	f := byte(csg<<2 | nsg)
	if transit {
		f |= FlagTransit
	}
	h.SetFlags(f)
	h.SetISID([6]byte{0x80, 0, 0, 0, 0, 1})
	return &h, AppendText(nil, kvs)
}

func cfg() LoginConfig {
	return LoginConfig{TargetName: "iqn.2026-11.org.aluad:array", TPGT: 3, Limits: DefaultLimits()}
}

func TestLoginNegotiation(t *testing.T) {
	l := NewLogin(cfg())
	h, d := loginReq(0, 1, true, KV{"InitiatorName", "iqn.x.y:i"}, KV{"TargetName", "iqn.2026-11.org.aluad:array"},
		KV{"AuthMethod", "CHAP,None"})
	r := l.Step(h, d)
	require.Equal(t, LoginSuccess, r.Status)
	require.True(t, r.Transit)
	require.Contains(t, r.KVs, KV{"AuthMethod", "None"})
	require.Contains(t, r.KVs, KV{"TargetPortalGroupTag", "3"})

	h, d = loginReq(1, 3, true, KV{"HeaderDigest", "CRC32C,None"}, KV{"DataDigest", "None"},
		KV{"MaxRecvDataSegmentLength", "65536"}, KV{"MaxBurstLength", "16776192"},
		KV{"FirstBurstLength", "262144"}, KV{"InitialR2T", "No"}, KV{"ImmediateData", "Yes"},
		KV{"MaxConnections", "4"}, KV{"ErrorRecoveryLevel", "2"}, KV{"X-vendor", "1"})
	r = l.Step(h, d)
	require.Equal(t, LoginSuccess, r.Status)
	require.True(t, r.Done)
	want := map[string]string{"HeaderDigest": "CRC32C", "DataDigest": "None", "MaxBurstLength": "1048576",
		"FirstBurstLength": "262144", "InitialR2T": "No", "ImmediateData": "Yes", "MaxConnections": "1",
		"ErrorRecoveryLevel": "0", "X-vendor": "NotUnderstood", "MaxRecvDataSegmentLength": "262144"}
	for k, v := range want {
		got, ok := Lookup(r.KVs, k)
		require.True(t, ok, k)
		require.Equal(t, v, got, k)
	}
	require.True(t, l.Params.HeaderDigest)
	require.Equal(t, 65536, l.Params.MaxXmitDataSegment)
}

func TestLoginFailures(t *testing.T) {
	tests := []struct {
		name string
		kvs  []KV
		csg  int
		want LoginStatus
	}{
		{"no initiator name", []KV{{"TargetName", "iqn.2026-11.org.aluad:array"}}, 1, LoginMissingParameter},
		{"no target name", []KV{{"InitiatorName", "iqn.a.b:c"}}, 1, LoginMissingParameter},
		{"unknown target", []KV{{"InitiatorName", "iqn.a.b:c"}, {"TargetName", "iqn.other.x:y"}}, 1, LoginNotFound},
		{"bad session type", []KV{{"InitiatorName", "iqn.a.b:c"}, {"SessionType", "Bogus"}}, 1, LoginSessionTypeUnsupp},
		{"no acceptable auth", []KV{{"InitiatorName", "iqn.a.b:c"}, {"TargetName", "iqn.2026-11.org.aluad:array"},
			{"AuthMethod", "CHAP"}}, 0, LoginAuthFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLogin(cfg())
			h, d := loginReq(tc.csg, 3, true, tc.kvs...)
			r := l.Step(h, d)
			require.Equal(t, tc.want, r.Status)
			require.True(t, r.Done)
		})
	}
}

func TestLoginDiscoveryIrrelevantKeys(t *testing.T) {
	l := NewLogin(cfg())
	h, d := loginReq(1, 3, true, KV{"InitiatorName", "iqn.a.b:c"}, KV{"SessionType", "Discovery"},
		KV{"MaxBurstLength", "65536"})
	r := l.Step(h, d)
	require.Equal(t, LoginSuccess, r.Status)
	require.Contains(t, r.KVs, KV{"MaxBurstLength", "Irrelevant"})
	_, hasTPGT := Lookup(r.KVs, "TargetPortalGroupTag")
	require.False(t, hasTPGT, "discovery sessions get no TPGT")
}

// authStub accepts after one round trip when the initiator sends the right key.
type authStub struct{}

func (authStub) Methods() []string                { return []string{"CHAP"} }
func (authStub) Begin(string, bool) Authenticator { return authStub{} }
func (authStub) Step(method string, in []KV) ([]KV, bool, LoginStatus) {
	if v, ok := Lookup(in, "CHAP_N"); ok {
		if v == "good" {
			return nil, true, LoginSuccess
		}
		return nil, false, LoginAuthFailure
	}
	return []KV{{"CHAP_A", "5"}}, false, LoginSuccess
}

func TestLoginAuthenticatorHook(t *testing.T) {
	c := cfg()
	c.Auth = authStub{}
	l := NewLogin(c)
	h, d := loginReq(0, 1, true, KV{"InitiatorName", "iqn.a.b:c"}, KV{"TargetName", c.TargetName}, KV{"AuthMethod", "CHAP,None"})
	r := l.Step(h, d)
	require.Equal(t, LoginSuccess, r.Status)
	require.False(t, r.Transit, "cannot leave security before the method completes")
	h, d = loginReq(0, 1, true, KV{"CHAP_N", "bad"})
	require.Equal(t, LoginAuthFailure, l.Step(h, d).Status)

	l = NewLogin(c)
	h, d = loginReq(0, 1, true, KV{"InitiatorName", "iqn.a.b:c"}, KV{"TargetName", c.TargetName}, KV{"AuthMethod", "CHAP"})
	l.Step(h, d)
	h, d = loginReq(0, 1, true, KV{"CHAP_N", "good"})
	r = l.Step(h, d)
	require.Equal(t, LoginSuccess, r.Status)
	require.True(t, r.Transit)
}

func FuzzLoginStep(f *testing.F) {
	h, d := loginReq(0, 1, true, KV{"InitiatorName", "iqn.a.b:c"}, KV{"TargetName", "iqn.2026-11.org.aluad:array"})
	f.Add(h[:], d)
	h, d = loginReq(1, 3, true, KV{"MaxBurstLength", "x"})
	f.Add(h[:], d)
	h, d = loginReq(0, 1, false, KV{"InitiatorName", "iqn.a.b:c"}, KV{"TargetName", "iqn.2026-11.org.aluad:array"},
		KV{"AuthMethod", "CHAP"}, KV{"CHAP_A", "5"}, KV{"CHAP_N", "host1"}, KV{"CHAP_R", "0x00"}, KV{"CHAP_C", "0b"})
	f.Add(h[:], d)
	f.Fuzz(func(t *testing.T, hb []byte, data []byte) {
		bh, err := ParseBHS(hb)
		if err != nil {
			return
		}
		c := cfg()
		if len(data) > 0 && data[0]&1 == 1 { // half the inputs meet a CHAP target
			c.Auth = chapPolicy(testCreds, true)
		}
		l := NewLogin(c)
		for i := 0; i < 3; i++ {
			r := l.Step(&bh, data)
			if r.Done {
				return
			}
		}
	})
}
