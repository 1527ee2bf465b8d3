package array

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

func crashArray(t *testing.T, mirror bool) *Array {
	t.Helper()
	cfg := Loopback(t.TempDir(), 1<<20)
	cfg.Interlink.Penalty = 0
	cfg.Cache.Mirror = &mirror
	a, err := New(cfg, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

// A node crash loses its cache; with mirroring on the takeover replays
// every acknowledged write, with it off the loss is reported per LUN.
func TestCrashTakeover(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mirror bool
		lost   []Loss
		want   byte
	}{
		{"mirror on", true, nil, 0xab},
		{"mirror off", false, []Loss{{LUN: 0, Pages: 2, Blocks: 16, PageIdx: []int64{0, 1}}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := crashArray(t, tc.mirror)
			l := a.LUN(0)                                                                // owned by a
			require.NoError(t, l.WriteAt(3, bytes.Repeat([]byte{0xab}, 8192), 0, false)) // via b's port
			var seen []Change
			a.OnChange(func(c Change) { seen = append(seen, c) })
			c, err := a.CrashNode("a")
			require.NoError(t, err)
			require.Equal(t, tc.lost, c.Lost)
			require.Equal(t, alua.Unavailable, l.State("h", a.Node("a")))
			require.Equal(t, alua.Transitioning, l.State("h", a.Node("b")), "failover pending")
			require.ErrorIs(t, l.ReadAt(3, make([]byte, 512), 0), ErrOwnerDown)
			mc, err := a.Move([]uint64{0}, "b", alua.CauseFailover)
			require.NoError(t, err)
			if tc.mirror {
				require.Equal(t, 2, mc.Replayed)
			}
			got := make([]byte, 8192)
			require.NoError(t, l.ReadAt(3, got, 0))
			require.Equal(t, bytes.Repeat([]byte{tc.want}, 8192), got)
			require.Equal(t, alua.ActiveOptimized, l.State("h", a.Node("b")))
			require.Len(t, seen, 2)
			require.Equal(t, alua.CauseNodeDown, seen[0].Cause)
			_, err = a.CrashNode("a")
			require.ErrorContains(t, err, "already down")
			require.NoError(t, a.RestartNode("a"))
			require.Equal(t, alua.ActiveNonOptimized, l.State("h", a.Node("a")))
			require.True(t, a.Node("a").Cache.Up())
		})
	}
}

// When a node's mirror partner crashes, its dirty data (now single-copy)
// is destaged and later writes go through until the partner returns.
func TestPartnerLossDestages(t *testing.T) {
	a := crashArray(t, true)
	l := a.LUN(1) // owned by b, mirrored on a
	require.NoError(t, l.WriteAt(3, bytes.Repeat([]byte{7}, 4096), 0, false))
	require.Equal(t, int64(4096), a.Node("b").Cache.DirtyBytes(1))
	_, err := a.CrashNode("a")
	require.NoError(t, err)
	a.bg.Wait() // the background destage of single-copy data
	require.Zero(t, a.Node("b").Cache.DirtyBytes(1))
	require.NoError(t, l.WriteAt(3, bytes.Repeat([]byte{8}, 4096), 4096, false))
	require.Zero(t, a.Node("b").Cache.DirtyBytes(1), "no partner: write-through")
	require.NoError(t, a.RestartNode("a"))
	require.NoError(t, l.WriteAt(3, bytes.Repeat([]byte{9}, 4096), 8192, false))
	require.Equal(t, int64(4096), a.Node("b").Cache.DirtyBytes(1), "partner back: write-back again")
	require.Equal(t, int64(4096), a.Node("a").Cache.MirrorBytes())
}

// A batch has one owner: with three nodes, LUNs on a and b cannot move to
// c together.
func TestBatchNeedsOneOwner(t *testing.T) {
	cfg := Loopback(t.TempDir(), 1<<20)
	cfg.Nodes = append(cfg.Nodes, NodeConfig{Name: "c", Ports: []PortConfig{{Name: "c0", Addr: "127.0.0.1:0"}}})
	a, err := New(cfg, Options{})
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Move([]uint64{0, 1}, "c", alua.CauseBalance)
	require.ErrorContains(t, err, "LUN 1 is owned by b, not a: a batch has one owner")
	require.Equal(t, a.Node("a"), a.LUN(0).Owner(), "nothing moved")
	c, err := a.Move([]uint64{0, 2, 1}, "b", alua.CauseBalance)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 2}, c.LUNs, "LUNs already on b are left out")
}
