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
