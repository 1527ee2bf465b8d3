// The bubbles run without the race detector: with it, a run of these
// (dozens of goroutines per controller, hundreds of seeds) once crashed
// inside the runtime (SIGSEGV in a synctest bubble). The test command
// runs them in their own step.

//go:build !race

package clustersim

import (
	"bytes"
	"context"
	"flag"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	hostlab "github.com/aluad/aluad/pkg/lab"
)

var (
	seeds = flag.Int("cluster.seeds", 16, "cluster seeds to run (TestClusterSeeds)")
	first = flag.Uint64("cluster.seed", 1, "the first cluster seed")
	steps = flag.Int("cluster.steps", 24, "fault events per cluster seed")
	jobs  = flag.Int("cluster.jobs", 1, "cluster seeds at once")
)

func TestClusterSeeds(t *testing.T) {
	s := Run(t, Options{Seeds: *seeds, Seed: *first, Steps: *steps, Jobs: *jobs, Stdout: os.Stdout})
	require.Equal(t, *seeds, s.Seeds)
	if s.First != nil {
		t.Fatalf("%d of %d seeds failed; the first:\n%s", s.Failed, s.Seeds, s.First)
	}
}

// Each planted defect is caught within a few seeds.
func TestClusterSeedsCatchPlanted(t *testing.T) {
	for name, p := range Plants {
		if p == PlantNone {
			continue
		}
		t.Run(name, func(t *testing.T) {
			var caught *Result
			for s := uint64(1); s <= 12 && caught == nil; s++ {
				synctest.Test(t, func(t *testing.T) {
					if r := RunSeed(t, s, *steps, p); r.Failed() {
						caught = &r
					}
				})
			}
			require.NotNil(t, caught, "the planted defect went unnoticed")
			t.Logf("caught at seed %d: %s", caught.Seed, caught.Violations[0])
		})
	}
}

// Two controllers in a bubble: a write acknowledged through owner a (its
// copy on b), a killed, b takes a's LUN over within the lease TTL plus
// its rounds (fenced first), and reads the write back; then a's
// controller restarts and the LUN fails back to it.
func TestBubbleFailoverAndFailback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bb := NewBubble(t)
		a, b := bb.Start("a"), bb.Start("b")
		defer b.Stop(time.Second)
		Until(t, 10*time.Second, func() bool { return a.Interlinked("b") && b.Interlinked("a") }, "the interlink")
		var lun uint64
		for _, l := range bb.Cfg.LUNs {
			if l.Preferred == "a" {
				lun = l.ID
				break
			}
		}
		Until(t, 10*time.Second, func() bool { return a.Serves(lun) }, "a serves its LUN")
		onA, err := bb.Dial(a, "a", "h1")
		require.NoError(t, err)
		defer onA.Close()
		data := hostlab.Tagged(5)
		require.NoError(t, hostlab.Retry(5*time.Second, func() error {
			return onA.Write16(context.Background(), lun, 0, data, 512, false)
		}))
		require.Positive(t, b.D.Array.Local().Cache.MirrorBytes(), "b holds the copy")

		killed := time.Now()
		a.Kill()
		Until(t, 10*time.Second, func() bool { return b.Serves(lun) }, "b takes a's LUN over")
		took := time.Since(killed)
		require.LessOrEqual(t, took, bb.Cfg.Cluster.LeaseTTL+time.Second, "served within the lease TTL + 1 s")
		onB, err := bb.Dial(b, "b", "h1")
		require.NoError(t, err)
		defer onB.Close()
		var got []byte
		require.NoError(t, hostlab.Retry(5*time.Second, func() (err error) {
			got, err = onB.Read16(context.Background(), lun, 0, 8, 512)
			return err
		}))
		require.True(t, bytes.Equal(got, data), "the acknowledged write, replayed from b's copy")

		a2 := bb.Start("a")
		defer a2.Stop(time.Second)
		Until(t, 20*time.Second, func() bool { return a2.Serves(lun) }, "the LUN fails back to a's new controller")
		t.Logf("taken over %v after the kill (bubble time)", took)
	})
}
