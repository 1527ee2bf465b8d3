package lab

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The crash check end to end over iSCSI: with mirroring every
// acknowledged write survives node crashes; without it the array reports
// a loss and the read-back finds writes missing.
func TestCrashCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	on, err := RunCrash(ctx, CrashOptions{Iterations: 3, Mirror: true, Seed: 7, LUNs: 4, QD: 2})
	require.NoError(t, err)
	require.Equal(t, 3, on.Iterations)
	require.Positive(t, on.Acked)
	require.Zero(t, on.Lost, "acknowledged writes lost with mirroring on")
	require.Zero(t, on.ReportedLostBlocks)
	require.Positive(t, on.Replayed, "takeovers replayed mirrored pages")
	require.Equal(t, 3, on.Failbacks, "each restart failed back")

	off, err := RunCrash(ctx, CrashOptions{Iterations: 2, Mirror: false, Seed: 7, LUNs: 4, QD: 2})
	require.NoError(t, err)
	require.Positive(t, off.ReportedLostBlocks, "the array reports what it lost")
	require.Positive(t, off.Lost, "the read-back finds the lost writes")
	require.Zero(t, off.Replayed)
}
