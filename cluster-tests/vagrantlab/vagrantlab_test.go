package vagrantlab

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
)

func TestParseSSHConfig(t *testing.T) {
	out := `Host witness
  HostName 192.168.121.33
  User vagrant
  Port 22

Host ctrl-a
  HostName 192.168.121.40
  IdentityFile /w/.vagrant/machines/ctrl-a/libvirt/private_key
`
	names, hosts, err := ParseSSHConfig(out)
	require.NoError(t, err)
	assert.Equal(t, []string{"witness", "ctrl-a"}, names)
	assert.Equal(t, "192.168.121.40", hosts["ctrl-a"])

	for _, bad := range []string{"", "  HostName 1.2.3.4\nHost x\n", "Host a\n  User vagrant\n"} {
		_, _, err := ParseSSHConfig(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestNodeOf(t *testing.T) {
	for portal, node := range map[string]string{"10.77.1.10:3260": "a", "10.77.2.20:3260": "b", "10.77.1.101:3260": "?"} {
		assert.Equal(t, node, nodeOf(portal), portal)
	}
}

func io(ini, node string, lun uint64, reads, writes uint64) api.PathIO {
	return api.PathIO{Initiator: ini, Node: node, LUN: lun, Reads: reads, Writes: writes}
}

func TestFollow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const c = "iqn.2026-11.org.example:c1"
	type poll struct {
		ms   int
		node string
		ios  []api.PathIO
	}
	cases := []struct {
		name       string
		polls      []poll
		down       string // a node powered off after the polls
		now        int
		switchedMS int // -1: not switched
		already    bool
	}{
		{
			name: "moved: last at a 300 ms, first at b 450 ms",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 0, 0)}},
				{300, "a", []api.PathIO{io(c, "a", 0, 12, 5)}}, {450, "b", []api.PathIO{io(c, "b", 0, 1, 0)}},
				{900, "a", []api.PathIO{io(c, "a", 0, 12, 5)}}, {900, "b", []api.PathIO{io(c, "b", 0, 3, 2)}},
				{4900, "a", []api.PathIO{io(c, "a", 0, 12, 5)}},
			},
			now: 5000, switchedMS: 450,
		},
		{
			name: "old owner not polled since its last I/O: not switched yet",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 0, 0)}},
				{300, "a", []api.PathIO{io(c, "a", 0, 12, 5)}}, {450, "b", []api.PathIO{io(c, "b", 0, 1, 0)}},
				{900, "b", []api.PathIO{io(c, "b", 0, 3, 2)}}, {4900, "b", []api.PathIO{io(c, "b", 0, 9, 2)}},
			},
			now: 5000, switchedMS: -1,
		},
		{
			name: "old owner's slow answer holds I/O done before it: switched when it ran there last",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 0, 0)}},
				{300, "a", []api.PathIO{io(c, "a", 0, 12, 5)}}, {450, "b", []api.PathIO{io(c, "b", 0, 1, 0)}},
				{3500, "a", []api.PathIO{io(c, "a", 0, 13, 5)}}, {3600, "b", []api.PathIO{io(c, "b", 0, 30, 0)}},
				{5600, "a", []api.PathIO{io(c, "a", 0, 13, 5)}},
			},
			now: 6000, switchedMS: 3500,
		},
		{
			name: "old owner powered off: nothing completes there",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 0, 0)}},
				{300, "a", []api.PathIO{io(c, "a", 0, 12, 5)}}, {2450, "b", []api.PathIO{io(c, "b", 0, 1, 0)}},
			},
			down: "a", now: 5000, switchedMS: 2450,
		},
		{
			name: "old owner still served within the quiet window",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 0, 0)}},
				{450, "b", []api.PathIO{io(c, "b", 0, 1, 0)}}, {4000, "a", []api.PathIO{io(c, "a", 0, 11, 5)}},
			},
			now: 5000, switchedMS: -1,
		},
		{
			name: "old owner's last I/O after the new owner's first",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 0, 0)}},
				{450, "b", []api.PathIO{io(c, "b", 0, 1, 0)}}, {700, "a", []api.PathIO{io(c, "a", 0, 11, 5)}},
				{900, "b", []api.PathIO{io(c, "b", 0, 4, 0)}}, {4800, "a", []api.PathIO{io(c, "a", 0, 11, 5)}},
			},
			now: 5000, switchedMS: 700,
		},
		{
			name: "a few commands at the new owner, then a stall at the move: not switched",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 0, 0)}},
				{450, "b", []api.PathIO{io(c, "b", 0, 2, 0)}}, {2000, "a", []api.PathIO{io(c, "a", 0, 40, 5)}},
				{4900, "a", []api.PathIO{io(c, "a", 0, 40, 5)}}, {4900, "b", []api.PathIO{io(c, "b", 0, 2, 0)}},
			},
			now: 5000, switchedMS: -1,
		},
		{
			name: "restarted controller: its counters start again from zero",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 900, 100)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 7, 0)}},
				{2000, "a", []api.PathIO{io(c, "a", 0, 0, 0)}},
				{2500, "a", []api.PathIO{io(c, "a", 0, 2, 1)}}, {5900, "b", []api.PathIO{io(c, "b", 0, 7, 0)}},
			},
			now: 6000, switchedMS: 2500,
		},
		{
			name: "a session that ended lowers the sum: not I/O",
			polls: []poll{
				{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-100, "b", []api.PathIO{io(c, "b", 0, 50, 0)}},
				{300, "a", []api.PathIO{io(c, "a", 0, 12, 5)}}, {450, "b", []api.PathIO{io(c, "b", 0, 51, 0)}},
				{4000, "a", []api.PathIO{io(c, "a", 0, 3, 0)}},
			},
			now: 5000, switchedMS: 450,
		},
		{
			name: "already at the new owner: I/O there and none at the old one before",
			polls: []poll{
				{-1900, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-1900, "b", []api.PathIO{io(c, "b", 0, 1, 0)}},
				{-500, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-500, "b", []api.PathIO{io(c, "b", 0, 8, 0)}},
				{300, "b", []api.PathIO{io(c, "b", 0, 10, 0)}},
			},
			now: 5000, switchedMS: 300, already: true,
		},
		{
			name: "at both before: not already there",
			polls: []poll{
				{-1900, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {-1900, "b", []api.PathIO{io(c, "b", 0, 1, 0)}},
				{-500, "a", []api.PathIO{io(c, "a", 0, 11, 5)}}, {-500, "b", []api.PathIO{io(c, "b", 0, 8, 0)}},
				{300, "b", []api.PathIO{io(c, "b", 0, 10, 0)}},
			},
			now: 5000, switchedMS: 300,
		},
		{
			name:       "no I/O at the new owner",
			polls:      []poll{{-100, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}, {300, "a", []api.PathIO{io(c, "a", 0, 10, 5)}}},
			now:        5000,
			switchedMS: -1,
		},
		{
			name: "another LUN's and another host's I/O do not count",
			polls: []poll{
				{-100, "b", []api.PathIO{io(c, "b", 1, 0, 0), io("iqn.x:other", "b", 0, 0, 0)}},
				{400, "b", []api.PathIO{io(c, "b", 1, 5, 0), io("iqn.x:other", "b", 0, 5, 0)}},
			},
			now: 5000, switchedMS: -1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWatcher()
			for _, p := range tc.polls {
				w.Add(at(p.ms), p.node, p.ios)
			}
			if tc.down != "" {
				w.Down(tc.down)
			}
			from, to := "a", "b"
			if tc.name == "restarted controller: its counters start again from zero" { // b -> a
				from, to = "b", "a"
			}
			f := w.Follow(c, 0, from, to, t0, at(tc.now), 2*time.Second)
			assert.Equal(t, tc.already, f.Already)
			if tc.switchedMS < 0 {
				assert.True(t, f.Switched.IsZero(), "switched at %v", f.Switched.Sub(t0))
			} else {
				assert.Equal(t, at(tc.switchedMS), f.Switched)
			}
		})
	}
}

