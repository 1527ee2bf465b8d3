package vagrantlab

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"sort"
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

// traffic is what a controller answers about one host's I/O to LUN 0
// over time: polled every 100 ms from from to to (ms after the action),
// the count rising in each poll inside a running interval.
type traffic struct {
	node     string
	from, to int
	running  [][2]int
	base     uint64 // the count at from
}

func (tr traffic) polls(ini string) []poll {
	var out []poll
	n := tr.base
	for ms := tr.from; ms <= tr.to; ms += 100 {
		for _, r := range tr.running {
			if ms > r[0] && ms <= r[1] {
				n += 3
			}
		}
		out = append(out, poll{ms, ms, tr.node, []api.PathIO{io(ini, tr.node, 0, n, 0)}})
	}
	return out
}

type poll struct {
	asked, ms int
	node      string
	ios       []api.PathIO
}

func TestFollow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const c = "iqn.2026-11.org.example:c1"
	join := func(ps ...[]poll) (out []poll) {
		for _, p := range ps {
			out = append(out, p...)
		}
		sort.SliceStable(out, func(i, j int) bool { return out[i].ms < out[j].ms })
		return out
	}
	tr := func(node string, from, to int, running ...[2]int) []poll {
		return traffic{node: node, from: from, to: to, running: running, base: 100}.polls(c)
	}
	cases := []struct {
		name       string
		polls      []poll
		from, to   string
		down       string // a node powered off after the polls
		now        int
		switchedMS int // -1: not switched
		already    bool
	}{
		{
			name:  "moved: last at a 300 ms, b from 400 ms",
			polls: join(tr("a", -1000, 5000, [2]int{-1000, 300}), tr("b", -1000, 5000, [2]int{300, 5000})),
			now:   5000, switchedMS: 400,
		},
		{
			name:  "old owner not polled since its last I/O: not switched yet",
			polls: join(tr("a", -1000, 300, [2]int{-1000, 300}), tr("b", -1000, 5000, [2]int{300, 5000})),
			now:   5000, switchedMS: -1,
		},
		{
			name: "old owner's slow answer holds I/O done before it: switched when it ran there last",
			polls: join(tr("a", -1000, 1000, [2]int{-1000, 300}), tr("b", -1000, 6000, [2]int{300, 6000}),
				[]poll{{1100, 3500, "a", []api.PathIO{io(c, "a", 0, 200, 0)}}}, traffic{node: "a", from: 3600, to: 6000, base: 200}.polls(c)),
			now: 6000, switchedMS: 3500,
		},
		{
			name:  "old owner powered off: nothing completes there",
			polls: join(tr("a", -1000, 300, [2]int{-1000, 300}), tr("b", -1000, 5000, [2]int{2400, 5000})),
			down:  "a", now: 5000, switchedMS: 2500,
		},
		{
			name:  "old owner still served within the quiet window",
			polls: join(tr("a", -1000, 5000, [2]int{-1000, 4000}), tr("b", -1000, 5000, [2]int{400, 5000})),
			now:   5000, switchedMS: -1,
		},
		{
			name:  "old owner's last I/O after the new owner's first",
			polls: join(tr("a", -1000, 5000, [2]int{-1000, 700}), tr("b", -1000, 5000, [2]int{400, 5000})),
			now:   5000, switchedMS: 700,
		},
		{
			name:  "a few commands at the new owner, then a stall at the move: not switched",
			polls: join(tr("a", -1000, 4900, [2]int{-1000, 2000}), tr("b", -1000, 4900, [2]int{400, 600})),
			now:   5000, switchedMS: -1,
		},
		{
			name:  "a burst at the new owner after the old owner's last, then nothing: not switched",
			polls: join(tr("a", -1000, 9000, [2]int{-1000, 1000}), tr("b", -1000, 9000, [2]int{1400, 1500})),
			now:   9000, switchedMS: -1,
		},
		{
			name: "restarted controller: its counters start again from zero",
			polls: join(tr("b", -1000, 6000, [2]int{-1000, 0}),
				[]poll{{-100, -100, "a", []api.PathIO{io(c, "a", 0, 900, 100)}}, {2000, 2000, "a", []api.PathIO{io(c, "a", 0, 0, 0)}}},
				traffic{node: "a", from: 2100, to: 6000, running: [][2]int{{2000, 6000}}}.polls(c)),
			from: "b", to: "a", now: 6000, switchedMS: 2100,
		},
		{
			name: "a session that ended lowers the sum: not I/O",
			polls: join(tr("a", -1000, 3900, [2]int{-1000, 300}), tr("b", -1000, 5000, [2]int{300, 5000}),
				traffic{node: "a", from: 4000, to: 5000, base: 3}.polls(c)),
			now: 5000, switchedMS: 400,
		},
		{
			name:  "already at the new owner: I/O there and none at the old one before",
			polls: join(tr("a", -3000, 5000), tr("b", -3000, 5000, [2]int{-3000, 5000})),
			now:   5000, switchedMS: 0, already: true,
		},
		{
			name:  "at both before: not already there",
			polls: join(tr("a", -3000, 5000, [2]int{-3000, -1000}), tr("b", -3000, 5000, [2]int{-3000, 5000})),
			now:   5000, switchedMS: 0,
		},
		{
			name:  "no I/O at the new owner",
			polls: join(tr("a", -1000, 5000, [2]int{-1000, 300}), tr("b", -1000, 5000)),
			now:   5000, switchedMS: -1,
		},
		{
			name: "another LUN's and another host's I/O do not count",
			polls: []poll{
				{-100, -100, "b", []api.PathIO{io(c, "b", 1, 0, 0), io("iqn.x:other", "b", 0, 0, 0)}},
				{400, 400, "b", []api.PathIO{io(c, "b", 1, 5, 0), io("iqn.x:other", "b", 0, 5, 0)}},
				{4000, 4000, "b", []api.PathIO{io(c, "b", 1, 9, 0), io("iqn.x:other", "b", 0, 9, 0)}},
			},
			now: 5000, switchedMS: -1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWatcher()
			for _, p := range tc.polls {
				w.AddPoll(at(p.asked), at(p.ms), p.node, p.ios)
			}
			if tc.down != "" {
				w.Down(tc.down)
			}
			from, to := cmp.Or(tc.from, "a"), cmp.Or(tc.to, "b")
			f := w.Follow(c, 0, from, to, t0, at(tc.now), 2*time.Second)
			assert.Equal(t, tc.already, f.Already)
			if tc.switchedMS < 0 {
				assert.True(t, f.Switched.IsZero(), "switched at %v", f.Switched.Sub(t0))
			} else {
				assert.Equal(t, at(tc.switchedMS), f.Switched, "switched at %v", f.Switched.Sub(t0))
			}
		})
	}
}

