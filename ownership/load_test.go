package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A LUN's load is summed in node order, so it is the same float every
// time: summed in map order its last bits changed from run to run, and so
// did the planner's decisions (the simulation's seeds did not replay).
func TestLoadSumsInNodeOrder(t *testing.T) {
	l := &lun{arrive: map[string]float64{"c": 0.3, "a": 0.1, "b": 0.2, "d": 1e-17}}
	want := ((0.1 + 0.2) + 0.3) + 1e-17
	for range 200 {
		require.Equal(t, want, l.load())
	}
}
