package daemon

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

func changeInfo(c array.Change) *api.ChangeInfo {
	ci := &api.ChangeInfo{LUNs: c.LUNs, From: c.From, To: c.To, Cause: string(c.Cause), Failed: c.Failed,
		Flush: c.Flush, Stop: c.Stop, Replayed: c.Replayed, Lost: c.Lost}
	if c.Err != nil {
		ci.Error = c.Err.Error()
	}
	return ci
}

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

// nexusEvent fills the nexus fields of an event.
func (d *Daemon) nexusEvent(kind string, n scsi.Nexus) api.Event {
	e := api.Event{Kind: kind, Initiator: n.InitiatorName, TargetPort: n.TargetPort}
	if i := strings.LastIndex(n.InitiatorPort, ",i,0x"); i >= 0 {
		e.ISID = n.InitiatorPort[i+len(",i,0x"):]
	}
	e.Host = d.Array.HostOf(n.InitiatorName).Name
	if p := d.Array.Port(n.TargetPort); p != nil {
		e.Node = p.Node.Name
	}
	return e
}

// RTPG implements scsi.Observer.
// An RTPG the fabric could not pin to an initiator (TCMU, several hosts
// on one port) is not an event: the fabric credits it itself.
func (d *Daemon) RTPG(n scsi.Nexus, lun uint64, extended bool) {
	if n.InitiatorName == "" {
		return
	}
	e := d.nexusEvent(api.EventRTPG, n)
	e.LUN, e.Extended = &lun, extended
	d.Events.Add(e)
}

// UnitAttention implements scsi.Observer: the moment a host learns of a
// change, against which its switch to the new owner is measured.
func (d *Daemon) UnitAttention(n scsi.Nexus, lun uint64, r scsi.Reason) {
	e := d.nexusEvent(api.EventUA, n)
	_, asc, ascq := r.Codes()
	e.LUN, e.Reason = &lun, fmt.Sprintf("%02X/%02X", asc, ascq)
	d.metrics.unitAttention(e.Reason)
	d.Events.Add(e)
}

// EmitIOStats adds one io event per (nexus, LUN) that did any I/O since
// the previous call. The daemon calls it every stats interval.
func (d *Daemon) EmitIOStats() {
	d.ioMu.Lock()
	defer d.ioMu.Unlock()
	now := d.now()
	interval := now.Sub(d.ioLast)
	d.ioLast = now
	cur := d.SCSI.IOStats()
	m := d.metrics
	m.mu.Lock()
	defer func() {
		m.endInterval(d.Array.Ports, now, interval)
		m.mu.Unlock()
	}()
	clear(d.lastIO)
	for _, s := range cur {
		k := ioKey{s.Nexus, s.LUN}
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
		m.addIO(s.Nexus.TargetPort, iv)
		d.lastIO[k] = iv
		if s.Nexus.InitiatorName == "" {
			continue // counted on its port; no host to credit (TCMU, shared port)
		}
		e := d.nexusEvent(api.EventIO, s.Nexus)
		lun := s.LUN
		e.LUN, e.IO = &lun, iv
		d.Events.Add(e)
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
		e := d.nexusEvent(api.EventPath, ps.Nexus)
		e.Path = &api.PathInterval{Interval: interval, Exchanges: n, Exchange: ps.Exchange - p.Exchange}
		m.addPath(ps.Nexus.TargetPort, e.Path)
		d.Events.Add(e)
	}
	for k := range d.pathPrev {
		if !seen[k] {
			delete(d.pathPrev, k)
		}
	}
}

type ioKey struct {
	n   scsi.Nexus
	lun uint64
}
