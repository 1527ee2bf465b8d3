package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A LUN's load is summed in node order, so it is the same float every
// time: summed in map order its last bits changed from run to run, and so
// did the planner's decisions (the simulation's seeds did not replay).
func TestLoadSumsInNodeOrder(t *testing.T) {
	a, b, c, d := 0.1, 0.2, 0.3, 1e-17 // variables: Go folds constant sums exactly
	l := &lun{arrive: map[string]float64{"c": c, "a": a, "b": b, "d": d}}
	want := ((a + b) + c) + d
	require.NotEqual(t, want, ((c+b)+a)+d, "the order must matter for this test to mean anything")
	for range 200 {
		require.Equal(t, want, l.load())
	}
}
