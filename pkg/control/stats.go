package control

import (
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// Stats is what the front end counts per nexus.
type Stats interface {
	PathStats() []fabric.PathStat
}

// Metrics takes the folded intervals per port (the daemon's Prometheus
// counters and latency history).
type Metrics interface {
	AddIO(port uint16, iv *api.IOInterval)
	AddPath(port uint16, pi *api.PathInterval)
	EndInterval(ports []*array.Port, now time.Time, iv time.Duration)
}

// IOKey names one nexus's I/O to one LUN.
type IOKey struct {
	Nexus scsi.Nexus
	LUN   uint64
}

// stats is the folding's memory: the previous counters.
type stats struct {
	ioMu     sync.Mutex
	ioPrev   map[IOKey]scsi.NexusIO
	pathPrev map[scsi.Nexus]fabric.PathStat
	ioLast   time.Time
	lastIO   map[IOKey]*api.IOInterval
}

// FoldStats folds the device server's I/O counters and the front end's
// exchange counters since the previous call into intervals: one per
// (nexus, LUN) that did any I/O and per nexus that answered any command,
// counted in the metrics, published, and stepped by the core. It runs on
// each of the core's ticks, and every stats interval when the core does
// not run.
func (p *Path) FoldStats() {
	p.ioMu.Lock()
	defer p.ioMu.Unlock()
	now := p.o.Clock.Now()
	interval := now.Sub(p.ioLast)
	p.ioLast = now
	cur := p.o.SCSI.IOStats()
	m := p.o.Metrics
	if m != nil {
		defer m.EndInterval(p.arr.Ports, now, interval)
	}
	clear(p.lastIO)
	for _, s := range cur {
		k := IOKey{Nexus: s.Nexus, LUN: s.LUN}
		prev := p.ioPrev[k]
		p.ioPrev[k] = s
		if s.Gone {
			delete(p.ioPrev, k)
			p.o.SCSI.ForgetIO(s.Nexus, s.LUN)
		}
		iv := &api.IOInterval{Interval: interval, Reads: s.Reads - prev.Reads, Writes: s.Writes - prev.Writes,
			Other: s.Other - prev.Other, Syncs: s.Syncs - prev.Syncs, BytesRead: s.BytesRead - prev.BytesRead,
			BytesWritten: s.BytesWritten - prev.BytesWritten, Busy: s.Busy - prev.Busy,
			NonOptimized: s.NonOptimized - prev.NonOptimized}
		if iv.Reads+iv.Writes+iv.Other == 0 {
			continue
		}
		if m != nil {
			m.AddIO(s.Nexus.TargetPort, iv)
		}
		p.lastIO[k] = iv
		if s.Nexus.InitiatorName == "" {
			continue // counted on its port; no host to credit (TCMU, shared port)
		}
		p.IO(s.Nexus, s.LUN, iv)
	}
	var fe Stats
	if p.o.FrontEnd != nil {
		fe = p.o.FrontEnd()
	}
	if fe == nil {
		return
	}
	seen := map[scsi.Nexus]bool{}
	for _, ps := range fe.PathStats() {
		seen[ps.Nexus] = true
		prev, ok := p.pathPrev[ps.Nexus]
		p.pathPrev[ps.Nexus] = ps
		if ok && prev.Since != ps.Since { // a new session on the same nexus
			prev = fabric.PathStat{}
		}
		n := ps.Exchanges - prev.Exchanges
		if n == 0 {
			continue
		}
		pi := &api.PathInterval{Interval: interval, Exchanges: n, Exchange: ps.Exchange - prev.Exchange}
		if m != nil {
			m.AddPath(ps.Nexus.TargetPort, pi)
		}
		p.Exchanges(ps.Nexus, pi)
	}
	for k := range p.pathPrev {
		if !seen[k] {
			delete(p.pathPrev, k)
		}
	}
}

// LastIO is the latest interval of every (nexus, LUN) that did I/O in
// it (the paths view's current rates), copied.
func (p *Path) LastIO() map[IOKey]api.IOInterval {
	p.ioMu.Lock()
	defer p.ioMu.Unlock()
	out := make(map[IOKey]api.IOInterval, len(p.lastIO))
	for k, iv := range p.lastIO {
		out[k] = *iv
	}
	return out
}
