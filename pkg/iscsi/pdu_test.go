package iscsi

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPDURoundTrip(t *testing.T) {
	tests := []struct {
		name string
		dg   Digests
		data []byte
		ahs  []byte
	}{
		{"no data", Digests{}, nil, nil},
		{"padded data", Digests{}, []byte("abcde"), nil},
		{"header digest", Digests{Header: true}, []byte("1234"), nil},
		{"both digests", Digests{Header: true, Data: true}, bytes.Repeat([]byte{7}, 1001), nil},
		{"with AHS", Digests{Header: true}, []byte("x"), []byte{0, 5, 1, 0, 1, 2, 3, 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h BHS
			h.SetOpcode(OpSCSICmd)
			h.SetFlags(FlagFinal | FlagWrite)
			h.SetITT(0x01020304)
			h.SetCmdSN(77)
			p := &PDU{BHS: h, Data: tc.data, AHS: tc.ahs}
			wire := AppendPDU(nil, p, tc.dg)
			require.Zero(t, len(wire)%4, "PDU must be 4-byte aligned")
			got, err := ReadPDU(bytes.NewReader(wire), tc.dg, 0, nil)
			require.NoError(t, err)
			require.Equal(t, OpSCSICmd, got.BHS.Opcode())
			require.Equal(t, uint32(0x01020304), got.BHS.ITT())
			require.Equal(t, uint32(77), got.BHS.CmdSN())
			require.Equal(t, len(tc.data), got.BHS.DataLen())
			require.Equal(t, string(tc.data), string(got.Data))
			require.Equal(t, tc.ahs, got.AHS)
		})
	}
}

func TestDigestErrors(t *testing.T) {
	var h BHS
	h.SetOpcode(OpNOPOut)
	wire := AppendPDU(nil, &PDU{BHS: h, Data: []byte("ping")}, Digests{Header: true, Data: true})
	bad := append([]byte(nil), wire...)
	bad[2] ^= 1 // corrupt the header
	_, err := ReadPDU(bytes.NewReader(bad), Digests{Header: true, Data: true}, 0, nil)
	var de ErrDigest
	require.True(t, errors.As(err, &de) && de.Header)
	bad = append([]byte(nil), wire...)
	bad[len(bad)-6] ^= 1 // corrupt the data
	p, err := ReadPDU(bytes.NewReader(bad), Digests{Header: true, Data: true}, 0, nil)
	require.True(t, errors.As(err, &de) && !de.Header)
	require.NotNil(t, p, "a data digest error keeps the header so the PDU can be rejected")
}

// TestCRC32CVector is RFC 7143 appendix B.4: 32 bytes of zeros.
func TestCRC32CVector(t *testing.T) {
	require.Equal(t, uint32(0x8a9136aa), CRC32C(make([]byte, 32)))
	require.Equal(t, []byte{0xaa, 0x36, 0x91, 0x8a}, AppendDigest(nil, CRC32C(make([]byte, 32))))
}

func TestReadPDUTooLarge(t *testing.T) {
	var h BHS
	h.SetOpcode(OpSCSICmd)
	wire := AppendPDU(nil, &PDU{BHS: h, Data: make([]byte, 9000)}, Digests{})
	_, err := ReadPDU(bytes.NewReader(wire), Digests{}, 8192, nil)
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestLUNEncoding(t *testing.T) {
	for _, lun := range []uint64{0, 1, 255, 256, 16383} {
		got, ok := ParseLUN(EncodeLUN(lun))
		require.True(t, ok)
		require.Equal(t, lun, got)
	}
	_, ok := ParseLUN([8]byte{0x80, 1}) // logical unit addressing: unsupported
	require.False(t, ok)
}

func TestSerialArithmetic(t *testing.T) {
	require.True(t, SerialLess(0xfffffff0, 5))
	require.False(t, SerialLess(5, 0xfffffff0))
	require.True(t, SerialLE(3, 3))
}

func TestParseText(t *testing.T) {
	tests := []struct {
		in      string
		want    []KV
		wantErr bool
	}{
		{"A=1\x00B=two\x00", []KV{{"A", "1"}, {"B", "two"}}, false},
		{"A=\x00\x00\x00", []KV{{"A", ""}}, false},
		{"", nil, false},
		{"novalue\x00", nil, true},
		{"=x\x00", nil, true},
		{"bad key=1\x00", nil, true},
	}
	for _, tc := range tests {
		got, err := ParseText([]byte(tc.in))
		if tc.wantErr {
			require.Error(t, err, "%q", tc.in)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		if len(got) > 0 {
			again, err := ParseText(AppendText(nil, got))
			require.NoError(t, err)
			require.Equal(t, got, again)
		}
	}
}

func FuzzReadPDU(f *testing.F) {
	var h BHS
	h.SetOpcode(OpSCSICmd)
	f.Add(AppendPDU(nil, &PDU{BHS: h, Data: []byte("abc")}, Digests{}), false, false)
	f.Add(AppendPDU(nil, &PDU{BHS: h, Data: []byte("abcd")}, Digests{true, true}), true, true)
	f.Add([]byte{0x01, 0x80, 0, 0, 2}, false, false)
	f.Fuzz(func(t *testing.T, b []byte, hd, dd bool) {
		p, err := ReadPDU(bytes.NewReader(b), Digests{hd, dd}, 1<<16, nil)
		if err != nil || p == nil {
			return
		}
		// A PDU that parsed cleanly re-encodes to the same header fields.
		again, err := ReadPDU(bytes.NewReader(AppendPDU(nil, p, Digests{hd, dd})), Digests{hd, dd}, 1<<16, nil)
		if err != nil {
			t.Fatalf("re-encoded PDU does not parse: %v", err)
		}
		if again.BHS != p.BHS || !bytes.Equal(again.Data, p.Data) {
			t.Fatalf("round trip changed the PDU")
		}
	})
}

func FuzzParseText(f *testing.F) {
	f.Add([]byte("InitiatorName=iqn.x\x00SessionType=Normal\x00"))
	f.Add([]byte("=\x00=="))
	f.Fuzz(func(t *testing.T, b []byte) {
		kvs, err := ParseText(b)
		if err != nil {
			return
		}
		again, err := ParseText(AppendText(nil, kvs))
		if err != nil || len(again) != len(kvs) {
			t.Fatalf("text round trip failed: %v", err)
		}
	})
}
