package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A short partial fault: h1 loses node a. The implicit array fails the
// LUNs over once and back once; explicit hosts fight over them (their
// checkers run every second here) until the repair. The fault lasts 6 s:
// with 4 s, under go test -race ./... on two cores, h2's STPG back came
// after the repair once, and no thrash was seen.
const shortScenario = `name short
luns 4 size=8MiB
host h1 linux-dmmp checker=1s
host h2 windows
workload luns=all hosts=all qd=1 rate=100
duration 12s
at 2s failover: cut host=h1 node=a
at 8s failback: restore host=h1 node=a
compare explicit-alua checker=1s
`

func TestRunScenario(t *testing.T) {
	s, err := ParseScenarioText(shortScenario)
	require.NoError(t, err)
	r, err := Run(context.Background(), s, RunOptions{Seed: 1})
	require.NoError(t, err)
	require.Len(t, r.Modes, 2)
	imp, exp := r.Modes[0], r.Modes[1]
	assert.Equal(t, "implicit", imp.Mode)
	assert.Equal(t, "explicit", exp.Mode)
	for _, m := range r.Modes {
		assert.Zero(t, m.Errors, "%s: no I/O error at any host", m.Mode)
		assert.Greater(t, m.IOs, 1000)
		require.Len(t, m.Events, 2)
	}
	// Implicit: LUNs 0 and 2 (preferred a) fail over to b, then back.
	assert.Equal(t, 2, imp.Events[0].Moves)
	assert.Zero(t, imp.Events[0].Thrash)
	assert.Equal(t, 2, imp.Events[1].Moves)
	causes := map[string]int{}
	for _, m := range imp.Moves {
		causes[m.Cause] += len(m.LUNs)
	}
	assert.Equal(t, map[string]int{"failover": 2, "failback": 2}, causes)
	// Each event says how long each host took to follow its moves; the
	// slowest of them is the event's follow time.
	for _, e := range imp.Events {
		require.NotEmpty(t, e.HostFollow, e.Label)
		var slowest time.Duration
		for _, d := range e.HostFollow {
			slowest = max(slowest, d)
		}
		assert.Equal(t, e.Follow, slowest, e.Label)
	}
	// Explicit: h1 moves them to b by STPG, h2 moves them back: thrash.
	assert.Positive(t, exp.Events[0].Thrash)
	assert.Positive(t, exp.Hosts[0].Stats.STPGs)
	assert.Positive(t, exp.Hosts[1].Stats.STPGs)
	for _, m := range exp.Moves {
		assert.Equal(t, "stpg", m.Cause)
	}
	// Explicit moves put 04/0A in the hosts' way; implicit ones do not.
	assert.Zero(t, imp.Hosts[1].Stats.Transitioning)
	assert.Positive(t, exp.Hosts[1].Stats.Transitioning)

	var table strings.Builder
	r.Table(&table)
	assert.Contains(t, table.String(), "failover  reduction")
	dir := t.TempDir()
	files, err := WriteReport(dir, r, s, shortScenario)
	require.NoError(t, err)
	assert.Len(t, files, 4)
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	require.NoError(t, err)
	assert.Contains(t, string(page), "<svg")
	assert.Contains(t, string(page), "explicit ALUA: worst I/O latency")
	js, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	assert.Contains(t, string(js), `"thrash"`)
}

// The ownership scenarios, shortened: a rolling reboot moves nothing and
// a real cut still fails over; an operator's move on a light load is
// respected; a flapping path ends damped on the reachable owner with the
// report raised.
func TestOwnershipScenarios(t *testing.T) {
	causes := func(m *ModeResult) map[string]int {
		out := map[string]int{}
		for _, mv := range m.Moves {
			out[mv.Cause] += len(mv.LUNs)
		}
		return out
	}
	run := func(t *testing.T, text string) *ModeResult {
		s, err := ParseScenarioText(text)
		require.NoError(t, err)
		r, err := Run(context.Background(), s, RunOptions{Seed: 1})
		require.NoError(t, err)
		require.Len(t, r.Modes, 1)
		m := r.Modes[0]
		assert.Zero(t, m.Errors, "no I/O error at any host")
		return m
	}
	t.Run("rolling reboot", func(t *testing.T) {
		m := run(t, `name rr
luns 2 size=8MiB
host h1 linux-dmmp
host h2 linux-dmmp
host h3 linux-dmmp
workload luns=all hosts=all qd=1 rate=100
duration 9s
at 1s reboot host=h1 down=300ms gap=100ms
at 3s reboot host=h2 down=300ms gap=100ms
at 5s reboot host=h3 down=300ms gap=100ms
at 7s cut host=h1 node=a
`)
		for _, e := range m.Events[:3] {
			assert.Zero(t, e.Moves, "%s: a reboot moves nothing", e.Label)
		}
		assert.Equal(t, map[string]int{"failover": 1}, causes(m), "only the cut moves LUN 0")
	})
	t.Run("light operator move", func(t *testing.T) {
		m := run(t, `name light
luns 4 size=8MiB
load light
host h1 linux-dmmp
host h2 linux-dmmp
workload luns=all hosts=all qd=1 rate=100
duration 8s
at 1s move lun=0 node=b
`)
		assert.Equal(t, map[string]int{"manual": 1}, causes(m), "no balance move follows the operator's")
	})
	t.Run("flapping", func(t *testing.T) {
		m := run(t, `name flap
luns 2 size=8MiB
host h1 linux-dmmp checker=1s
host h2 linux-dmmp
workload luns=all hosts=all qd=1 rate=100
duration 17s
at 1s cut host=h1 node=a
at 2s restore host=h1 node=a
at 6s cut host=h1 node=a
at 7s restore host=h1 node=a
at 11s cut host=h1 node=a
at 12s restore host=h1 node=a
`)
		c := causes(m)
		assert.Equal(t, 3, c["failover"], "%v", m.Moves)
		assert.Equal(t, 2, c["failback"], "the third failover is not failed back: %v", m.Moves)
		raised := false
		for _, r := range m.Reports {
			if r.Raised && strings.HasPrefix(r.Text, "path-flapping: LUN 0") {
				raised = true
			}
		}
		assert.True(t, raised, "Path Flapping raised for LUN 0: %v", m.Reports)
	})
}