func TestEvidence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := Follow{FirstNew: t0.Add(1500 * time.Millisecond), LastNew: t0.Add(3 * time.Second), LastOld: t0.Add(2 * time.Second), OldKnown: t0.Add(4 * time.Second)}
	assert.Equal(t, "at a first +1.5s, last +3.0s; at b last +2.0s, polled up to +4.0s; step ended +9.0s", f.Evidence("b", "a", t0, t0.Add(9*time.Second)))
	f.OldDown = true
	assert.Contains(t, f.Evidence("b", "a", t0, t0.Add(9*time.Second)), "at b last +2.0s, powered off")
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

func TestUnstableReport(t *testing.T) {
	serve := func(status int, body string) Controller {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/reports" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return Controller{Base: srv.URL, Token: "t"}
	}
	raised := `[{"condition":"node-unstable","node":"a","cause":"node a has been failing again and again"}]`
	other := `[{"condition":"node-offline","node":"a","cause":"node a is offline"}]`
	follower := serve(http.StatusConflict, `{"error":"the ownership core runs on the cluster's leader"}`)

	a, b := serve(http.StatusOK, raised), serve(http.StatusOK, raised)
	a.Node, b.Node = "a", "b"
	why, err := unstableReport([]Controller{a, b}, "", "a")
	require.NoError(t, err)
	assert.Equal(t, "node a has been failing again and again", why)

	// b does not lead (409): a answers.
	follower.Node = "b"
	why, err = unstableReport([]Controller{a, follower}, "", "a")
	require.NoError(t, err)
	assert.NotEmpty(t, why)

	// Another condition, or another node's: none.
	quiet := serve(http.StatusOK, other)
	quiet.Node = "b"
	why, err = unstableReport([]Controller{a, quiet}, "", "a")
	require.NoError(t, err)
	assert.Empty(t, why, "the first controller that answers is believed")
	why, _ = unstableReport([]Controller{a, quiet}, "", "b")
	assert.Empty(t, why)

	// The controller that is off is not asked; nobody answers: the error.
	why, err = unstableReport([]Controller{a, follower}, "a", "a")
	assert.Empty(t, why)
	assert.Error(t, err)
}
