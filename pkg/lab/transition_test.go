package lab

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The transition benchmark end to end: a crash fails b's LUNs over, the
// restart fails them back in one batch, and the skew is rebalanced by the
// core; the hosts see no I/O error throughout. (Its latency figures are
// printed by 'aluad lab --scenario transition', never asserted.)
func TestTransitionRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := RunTransition(ctx, TransitionOptions{LUNs: 4, QD: 1, ReadPct: 70, Steady: time.Second, Seed: 3})
	require.NoError(t, err)
	require.Zero(t, r.Errors)
	require.Positive(t, r.Baseline.Count)
	var causes []string
	moved := map[string][]uint64{}
	for _, m := range r.Moments {
		causes = append(causes, m.Event)
		moved[m.Event] = append(moved[m.Event], m.Batch...)
		require.Positive(t, m.InFlight, "I/O ran through the %s move", m.Event)
	}
	require.Equal(t, "failover", causes[0])
	require.ElementsMatch(t, []uint64{1, 3}, moved["failover"])
	require.ElementsMatch(t, []uint64{1, 3}, moved["failback"])
	require.True(t, slices.Contains(causes, "balance"), "the skew was rebalanced: %v", causes)
}
