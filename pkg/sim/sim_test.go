package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/media"
)

// TestRegressions replays the committed scripts in testdata/ (shrunk
// failures and hand-written sequences) with their golden event logs;
// regenerate with -rewrite. Commands:
//
//	run      the input is a script; prints its log and "ok" or the violation
func TestRegressions(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			require.Equal(t, "run", d.Cmd)
			s, err := ParseScript(d.Input)
			require.NoError(t, err)
			r, err := Run(s)
			require.NoError(t, err)
			if r.Violation != nil {
				return r.Log + "FAIL " + r.Violation.Error() + "\n"
			}
			return r.Log + "ok\n"
		})
	})
}

// TestSeeds runs a fixed budget of generated seeds (ALUAD_SIM_SEEDS
// overrides the count; aluad sim runs any number).
func TestSeeds(t *testing.T) {
	n := 12
	if v, err := strconv.Atoi(os.Getenv("ALUAD_SIM_SEEDS")); err == nil && v > 0 {
		n = v
	}
	events := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r, err := RunSeed(seed, 300)
		require.NoError(t, err)
		events += r.Events
		if v := r.Result.Violation; v != nil {
			s := Shrink(r.Script, v.Name, 2000, time.Now().Add(30*time.Second))
			t.Fatalf("seed %d: %v\nshrunk script:\n%s", seed, v, s)
		}
	}
	t.Logf("%d seeds, %d events", n, events)
}

// The same script gives a byte-identical log, and a script survives a
// format/parse round trip.
func TestDeterministic(t *testing.T) {
	for _, seed := range []uint64{3, 17, 91} {
		s := Generate(seed, 300)
		a, err := Run(s)
		require.NoError(t, err)
		b, err := Run(s)
		require.NoError(t, err)
		require.Equal(t, a.Log, b.Log, "seed %d", seed)
		require.Greater(t, a.Stats.Commands, 100)
		p, err := ParseScript(s.String())
		require.NoError(t, err)
		require.Equal(t, s.String(), p.String())
		c, err := Run(p)
		require.NoError(t, err)
		require.Equal(t, a.Log, c.Log, "seed %d after a round trip", seed)
	}
}

// dropWrites is a planted defect: media that acknowledges writes to
// [lo, hi) without keeping them.
type dropWrites struct {
	media.Store
	lo, hi int64
}

func (d dropWrites) WriteAt(p []byte, off int64) error {
	if off < d.hi && off+int64(len(p)) > d.lo {
		return nil
	}
	return d.Store.WriteAt(p, off)
}

const plantScript = `
nodes a:1,b:1
lun 0 pref=a pages=8
host h1 type=linux paths=1,2 luns=0
login h1
write h1 0 lba=0 n=8
write h1 0 lba=8 n=8
destage a pages=8
crash a
tick
read h1 0 lba=0 n=16
`

// The invariants catch planted defects: media that loses writes, and a
// loss report that is missing; each failure shrinks to a script that
// still shows it.
func TestInvariantsCatchPlantedDefects(t *testing.T) {
	s, err := ParseScript(plantScript)
	require.NoError(t, err)
	r, err := Run(s)
	require.NoError(t, err)
	require.Nil(t, r.Violation, "the script is clean on a sound array:\n%s", r.Log)

	w, err := newWorldWrapped(s, func(_ uint64, st media.Store) media.Store { return dropWrites{st, 4096, 8192} })
	require.NoError(t, err)
	w.run()
	require.NotNil(t, w.viol, w.log.String())
	require.Equal(t, "acked-write-lost", w.viol.Name, w.viol.Error())

	// Mirroring off, the same crash loses the write-back data: it must be
	// reported lost, and it is.
	off, err := ParseScript("mirror off\n" + strings.ReplaceAll(plantScript, "destage a pages=8\n", ""))
	require.NoError(t, err)
	r, err = Run(off)
	require.NoError(t, err)
	require.Nil(t, r.Violation, r.Log)
	require.Contains(t, r.Log, "crash a: lost LUN 0 pages [0 1]")
}

