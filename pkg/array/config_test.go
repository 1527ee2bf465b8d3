package array

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExampleConfigLoads(t *testing.T) {
	c, err := LoadConfig("../../examples/aluad.yaml")
	require.NoError(t, err)
	require.Len(t, c.Nodes, 2)
	require.Len(t, c.LUNs, 8)
	require.Equal(t, "hdd", c.LUNs[4].Media)
	require.Equal(t, 512, c.LUNs[0].BlockSize)
	require.Equal(t, 512, c.LUNs[0].PhysicalBlockSize, "the block size, by default")
	require.Equal(t, 30*time.Second, c.Ownership.ShipWindow)
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
		{"cache mode", "cache: {mode: writeback}\n", "write-back, write-through, none"},
		{"cache too small", "cache: {size: 4KiB}\n", "at least 1MiB"},
		{"dirty above size", "cache: {size: 8MiB, dirty_limit: 16MiB}\n", "dirty_limit at most the size"},
		{"negative tick", "ownership: {tick: -1s}\n", "must not be negative"},
		{"negative ship window", "ownership: {ship_window: -1s}\n", "must not be negative"},
		{"negative capacity", "ownership: {node_capacity: -5}\n", "node_capacity"},
		{"cache unknown key", "cache: {mirrored: true}\n", "mirrored"},
		{"physical block not a multiple", "luns: [{id: 0, size: 1MiB, physical_block_size: 1000}]\n", "physical_block_size"},
		{"physical block below the block", "luns: [{id: 0, size: 1MiB, block_size: 4096, physical_block_size: 512}]\n", "physical_block_size"},
		{"physical block not a power of two", "luns: [{id: 0, size: 1MiB, physical_block_size: 1536}]\n", "physical_block_size"},
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

func TestCacheAndOwnershipKeys(t *testing.T) {
	c, err := LoadConfig("../../examples/aluad.yaml")
	require.NoError(t, err)
	require.Equal(t, "write-back", c.Cache.Mode)
	require.True(t, c.Cache.MirrorOn())
	require.Equal(t, Size(64<<20), c.Cache.DirtyLimit)
	require.Equal(t, 30*time.Second, c.Ownership.FailbackWindow)
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("cache: {mirror: false, mode: write-through}\n"), 0o644))
	c, err = LoadConfig(p)
	require.NoError(t, err)
	require.False(t, c.Cache.MirrorOn())
	require.Equal(t, Size(256<<20), c.Cache.Size, "missing keys take the default")
}
