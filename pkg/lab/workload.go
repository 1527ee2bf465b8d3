package lab

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/hosts"
)

// Sample is one completed I/O: which host and LUN, when it started and
// how long it took.
type Sample struct {
	Host    int
	LUN     uint64
	Start   time.Time
	Latency time.Duration
	Err     bool
}

// Stream is one host's load on one LUN.
type Stream struct {
	Host    int // index in Env.Hosts
	LUN     uint64
	BS      int
	ReadPct int
	QD      int
	// Rate caps the stream's commands per second (0: unlimited).
	Rate float64
}

// Workload runs streams of random I/O and records every command.
type Workload struct {
	env     *Env
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples [][]Sample
	blocks  uint64
	done    atomic.Int64
}

// Completed counts the I/Os completed so far.
func (w *Workload) Completed() int64 { return w.done.Load() }

// StartWorkload starts 4 KiB random I/O on every LUN at queue depth qd,
// each LUN driven by one host in turn.
func StartWorkload(env *Env, qd, readPct int, lunSize int64, seed uint64) *Workload {
	var st []Stream
	for li, lun := range env.LUNs {
		st = append(st, Stream{Host: li % len(env.Hosts), LUN: lun, BS: blk4k, ReadPct: readPct, QD: qd})
	}
	return StartStreams(env, st, lunSize, seed)
}

// StartStreams starts the streams; Stop ends them and returns the samples.
func StartStreams(env *Env, streams []Stream, lunSize int64, seed uint64) *Workload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &Workload{env: env, cancel: cancel, blocks: uint64(lunSize) / hosts.BlockSize}
	for _, st := range streams {
		for q := 0; q < st.QD; q++ {
			idx := len(w.samples)
			w.samples = append(w.samples, nil)
			w.wg.Add(1)
			go w.worker(ctx, st, q, idx, seed+uint64(idx))
		}
	}
	return w
}

func (w *Workload) worker(ctx context.Context, st Stream, slot, idx int, seed uint64) {
	defer w.wg.Done()
	h := w.env.Hosts[st.Host]
	r := rand.New(rand.NewPCG(seed, st.LUN))
	buf := make([]byte, st.BS)
	per := uint64(st.BS / hosts.BlockSize)
	var interval time.Duration
	if st.Rate > 0 {
		interval = time.Duration(float64(st.QD) / st.Rate * float64(time.Second))
	}
	next := time.Now().Add(time.Duration(slot) * interval / time.Duration(max(st.QD, 1)))
	var out []Sample
	for ctx.Err() == nil {
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
			next = next.Add(interval)
		}
		lba := r.Uint64N(w.blocks/per) * per
		read := r.IntN(100) < st.ReadPct
		start := time.Now()
		var err error
		if read {
			_, err = h.Read(ctx, st.LUN, lba, uint32(per))
		} else {
			err = h.Write(ctx, st.LUN, lba, buf, false)
		}
		if ctx.Err() != nil {
			break // the run ended mid-command: not a sample
		}
		out = append(out, Sample{Host: st.Host, LUN: st.LUN, Start: start, Latency: time.Since(start), Err: err != nil})
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