// A failing seed shrinks to a smaller script that breaks the same
// invariant (the planted defect again, found from a generated seed).
func TestShrinkKeepsTheFailure(t *testing.T) {
	s := Generate(5, 200)
	fails := func(c Script) *Violation {
		w, err := newWorldWrapped(c, func(_ uint64, st media.Store) media.Store { return dropWrites{st, 0, 1 << 30} })
		require.NoError(t, err)
		w.run()
		return w.viol
	}
	v := fails(s)
	require.NotNil(t, v)
	small := shrinkWith(s, v.Name, 3000, time.Now().Add(time.Minute), func(c Script) bool {
		x := fails(c)
		return x != nil && x.Name == v.Name
	})
	require.Less(t, len(small), len(s))
	require.Equal(t, v.Name, fails(small).Name)
	t.Logf("%s: %d lines shrunk to %d", v.Name, len(s), len(small))
}

func FuzzParseScript(f *testing.F) {
	f.Add(plantScript)
	f.Add(Generate(1, 40).String())
	f.Add("@hold:3 crash a\n@nope x\nlun x\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseScript(text)
		if err != nil {
			return
		}
		again, err := ParseScript(s.String())
		if err != nil {
			t.Fatalf("a formatted script does not parse: %v\n%s", err, s)
		}
		if fmt.Sprint(again) != fmt.Sprint(s) {
			t.Fatalf("round trip changed the script:\n%s\n%s", s, again)
		}
	})
}

// flapScript: h1's only path to a (LUN 0's preferred owner) is cut and
// mended n times, 40 ticks apart: a flap slower than the failback window.
func flapScript(n int) string {
	var b strings.Builder
	b.WriteString("nodes a:1,b:1\nlun 0 pref=a pages=4\nhost h1 type=linux paths=1,2 luns=0\nlogin h1\nwrite h1 0 lba=0 n=4\ntick n=10\n")
	for range n {
		b.WriteString("cut h1 1\nwrite h1 0 lba=0 n=4\ntick n=20\nmend h1 1\nwrite h1 0 lba=0 n=4\ntick n=20\n")
	}
	return b.String()
}