func TestLeftovers(t *testing.T) {
	left := Leftovers(
		[]string{"main_ctrl-a", "other_vm"},
		[]string{"default", "aluad-fabric-a", "vagrant-libvirt"},
		[]string{"aluad-VAGRANTSLASH-debian12_vagrant_box_image_0_1_box.img", "main_c1.img", "other.img"},
		"main_")
	assert.Equal(t, []string{"domain main_ctrl-a", "network aluad-fabric-a", "network vagrant-libvirt", "volume main_c1.img"}, left)
	assert.Empty(t, Leftovers([]string{"x"}, []string{"default"}, []string{"aluad-VAGRANTSLASH-debian12_vagrant_box_image_0_1_box.img"}, "main_"))
}

// The smoke's page: a judged client that never followed is "never", one
// whose configuration does not follow is measured and said not judged,
// the witness's fence lines are there, and any failure makes it FAIL.
func TestSmokeMarkdown(t *testing.T) {
	r := &Result{
		Steps: []StepResult{
			{Step: "move LUN 0 to b", Client: "c3", LUN: 0, From: "a", To: "b", FollowMS: 6287, Judged: true, StallMS: 2460},
			{Step: "move LUN 0 to b", Client: "c4", LUN: 0, From: "a", To: "b", FollowMS: -1, StallMS: 2400},
			{Step: "move LUN 0 to b", Client: "c4", LUN: 1, StallMS: 500},
		},
		FioErrors: map[string]int{"c3": 0, "c4": 0}, FioIOs: map[string]uint64{"c3": 10, "c4": 20},
		Fence:      []string{"fenced node a (10.77.3.10, boot x)"},
		Resolution: 40 * time.Millisecond, DurationS: 600,
	}
	md := r.Markdown()
	assert.Contains(t, md, "| move LUN 0 to b | c3 | 0 | 6287 ms | 2460 ms |")
	assert.Contains(t, md, "| move LUN 0 to b | c4 | 0 | never (not judged) | 2400 ms |")
	assert.Contains(t, md, "| move LUN 0 to b | c4 | 1 | - | 500 ms |")
	r.Steps = append(r.Steps, StepResult{Step: "move LUN 0 to a", Client: "c4", LUN: 0, From: "b", To: "a", Already: true, StallMS: 300})
	assert.Contains(t, r.Markdown(), "| move LUN 0 to a | c4 | 0 | already there | 300 ms |")
	assert.Contains(t, md, "witness: fenced node a (10.77.3.10, boot x)")
	assert.Contains(t, md, "c4: fio 20 I/Os, 0 errors")
	assert.Contains(t, md, "\nPASS\n")
	r.Steps[0].FollowMS = -1
	r.Failures = []string{"c3: move LUN 0 to b: its I/O to LUN 0 never ran on node b alone"}
	md = r.Markdown()
	assert.Contains(t, md, "| move LUN 0 to b | c3 | 0 | never | 2460 ms |")
	assert.Contains(t, md, "\nFAIL\n- c3: move LUN 0 to b")
}
