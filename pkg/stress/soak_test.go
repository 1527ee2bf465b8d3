package stress

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSoakShort: 64 sessions for a few seconds with every fault kind
// once: no mismatch, every read verified against the last acknowledged
// write, resources back within the bounds.
func TestSoakShort(t *testing.T) {
	res, err := Soak(context.Background(), SoakConfig{Sessions: 64, Hosts: 8, Duration: 12 * time.Second,
		FaultEvery: 2 * time.Second, Dir: t.TempDir(), LUNSize: 16 << 20, Seed: 1})
	require.NoError(t, err)
	t.Logf("%+v", res)
	require.Empty(t, res.Check(DefaultBounds))
	kinds := map[string]bool{}
	for _, f := range res.Faults {
		require.Empty(t, f.Err, f.What)
		kinds[strings.Fields(f.What)[0]] = true
	}
	for _, k := range []string{"crash", "restart", "port-down", "port-up", "path-down", "path-up", "move"} {
		require.True(t, kinds[k], "fault %s ran (%v)", k, res.Faults)
	}
	require.Positive(t, res.Reconnects, "the crash and cuts forced reconnects")
}

// TestAbuseShort: 24 attackers for a few seconds: the well-behaved
// sessions see no error and no bad data, the target serves a new session
// afterwards, every limit that the attacks aim at was exercised, and no
// goroutine is left behind.
func TestAbuseShort(t *testing.T) {
	res, err := Abuse(context.Background(), AbuseConfig{Attackers: 24, Good: 4, Duration: 6 * time.Second, Dir: t.TempDir(), Seed: 2})
	require.NoError(t, err)
	t.Logf("%+v", res)
	require.Empty(t, res.Check())
	for _, k := range attackKinds {
		require.Positive(t, res.Attacks[k], k)
	}
	require.Positive(t, res.Limits.TaskSetFull, "writes past the data budget were answered TASK SET FULL")
	require.Positive(t, res.Limits.OversizedWrites, "a 1 GiB write was refused")
	require.Positive(t, res.Limits.ProtocolErrors, "malformed PDUs closed their connections")
}