// The ownership invariants catch planted defects of the core (the old
// behaviour each guards against), and the same scripts are clean on the
// core as it is.
func TestOwnershipInvariantsCatchPlantedDefects(t *testing.T) {
	for _, tt := range []struct {
		name, script string
		cfg          func(*ownership.Config)
		in           func(ownership.Event) ownership.Event
		world        func(*World)
		want         string
	}{{
		// A host of a STANDBY type loses both paths to node a while a
		// host that reaches a only keeps LUN 0 there: its paths to b must
		// be handed off to ANO for it. The old array left them STANDBY,
		// and the host had no path it could do I/O on.
		name: "STANDBY host cut off from the owner",
		script: `nodes a:2,b:2
lun 0 pref=a pages=4
host h1 type=linux-dmmp paths=1,2,3,4 luns=0
host h2 type=linux paths=1 luns=0
login h1
login h2
write h1 0 lba=0 n=4
write h2 0 lba=0 n=4
tick n=40
cut h1 1
cut h1 2
write h1 0 lba=0 n=4
write h2 0 lba=0 n=4
tick n=3
write h1 0 lba=0 n=4
tick n=3
`,
		world: func(w *World) { w.noHandoff = true },
		want:  "host-io",
	}, {
		// A cluster host reboots: Logout on every path, then a login a
		// tick with its RTPGs. Told apart from faults, and with the
		// returning host held back until its paths are stable, nothing
		// moves; the old core (logouts as faults, no wait) moves LUN 1 to
		// a as soon as h1 is back on a alone.
		name: "reboot moves nothing",
		script: `nodes a:1,b:1
lun 0 pref=a pages=4
lun 1 pref=b pages=4
host h1 type=linux paths=1,2 luns=0,1
host h2 type=linux paths=1,2 luns=0,1
login h1
login h2
tick n=10
reboot h1
tick n=12
read h1 1 lba=0 n=4
`,
		cfg:  func(c *ownership.Config) { c.DiscoveryWindow, c.Settle = 0, 0 },
		in:   asFault,
		want: "orderly-move",
	}, {
		// A path that flaps slower than the failback window: damping
		// holds the LUN on b after three failovers; without it, it
		// ping-pongs for as long as the path flaps.
		name:   "flapping is damped",
		script: flapScript(20),
		cfg:    func(c *ownership.Config) { c.DampCount = 1000 },
		want:   "move-storm",
	}, {
		// A host without multipath scans every path (twice, as a rescan
		// does) and uses node a: MND is raised for b. A core that takes
		// every interval of commands (its writes too) as arriving on b's
		// path sees a checker probing b and misses it.
		name: "MND for a scanning host",
		script: "nodes a:1,b:1\nlun 0 pref=a pages=4\nhost h1 type=linux paths=1,2 luns=0 mp=none\nlogin h1\n" +
			strings.Repeat("scan h1\n"+strings.Repeat("write h1 0 lba=0 n=4\ntick\n", 4), 2) +
			strings.Repeat("write h1 0 lba=0 n=4\ntick\n", 12) + "tick n=10\n",
		cfg:  func(c *ownership.Config) { c.MediaTicks, c.DiscoveryWindow = 1, 2 },
		in:   pathOnB,
		want: "mnd-missed",
	}, {
		// A host without multipath on a STANDBY type uses node a; LUN 0
		// is on b. Its one path must not report STANDBY: without the
		// hand-off it does, though its path to b is AO (host-io judged by
		// the path a host without multipath uses, not by every path).
		name: "host without multipath on a STANDBY type",
		script: "nodes a:1,b:1\nlun 0 pref=b pages=4\nhost h1 type=linux-dmmp paths=1,2 luns=0 kind=nohandler\nlogin h1\n" +
			strings.Repeat("write h1 0 lba=0 n=4\ntick\n", 4),
		world: func(w *World) { w.noHandoff = true },
		want:  "host-io",
	}, {
		// scsi_dh_alua without multipath reads RTPG on every path as it
		// attaches, and at a rescan, and uses node a only: MND for b. A
		// core that counts every command (the RTPG after each write too)
		// as arriving on the host's other path, b's, takes that for a
		// checker probing b and misses it.
		name: "MND for scsi_dh_alua without multipath",
		script: "nodes a:1,b:1\nlun 0 pref=a pages=4\nhost h1 type=linux paths=1,2 luns=0 kind=dh-alua-nomp\nlogin h1\n" +
			strings.Repeat("write h1 0 lba=0 n=4\ntick\n", 6) + "scan h1\n" +
			strings.Repeat("write h1 0 lba=0 n=4\nrtpg h1 0\ntick\n", 14) + "tick n=10\n",
		cfg:  func(c *ownership.Config) { c.MediaTicks, c.DiscoveryWindow = 1, 2 },
		in:   rtpgOnB,
		want: "mnd-missed",
	}, {
		// MSDSM (Round Robin with Subset) probes no idle path: its I/O
		// goes to node a, which owns the LUN, and node b hears only the
		// RTPGs it read as it claimed each path. Its initiator's name
		// says Windows, where only MSDSM reads RTPG: no MND. A core that
		// does not know the name raises MND for b.
		name: "no MND for Windows at its defaults",
		script: "nodes a:1,b:1\nlun 0 pref=a pages=4\nhost h1 type=windows paths=1,2 luns=0 kind=win-rrws\nlogin h1\n" +
			strings.Repeat("write h1 0 lba=0 n=4\ntick\n", 20),
		in:   anonymous,
		want: "mnd-false",
	}, {
		// dm-multipath at its defaults reads RTPG only as a path attaches
		// and after a unit attention; its checker's TEST UNIT READYs on
		// the paths to b are all the array hears there. A core that
		// counts only RTPGs and media I/O as discovery raises MND for it.
		name: "no MND for dm-multipath at its defaults",
		script: "nodes a:1,b:1\nlun 0 pref=a pages=4\nhost h1 type=linux paths=1,2 luns=0 kind=dmmp-defaults\nlogin h1\n" +
			strings.Repeat("write h1 0 lba=0 n=4\ntick\n", 20),
		in: func(e ownership.Event) ownership.Event {
			if pl, ok := e.(ownership.PathLatency); ok {
				pl.Ops = 0
				return pl
			}
			return e
		},
		want: "mnd-false",
	}, {
		// Light I/O with slow responses: no balance move below the
		// stress floor; a core that takes any expansion for stress moves.
		name: "no balance below the floor",
		script: `nodes a:1,b:1
lun 0 pref=a pages=4
lun 1 pref=a pages=4
host h1 type=linux paths=1,2 luns=0,1
login h1
write h1 0 lba=0 n=4
write h1 1 lba=0 n=4
tick n=3
media 0 delay=20ms
media 1 delay=20ms
write h1 0 lba=0 n=4
write h1 1 lba=0 n=4
tick
write h1 0 lba=0 n=4
write h1 1 lba=0 n=4
tick
write h1 0 lba=0 n=4
tick n=20
`,
		cfg: func(c *ownership.Config) {
			c.StressFloor, c.StressUtil, c.StressWindow, c.MinExpansionOps = 0, 0.001, 0, 0
		},
		want: "balance-below-floor",
	}, {
		// A stressed node a, and h1, declared linux, runs dm-multipath
		// at its defaults (it stays on the path it uses). Balance moves
		// LUN 1 to b before h1 is judged; h1's I/O stays on a, it is
		// judged not to follow, and shipping brings LUN 1 back: the one
		// round trip judging costs. Then nothing moves again. The old
		// core, which went by the host's type and kept nothing of what
		// it saw, moved LUN 1 away again once it cooled down: balance
		// and shipping undoing each other every cooldown.
		name: "balance and shipping never undo each other",
		script: "nodes a:1,b:1\nlun 0 pref=a pages=128 bs=4096\nlun 1 pref=a pages=128 bs=4096\n" +
			"host h1 type=linux paths=1,2 luns=0,1 kind=dmmp-defaults\nlogin h1\ncapacity a 40\ncapacity b 40\n" +
			strings.Repeat("write h1 0 lba=0 n=128\nwrite h1 0 lba=0 n=128\nwrite h1 1 lba=0 n=128\n"+
				"write h1 1 lba=0 n=128\ntick\n", 90),
		world: func(w *World) { w.forgetFollowing = true },
		want:  "planned-ping-pong",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseScript(tt.script)
			require.NoError(t, err)
			r, err := Run(s)
			require.NoError(t, err)
			require.Nil(t, r.Violation, "clean on the core as it is:\n%s", r.Log)

			w, err := newWorld(s)
			require.NoError(t, err)
			cfg := coreConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			if tt.world != nil {
				tt.world(w)
			}
			require.NoError(t, w.startCoreWith(cfg))
			w.coreIn = tt.in
			w.run()
			require.NotNil(t, w.viol, "the planted defect is caught:\n%s", w.log.String())
			require.Equal(t, tt.want, w.viol.Name, w.viol.Error())
		})
	}
}

