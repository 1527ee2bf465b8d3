package lab

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/initiator"
)

// Sample is one completed I/O: when it started and how long it took.
type Sample struct {
	Start   time.Time
	Latency time.Duration
	Err     bool
}

// Workload runs 4 KiB random I/O on every LUN at a fixed queue depth per
// LUN, from the hosts in turn, and records every I/O.
type Workload struct {
	env     *Env
	QD      int
	ReadPct int
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples [][]Sample
	blocks  uint64
	done    atomic.Int64
}

// Completed counts the I/Os completed so far.
func (w *Workload) Completed() int64 { return w.done.Load() }

// StartWorkload starts the I/O; Stop ends it and returns the samples.
func StartWorkload(env *Env, qd, readPct int, lunSize int64, seed uint64) *Workload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Workload{env: env, QD: qd, ReadPct: readPct, cancel: cancel, blocks: uint64(lunSize) / blk4k}
	for li, lun := range env.LUNs {
		h := env.Hosts[li%len(env.Hosts)]
		for q := 0; q < qd; q++ {
			idx := len(w.samples)
			w.samples = append(w.samples, nil)
			w.wg.Add(1)
			go w.worker(ctx, h, lun, idx, seed+uint64(idx))
		}
	}
	return w
}

func (w *Workload) worker(ctx context.Context, h *Host, lun uint64, idx int, seed uint64) {
	defer w.wg.Done()
	r := rand.New(rand.NewPCG(seed, lun))
	buf := make([]byte, blk4k)
	var out []Sample
	for ctx.Err() == nil {
		b := r.Uint64N(w.blocks)
		read := r.IntN(100) < w.ReadPct
		start := time.Now()
		err := h.Do(ctx, lun, func(s *initiator.Session) error {
			if read {
				_, err := s.Read16(ctx, lun, b*8, 8, 512)
				return err
			}
			return s.Write16(ctx, lun, b*8, buf, 512, false)
		})
		if ctx.Err() != nil {
			break // the run ended mid-command: not a sample
		}
		out = append(out, Sample{Start: start, Latency: time.Since(start), Err: err != nil})
		w.done.Add(1)
	}
	w.mu.Lock()
	w.samples[idx] = out
	w.mu.Unlock()
}

// Stop ends the workload and returns every sample, by start time.
func (w *Workload) Stop() []Sample {
	w.cancel()
	w.wg.Wait()
	var all []Sample
	for _, s := range w.samples {
		all = append(all, s...)
	}
	slices.SortFunc(all, func(a, b Sample) int { return a.Start.Compare(b.Start) })
	return all
}

// Stats summarises samples.
type Stats struct {
	Count         int
	Errors        int
	P50, P99, Max time.Duration
	IOPS          float64
}

// Summarise computes the statistics of the samples that started in
// [from, to).
func Summarise(all []Sample, from, to time.Time) Stats {
	var lat []time.Duration
	st := Stats{}
	for _, s := range all {
		if s.Start.Before(from) || !s.Start.Before(to) {
			continue
		}
		st.Count++
		if s.Err {
			st.Errors++
		}
		lat = append(lat, s.Latency)
	}
	if len(lat) == 0 {
		return st
	}
	slices.Sort(lat)
	st.P50 = lat[len(lat)/2]
	st.P99 = lat[len(lat)*99/100]
	st.Max = lat[len(lat)-1]
	st.IOPS = float64(st.Count) / to.Sub(from).Seconds()
	return st
}

// WorstOverlapping is the longest I/O that was in flight at some point
// of [from, to], and how many such I/Os there were.
func WorstOverlapping(all []Sample, from, to time.Time) (time.Duration, int) {
	var worst time.Duration
	n := 0
	for _, s := range all {
		end := s.Start.Add(s.Latency)
		if s.Start.After(to) || end.Before(from) {
			continue
		}
		n++
		worst = max(worst, s.Latency)
	}
	return worst, n
}
