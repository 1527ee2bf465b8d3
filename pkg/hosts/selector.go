package hosts

import (
	"fmt"
	"sync/atomic"
)

// Selector picks one of the candidate paths (all usable, in the group
// the personality chose) for a command of size bytes.
type Selector interface {
	Name() string
	Pick(cands []*Path, size int) *Path
}

// NewSelector returns a selector by name: round-robin, best-path,
// least-queue-depth or service-time.
func NewSelector(name string) (Selector, error) {
	switch name {
	case "round-robin", "rr":
		return &roundRobin{}, nil
	case "best-path":
		return bestPath{}, nil
	case "least-queue-depth", "lqd":
		return leastQueue{}, nil
	case "service-time":
		return serviceTime{}, nil
	}
	return nil, fmt.Errorf("unknown path selector %q (round-robin, best-path, least-queue-depth, service-time)", name)
}

// roundRobin walks the candidates in turn (reference 000 "Routing
// Algorithm": a circular list, the pointer advanced per I/O).
type roundRobin struct{ n atomic.Uint64 }

func (*roundRobin) Name() string { return "round-robin" }
func (r *roundRobin) Pick(c []*Path, _ int) *Path {
	if len(c) == 0 {
		return nil
	}
	return c[(r.n.Add(1)-1)%uint64(len(c))]
}

// bestPath is reference 000's best-path: the fewest bytes pending,
// weighted by an error weight that grows with the path's rolling average
// latency relative to the best candidate's.
type bestPath struct{}

func (bestPath) Name() string { return "best-path" }
func (bestPath) Pick(c []*Path, size int) *Path {
	snap := make([]Counters, len(c))
	best := 0.0
	for i, p := range c {
		snap[i] = p.Counters()
		if l := snap[i].AvgLatency; l > 0 && (best == 0 || l < best) {
			best = l
		}
	}
	return argmin(c, func(i int) float64 {
		w := 1.0
		if best > 0 && snap[i].AvgLatency > best {
			w = snap[i].AvgLatency / best
		}
		return float64(snap[i].PendingBytes()+int64(size)) * w
	})
}

// leastQueue is dm's queue-length selector: the fewest commands pending.
type leastQueue struct{}

func (leastQueue) Name() string { return "least-queue-depth" }
func (leastQueue) Pick(c []*Path, _ int) *Path {
	return argmin(c, func(i int) float64 { return float64(c[i].Counters().PendingIOs()) })
}

// serviceTime is dm's service-time selector: the least estimated time to
// serve what is pending plus this command, at the path's observed rate
// (bytes per microsecond of service; equal until a path has history).
type serviceTime struct{}

func (serviceTime) Name() string { return "service-time" }
func (serviceTime) Pick(c []*Path, size int) *Path {
	return argmin(c, func(i int) float64 {
		k := c[i].Counters()
		rate := 1.0
		if svc := k.Service[0] + k.Service[1]; svc > 0 {
			rate = float64(k.Bytes[0]+k.Bytes[1]) / float64(svc.Microseconds()+1)
		}
		return float64(k.PendingBytes()+int64(size)) / rate
	})
}

// argmin returns the candidate with the lowest score; ties go to the
// first, so callers list paths in a stable order.
func argmin(c []*Path, score func(int) float64) *Path {
	var best *Path
	bs := 0.0
	for i, p := range c {
		if s := score(i); best == nil || s < bs {
			best, bs = p, s
		}
	}
	return best
}