// asFault turns every Logout into a lost connection (the old core's view).
func asFault(e ownership.Event) ownership.Event {
	if lo, ok := e.(ownership.Logout); ok {
		lo.Orderly = false
		return lo
	}
	return e
}

// nexusOnB is the host's nexus through port 2, node b's (two-node
// scripts with one port a node).
func nexusOnB(n ownership.Nexus) ownership.Nexus {
	n.Node, n.Port, n.ISID = "b", 2, fmt.Sprintf("00023d%06x", 2)
	return n
}

// pathOnB is a core that takes every interval of a nexus's commands as
// arriving on node b's.
func pathOnB(e ownership.Event) ownership.Event {
	if p, ok := e.(ownership.PathLatency); ok {
		p.Nexus = nexusOnB(p.Nexus)
		return p
	}
	return e
}

// anonymous is a core that never learns an initiator's name.
func anonymous(e ownership.Event) ownership.Event {
	switch ev := e.(type) {
	case ownership.RTPG:
		ev.Nexus.Initiator = "iqn.2026-11.org.example:anonymous"
		return ev
	case ownership.Login:
		ev.Nexus.Initiator = "iqn.2026-11.org.example:anonymous"
		return ev
	}
	return e
}

// rtpgOnB is a core that takes every RTPG as arriving on node b's nexus.
func rtpgOnB(e ownership.Event) ownership.Event {
	if r, ok := e.(ownership.RTPG); ok {
		r.Nexus = nexusOnB(r.Nexus)
		return r
	}
	return e
}
