package drive

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
)

// A LUN Run left out because the core had changed its mind (Live), which
// the core decides back to b.To while the batch's other LUNs move (the
// loop goroutine steps on meanwhile), is no rollback: a later batch still
// carries it and tells its own outcome. Reported as one (an adversarial
// review found it), the core took the LUN back to where the array had
// it, counted a failure (retry backoff) and dropped its latest change.
func TestRanLeavesASkippedLUNToItsLaterBatch(t *testing.T) {
	d, arr, _ := testDriver(t, alua.HostLinuxDMMP)
	// batch1: the core decides {0, 2} -> b.
	b1 := ownership.Batch{LUNs: []uint64{0, 2}, To: "b", Cause: alua.CauseBalance}
	require.NoError(t, d.Step(ownership.OwnerChanged{LUN: 0, Owner: "b", Cause: alua.CauseBalance},
		ownership.OwnerChanged{LUN: 2, Owner: "b", Cause: alua.CauseBalance}))
	d.pending[0]++
	d.pending[2]++
	// batch2, before the executor takes batch1: the core wants 0 on a again.
	require.NoError(t, d.Step(ownership.OwnerChanged{LUN: 0, Owner: "a", Cause: alua.CauseFailover}))
	d.pending[0]++
	require.Equal(t, []uint64{2}, d.Live(b1))

	told, _ := d.Run(b1, func(ids []uint64, to string, cause alua.Cause) (array.Change, error) {
		// While LUN 2 flushes, the loop goroutine decides batch3: 0 -> b.
		require.NoError(t, d.Step(ownership.OwnerChanged{LUN: 0, Owner: "b", Cause: alua.CauseFailover}))
		d.mu.Lock()
		d.pending[0]++
		d.mu.Unlock()
		return arr.Move(ids, to, cause)
	})
	evs := d.Ran(b1, told)
	require.Equal(t, "a", arr.LUN(0).Owner().Name)
	require.True(t, d.Pending(0), "batch2 and batch3 still carry LUN 0")
	require.Empty(t, evs, "LUN 0 was never part of batch1's moves (Live left it out) and later batches carry it; "+
		"Ran told the core a rollback that did not happen: %v", evs)
}
