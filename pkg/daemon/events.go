package daemon

import (
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/mgmt"
	"github.com/aluad/aluad/pkg/scsi"
)

// EventLog keeps the most recent events in a ring and hands each new one
// to an optional in-process consumer.
type EventLog struct {
	mu      sync.Mutex
	ring    []api.Event
	next    uint64 // seq of the next event; seqs start at 1
	now     func() time.Time
	consume func(api.Event)
}

// NewEventLog makes a log holding the last capacity events.
func NewEventLog(capacity int, now func() time.Time, consume func(api.Event)) *EventLog {
	return &EventLog{ring: make([]api.Event, capacity), next: 1, now: now, consume: consume}
}

// Add stamps e with a sequence number and time and stores it.
func (l *EventLog) Add(e api.Event) {
	l.mu.Lock()
	e.Seq, e.Time = l.next, l.now()
	l.next++
	l.ring[int(e.Seq%uint64(len(l.ring)))] = e
	consume := l.consume
	l.mu.Unlock()
	if consume != nil {
		consume(e)
	}
}

// Since returns the stored events after seq, oldest first, and how many
// after seq were already overwritten (lost to a slow reader).
func (l *EventLog) Since(seq uint64) (events []api.Event, lost uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := uint64(1)
	if l.next > uint64(len(l.ring)) {
		first = l.next - uint64(len(l.ring))
	}
	from := seq + 1
	if from < first {
		lost = first - from
		from = first
	}
	for s := from; s < l.next; s++ {
		events = append(events, l.ring[int(s%uint64(len(l.ring)))])
	}
	return events, lost
}

// EmitIOStats folds the I/O and exchanges since the previous call into
// the metrics and hands the control path one interval per (nexus, LUN)
// that did any I/O and per nexus that answered any command. The daemon
// calls it every stats interval (the core's tick when it runs).
func (d *Daemon) EmitIOStats() {
	d.ioMu.Lock()
	defer d.ioMu.Unlock()
	now := d.now()
	interval := now.Sub(d.ioLast)
	d.ioLast = now
	cur := d.SCSI.IOStats()
	m := d.metrics
	defer m.EndInterval(d.Array.Ports, now, interval)
	clear(d.lastIO)
	for _, s := range cur {
		k := mgmt.IOKey{Nexus: s.Nexus, LUN: s.LUN}
		p := d.ioPrev[k]
		d.ioPrev[k] = s
		if s.Gone {
			delete(d.ioPrev, k)
			d.SCSI.ForgetIO(s.Nexus, s.LUN)
		}
		iv := &api.IOInterval{Interval: interval, Reads: s.Reads - p.Reads, Writes: s.Writes - p.Writes,
			Other: s.Other - p.Other, Syncs: s.Syncs - p.Syncs, BytesRead: s.BytesRead - p.BytesRead,
			BytesWritten: s.BytesWritten - p.BytesWritten, Busy: s.Busy - p.Busy,
			NonOptimized: s.NonOptimized - p.NonOptimized}
		if iv.Reads+iv.Writes+iv.Other == 0 {
			continue
		}
		m.AddIO(s.Nexus.TargetPort, iv)
		d.lastIO[k] = iv
		if s.Nexus.InitiatorName == "" {
			continue // counted on its port; no host to credit (TCMU, shared port)
		}
		d.ctl.IO(s.Nexus, s.LUN, iv)
	}
	if d.fabric == nil {
		return
	}
	seen := map[scsi.Nexus]bool{}
	for _, ps := range d.fabric.PathStats() {
		seen[ps.Nexus] = true
		p, ok := d.pathPrev[ps.Nexus]
		d.pathPrev[ps.Nexus] = ps
		if ok && p.Since != ps.Since { // a new session on the same nexus
			p = fabric.PathStat{}
		}
		n := ps.Exchanges - p.Exchanges
		if n == 0 {
			continue
		}
		pi := &api.PathInterval{Interval: interval, Exchanges: n, Exchange: ps.Exchange - p.Exchange}
		m.AddPath(ps.Nexus.TargetPort, pi)
		d.ctl.Exchanges(ps.Nexus, pi)
	}
	for k := range d.pathPrev {
		if !seen[k] {
			delete(d.pathPrev, k)
		}
	}
}

// copyLastIO is the latest interval of every (nexus, LUN), copied.
func (d *Daemon) copyLastIO() map[mgmt.IOKey]api.IOInterval {
	d.ioMu.Lock()
	defer d.ioMu.Unlock()
	out := make(map[mgmt.IOKey]api.IOInterval, len(d.lastIO))
	for k, iv := range d.lastIO {
		out[k] = *iv
	}
	return out
}
