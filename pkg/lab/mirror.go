package lab

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// MirrorOptions shape the mirroring bandwidth comparison.
type MirrorOptions struct {
	LUNs, QD int
	Rounds   int
	Duration time.Duration
	Seed     uint64
	Out      io.Writer
}

// MirrorResult holds each round's write rate (MB/s) with mirroring on and
// off, measured alternately in one run.
type MirrorResult struct {
	On, Off []float64
}

// Median of a round list.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// RunMirror measures 4 KiB random write throughput through the array with
// write-cache mirroring on and off, alternating rounds so both see the
// same machine conditions.
func RunMirror(ctx context.Context, o MirrorOptions) (MirrorResult, error) {
	var res MirrorResult
	const lunSize = 64 << 20
	for r := 0; r < o.Rounds; r++ {
		for _, mirror := range []bool{true, false} {
			env, err := Start(ctx, EnvConfig{LUNs: o.LUNs, LUNSize: lunSize, Hosts: 2, Mirror: mirror,
				Tick: time.Second, Penalty: 50 * time.Microsecond, NodeCapacity: 1e9})
			if err != nil {
				return res, err
			}
			w := StartWorkload(env, o.QD, 0, lunSize, o.Seed+uint64(r))
			time.Sleep(500 * time.Millisecond)
			t0, c0 := time.Now(), w.Completed()
			time.Sleep(o.Duration)
			t1, c1 := time.Now(), w.Completed()
			w.Stop()
			env.Close()
			mbs := float64(c1-c0) * blk4k / t1.Sub(t0).Seconds() / 1e6
			if mirror {
				res.On = append(res.On, mbs)
			} else {
				res.Off = append(res.Off, mbs)
			}
			if o.Out != nil {
				fmt.Fprintf(o.Out, "round %d, mirroring %v: %.1f MB/s\n", r+1, mirror, mbs)
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}
