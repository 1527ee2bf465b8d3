package array

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/media"
)

// midMoveArray is a 2-node array on in-memory media whose moves call hook
// at each phase point.
func midMoveArray(t *testing.T, mirror bool, hook func(*Array, MovePoint)) *Array {
	t.Helper()
	cfg := Loopback(t.TempDir(), 1<<20)
	cfg.Interlink.Penalty = 0
	cfg.Cache.Mirror = &mirror
	var a *Array
	a, err := New(cfg, Options{
		OpenStore:     func(_ uint64, size int64) (media.Store, error) { return media.NewMem(size), nil },
		ManualDestage: true,
		Background:    func(f func()) { f() },
		MoveHook:      func(p MovePoint) { hook(a, p) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

// A node crash (or crash and restart) at any phase point of a move of
// LUNs 0 and 2 from a to b loses no acknowledged write, never leaves a LUN
// on a down owner, and ends the move as the fault dictates: a takeover
// when a went down, an abandoned move when b did. The first two rows are
// the two sequences that lost data before (the flush of LUN 2 ran on a
// crashed cache and the move dropped b's mirror; the move completed onto
// a crashed b).
func TestFaultAtEveryMovePoint(t *testing.T) {
	type fault struct {
		phase   MovePhase
		lun     uint64
		node    string
		restart bool
	}
	tests := []struct {
		name      string
		f         fault
		wantOwner string
		wantErr   bool
	}{
		{"old owner crashes before LUN 0 flushes", fault{PhaseFlush, 0, "a", false}, "b", false},
		{"new owner crashes while LUN 2 flushes", fault{PhaseFlush, 2, "b", false}, "a", true},
		{"old owner crashes before LUN 2 flushes", fault{PhaseFlush, 2, "a", false}, "b", false},
		{"old owner crashes in the hold", fault{PhaseHold, 0, "a", false}, "b", false},
		{"new owner crashes in the hold", fault{PhaseHold, 0, "b", false}, "a", true},
		{"old owner crashes in the last destage", fault{PhaseDestage, 2, "a", false}, "b", false},
		{"old owner crashes at the switch", fault{PhaseSwitch, 0, "a", false}, "b", false},
		{"new owner crashes at the switch", fault{PhaseSwitch, 0, "b", false}, "a", true},
		{"old owner crashes and restarts in the flush", fault{PhaseFlush, 2, "a", true}, "b", false},
		{"old owner crashes and restarts in the hold", fault{PhaseHold, 0, "a", true}, "b", false},
		{"new owner crashes and restarts in the flush", fault{PhaseFlush, 0, "b", true}, "b", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := false
			a := midMoveArray(t, true, func(a *Array, p MovePoint) {
				if done || p.Phase != tc.f.phase || (p.LUN != tc.f.lun && p.Phase != PhaseHold && p.Phase != PhaseSwitch) {
					return
				}
				done = true
				_, err := a.CrashNode(tc.f.node)
				require.NoError(t, err)
				if tc.f.restart {
					require.NoError(t, a.RestartNode(tc.f.node))
				}
			})
			data := bytes.Repeat([]byte{0xab}, 8192)
			require.NoError(t, a.LUN(2).WriteAt(1, data, 0, false))
			require.NoError(t, a.LUN(0).WriteAt(1, bytes.Repeat([]byte{0xcd}, 4096), 4096, false))
			c, err := a.Move([]uint64{0, 2}, "b", alua.CauseBalance)
			require.True(t, done, "the fault ran")
			if tc.wantErr {
				require.ErrorIs(t, err, ErrMoveAbandoned)
				require.True(t, c.Failed)
			} else {
				require.NoError(t, err)
			}
			for _, id := range []uint64{0, 2} {
				owner := a.LUN(id).Owner()
				require.Equal(t, tc.wantOwner, owner.Name, "LUN %d", id)
				if !owner.Up() {
					// Left for the failover (the ownership core's), which
					// replays the mirror: do it as the core would.
					_, err := a.Move([]uint64{id}, "a", alua.CauseFailover)
					require.NoError(t, err)
				}
			}
			got := make([]byte, 8192)
			require.NoError(t, a.LUN(2).ReadAt(1, got, 0))
			require.Equal(t, data, got, "LUN 2's acknowledged write")
			require.NoError(t, a.LUN(0).ReadAt(1, got[:4096], 4096))
			require.Equal(t, bytes.Repeat([]byte{0xcd}, 4096), got[:4096], "LUN 0's acknowledged write")
		})
	}
}

// A node that crashes and comes back before any takeover moved its LUNs
// serves them with every acknowledged write (replayed from its partner's
// mirror), not from stale media.
func TestRestartBeforeTakeoverReplaysMirror(t *testing.T) {
	a := midMoveArray(t, true, func(*Array, MovePoint) {})
	data := bytes.Repeat([]byte{0x5a}, 4096)
	require.NoError(t, a.LUN(0).WriteAt(1, data, 0, false))
	_, err := a.CrashNode("a")
	require.NoError(t, err)
	require.NoError(t, a.RestartNode("a"))
	got := make([]byte, 4096)
	require.NoError(t, a.LUN(0).ReadAt(1, got, 0))
	require.Equal(t, data, got)
}

// A flush on a crashed cache fails: "flushed" would be a lie.
func TestFlushOnCrashedCacheFails(t *testing.T) {
	a := midMoveArray(t, true, func(*Array, MovePoint) {})
	_, err := a.CrashNode("a")
	require.NoError(t, err)
	require.Error(t, a.Node("a").Cache.Flush(0))
}
