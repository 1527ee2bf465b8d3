package qemulab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/qualify"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMatrixPlan(t *testing.T) {
	cfgs := MatrixConfigs[:3]
	plan := matrixPlan([]string{"bullseye", "sid"}, cfgs, true, 2, 4)
	// 3 configurations x 2 types = 6 rows a release: two lab runs (4 + 2
	// guests); two releases, two repetitions.
	require.Len(t, plan, 8)
	assert.Equal(t, []int{1, 1, 1, 1, 2, 2, 2, 2}, func() (r []int) {
		for _, p := range plan {
			r = append(r, p.Rep)
		}
		return
	}(), "the repetitions go outer")
	assert.Equal(t, "bullseye", plan[0].Release)
	assert.Equal(t, "sid", plan[2].Release)
	require.Len(t, plan[0].Hosts, 4)
	require.Len(t, plan[1].Hosts, 2)
	assert.Equal(t, qualify.MatrixRow{Release: "bullseye", Config: "defaults", Type: "linux-dmmp", Right: true}, plan[0].Hosts[0].Row)
	assert.Equal(t, qualify.MatrixRow{Release: "bullseye", Config: "alua-immediate", Type: "linux-dmmp", Right: true}, plan[0].Hosts[2].Row)
	assert.Equal(t, qualify.MatrixRow{Release: "bullseye", Config: "defaults", Type: "linux"}, plan[0].Hosts[1].Row)
	assert.Equal(t, "m2", plan[0].Hosts[1].Host)
	assert.Equal(t, "m1", plan[1].Hosts[0].Host, "host names restart in each lab run")

	specs, err := plan[1].clients()
	require.NoError(t, err)
	assert.Equal(t, "multipath-followover.conf", specs[0].Conf)
	assert.Equal(t, "bullseye", specs[0].Release)

	// Without the wrong types: 3 rows, one run a release and repetition.
	assert.Len(t, matrixPlan([]string{"trixie"}, cfgs, false, 3, 4), 3)

	// A configuration no host type fixes (multibus) has no right row, and
	// its declared row is there even without the wrong types.
	mb, err := MatrixConfigByName("multibus-rr")
	require.NoError(t, err)
	p := matrixPlan([]string{"sid"}, []MatrixConfig{mb}, false, 1, 4)
	require.Len(t, p, 1)
	require.Len(t, p[0].Hosts, 1)
	assert.False(t, p[0].Hosts[0].Row.Right)

	// Every configuration's file exists, and its types are host types.
	types := map[string]bool{"": true, "linux": true, "linux-dmmp": true, "legacy": true}
	for _, c := range MatrixConfigs {
		_, err := os.Stat(filepath.Join("..", "guest", c.Conf))
		assert.NoError(t, err, c.Name)
		assert.NotEqual(t, c.Right, c.Wrong, c.Name)
		assert.True(t, types[c.Right] && types[c.Wrong] && c.Wrong != "", c.Name)
	}
	_, err = MatrixConfigByName("multibus-xx")
	assert.ErrorContains(t, err, "no configuration")
}

func TestReadMatrix(t *testing.T) {
	dir := t.TempDir()
	f := func(v float64) *float64 { return &v }
	hosts := []qualify.MatrixHost{{Host: "m1", Row: qualify.MatrixRow{Release: "sid", Config: "alua-immediate", Type: "linux", Right: true}}}
	for i, follow := range []float64{1200, 900, 1500} {
		d := filepath.Join(dir, "run-0"+string(rune('1'+i)))
		rep := qualify.Report{Schedule: "matrix", Start: time.Unix(0, 0).UTC(),
			Steps:   []qualify.Step{{Event: "discovery"}, {Index: 1, Event: qualify.EvMove, Name: "move LUN 0 to b", Cause: "manual"}},
			Results: []qualify.Result{{Host: "m1", Step: 1, FollowMs: f(follow), StallMs: follow / 2, Verdict: "pass"}}}
		require.NoError(t, writeJSON(filepath.Join(d, "qualify", "results.json"), rep))
		require.NoError(t, writeJSON(filepath.Join(d, matrixRunFile), matrixRun{Release: "sid", Rep: i + 1, Hosts: hosts}))
	}
	// A run that failed before qualify wrote its report.
	require.NoError(t, writeJSON(filepath.Join(dir, "run-04", matrixRunFile), matrixRun{Release: "sid", Rep: 4, Hosts: hosts, Error: "guest m1 did not boot"}))

	m, err := ReadMatrix(dir, nil)
	require.NoError(t, err)
	require.Len(t, m.Rows, 1)
	c := m.Rows[0].Cells[0]
	assert.Equal(t, qualify.Spread{Median: 1200, Min: 900, Max: 1500, N: 3}, c.Follow)
	assert.Equal(t, "pass", c.Verdict)
	assert.Equal(t, []string{"run 4: guest m1 did not boot"}, m.Errors)

	require.NoError(t, WriteMatrix(dir, filepath.Join("..", "guest"), m, 3))
	md, err := os.ReadFile(filepath.Join(dir, "matrix.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "### sid\n\nUse alua-immediate, declared `linux`: every cell passed in every run.")
	assert.Contains(t, string(md), "path_grouping_policy group_by_prio")
	for _, n := range []string{"matrix.html", "matrix.json", "matrix.md", "junit.xml"} {
		st, err := os.Stat(filepath.Join(dir, n))
		require.NoError(t, err, n)
		assert.Positive(t, st.Size(), n)
	}
	_, err = ReadMatrix(t.TempDir(), nil)
	assert.ErrorContains(t, err, "no lab run")

	// A matrix is never written over an earlier one's runs.
	_, err = RunMatrix(context.Background(), MatrixOptions{Out: dir, Releases: []string{"sid"}})
	assert.ErrorContains(t, err, "earlier matrix")
	_, err = RunMatrix(context.Background(), MatrixOptions{Out: t.TempDir(), Releases: []string{"sid", "sid"}})
	assert.ErrorContains(t, err, "named twice")

	// A report whose host was declared otherwise than its record says
	// belongs to another matrix.
	d := filepath.Join(dir, "run-05")
	require.NoError(t, writeJSON(filepath.Join(d, "qualify", "results.json"), qualify.Report{Hosts: []qualify.HostReport{{Name: "m1", Type: "linux-dmmp"}}}))
	require.NoError(t, writeJSON(filepath.Join(d, matrixRunFile), matrixRun{Release: "sid", Rep: 5, Hosts: hosts}))
	_, err = ReadMatrix(dir, nil)
	assert.ErrorContains(t, err, "another matrix")
}

func TestDeviceSection(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "guest", "multipath-alua.conf"))
	require.NoError(t, err)
	dev := deviceSection(string(b))
	assert.True(t, strings.HasPrefix(dev, "devices {"), dev)
	assert.True(t, strings.HasSuffix(dev, "}"), dev)
	assert.NotContains(t, dev, "find_multipaths", "the lab's defaults section is not the array's stanza")
	assert.Empty(t, deviceSection("# only comments\n"))
}
