package clustersim

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Options are a run of cluster seeds.
type Options struct {
	Seeds int
	Seed  uint64 // the first
	Steps int    // fault events per seed
	Plant Plant
	Jobs  int // seeds at once (at least 1)
	// Out, when set, is a directory that gets each failing seed's
	// violations and script (seed-N.txt).
	Out    string
	Stdout io.Writer
}

// Summary is what a run found.
type Summary struct {
	Seeds, Failed, Events int
	Bubble                time.Duration // the seeds' bubble time, summed
	Wall                  time.Duration
	First                 *Result // the lowest failing seed
}

// Run runs the seeds inside t (each in its own bubble, Jobs at a time)
// and writes each failure as it comes, then a summary, to o.Stdout.
func Run(t *testing.T, o Options) Summary {
	if o.Jobs < 1 {
		o.Jobs = 1
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	start := time.Now()
	var mu sync.Mutex
	var sum Summary
	sem := make(chan struct{}, o.Jobs)
	var wg sync.WaitGroup
	for i := 0; i < o.Seeds; i++ {
		seed := o.Seed + uint64(i)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := Result{Seed: seed}
			if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { r = RunSeed(t, seed, o.Steps, o.Plant) })
			}) && !r.Failed() {
				r.Violations = []string{"the seed's run failed (its test output above)"}
			}
			mu.Lock()
			defer mu.Unlock()
			sum.Seeds++
			sum.Events += len(r.Script)
			sum.Bubble += r.Took
			if !r.Failed() {
				return
			}
			sum.Failed++
			if sum.First == nil || r.Seed < sum.First.Seed {
				sum.First = &r
			}
			fmt.Fprintf(o.Stdout, "FAIL %s\n", r.Violations[0])
			fmt.Fprintf(o.Stdout, "     seed %d (its script again: --cluster --seeds 1 --seed %d --steps %d --plant %s; the interleaving may differ)\n",
				r.Seed, r.Seed, o.Steps, o.Plant)
			if o.Out != "" {
				if err := os.MkdirAll(o.Out, 0o755); err == nil {
					_ = os.WriteFile(filepath.Join(o.Out, fmt.Sprintf("seed-%d.txt", r.Seed)), []byte(r.String()+"\n"), 0o644)
				}
			}
		}()
	}
	wg.Wait()
	sum.Wall = time.Since(start)
	fmt.Fprintf(o.Stdout, "cluster sim: %d seeds (%d-%d), plant %s: %d fault events, %s of bubble time in %s: %d failed\n",
		sum.Seeds, o.Seed, o.Seed+uint64(o.Seeds)-1, o.Plant, sum.Events, sum.Bubble.Round(time.Second),
		sum.Wall.Round(time.Second), sum.Failed)
	return sum
}

// Main runs o's seeds as a test binary would (synctest needs a
// *testing.T) and exits: 0 when every seed held, 1 when one failed. The
// testing package's report follows Run's (a seed's test failure, with
// its output, and PASS or FAIL).
func Main(o Options) {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	os.Args = []string{os.Args[0], "-test.timeout=0"}
	testing.Main(func(string, string) (bool, error) { return true, nil },
		[]testing.InternalTest{{Name: "ClusterSeeds", F: func(t *testing.T) {
			if s := Run(t, o); s.Failed > 0 {
				t.Fail()
			}
		}}}, nil, nil)
}
