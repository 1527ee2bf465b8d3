package array

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExampleConfigLoads(t *testing.T) {
	c, err := LoadConfig("../../examples/aluad.yaml")
	require.NoError(t, err)
	require.Len(t, c.Nodes, 2)
	require.Len(t, c.LUNs, 8)
	require.Equal(t, "hdd", c.LUNs[4].Media)
	require.Equal(t, 512, c.LUNs[0].BlockSize)
}

func TestConfigErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "targt: iqn.x.y:z\n", "field targt not found"},
		{"bad size", "luns: [{id: 0, size: lots}]\n", "bad size"},
		{"bad preferred", "luns: [{id: 0, size: 1MiB, preferred: z}]\n", "preferred owner"},
		{"dup lun", "luns: [{id: 0, size: 1MiB}, {id: 0, size: 1MiB}]\n", "defined twice"},
		{"bad alua", "alua: sideways\n", "alua must be"},
		{"bad target", "target: array\n", "not an iSCSI name"},
		{"unknown host type", "hosts: [{name: h1, type: beos, initiators: [iqn.2026-11.org.example:h1]}]\n", "unknown type"},
		{"host without initiators", "hosts: [{name: h1, type: linux}]\n", "no initiators"},
		{"initiator twice", "hosts: [{name: h1, initiators: [iqn.x.y:i]}, {name: h2, initiators: [iqn.x.y:i]}]\n",
			"declared by hosts h1 and h2"},
		{"dup host", "hosts: [{name: h1, initiators: [iqn.x.y:i]}, {name: h1, initiators: [iqn.x.y:j]}]\n", "host names"},
		{"transition time too long", "transition_time: 300s\n", "transition_time"},
		{"transition time fraction", "transition_time: 1500ms\n", "transition_time"},
		{"negative penalty", "interlink: {penalty: -1us}\n", "penalty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(p, []byte(tc.yaml), 0o644))
			_, err := LoadConfig(p)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1GiB": 1 << 30, "512MiB": 512 << 20, "4096": 4096, "2G": 2 << 30} {
		got, err := ParseSize(in)
		require.NoError(t, err)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-1", "1XB", "GiB"} {
		_, err := ParseSize(bad)
		require.Error(t, err, bad)
	}
}

func TestConfigKeepsExplicitZeroDurations(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("transition_time: 0s\ninterlink: {penalty: 0s}\n"), 0o644))
	c, err := LoadConfig(p)
	require.NoError(t, err)
	require.Zero(t, c.TransitionTime)
	require.Zero(t, c.Interlink.Penalty)

	require.NoError(t, os.WriteFile(p, []byte("alua: explicit\n"), 0o644))
	c, err = LoadConfig(p)
	require.NoError(t, err)
	require.Equal(t, DefaultTransitionTime, c.TransitionTime, "missing keys take the default")
	require.Equal(t, DefaultConfig().Interlink.Penalty, c.Interlink.Penalty)
}
