package state

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
)

func TestStateEncoding(t *testing.T) {
	s := State{Version: Version, Target: "iqn.2026-11.org.aluad:array", Owners: map[string]array.SavedOwner{"0": {Node: "b", Gen: 3}},
		Preferred: map[string]string{"0": "a"}, Mappings: []array.MappingConfig{{LUN: 0, Host: "h"}},
		ConfigMappings: []array.MappingConfig{}, Reports: []api.ReportRecord{{ReportInfo: api.ReportInfo{Condition: "x", Raised: true}}}}
	b, err := Encode(s)
	require.NoError(t, err)
	got, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, s, got)

	tests := []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"a flipped byte", func(b []byte) []byte {
			i := len(b) / 2
			for b[i] != '"' && i < len(b)-1 {
				i++
			}
			c := append([]byte(nil), b...)
			c[i-1] ^= 0x01
			return c
		}, ""},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, "not a state file"},
		{"empty", func([]byte) []byte { return nil }, "not a state file"},
		{"another format", func([]byte) []byte { return []byte(`{"format":"x","sha256":"","payload":{}}`) }, "format"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.edit(b))
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(State{Version: Version, Owners: map[string]array.SavedOwner{"1": {Node: "a"}}})
	f.Add(b)
	f.Add([]byte(`{"format":"aluad-state","sha256":"00","payload":{"version":1}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		s, err := Decode(in)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same state.
		again, err := Encode(s)
		require.NoError(t, err)
		s2, err := Decode(again)
		require.NoError(t, err)
		require.Equal(t, s, s2)
	})
}
