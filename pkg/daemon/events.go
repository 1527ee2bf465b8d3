package daemon

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/scsi"
)

// Event kinds: what the array learns about hosts and what it changes. This
// feed is the ownership core's input (connectivity from login, logout and
// rtpg; workload from io; its own decisions as alua).
const (
	EventLogin  = "login"
	EventLogout = "logout"
	EventRTPG   = "rtpg"
	// EventUA: a unit attention was reported to a nexus (Reason: "2A/06").
	EventUA   = "ua"
	EventIO   = "io"
	EventALUA = "alua"
	// EventReport: a report condition raised or cleared by the ownership core.
	EventReport = "report"
	// EventFault: a fault injected or cleared.
	EventFault = "fault"
	// EventPath: one interval of a nexus's exchanges as the fabric saw
	// them (commands answered, summed exchange time): Path Degraded's input.
	EventPath = "path"
)

// Event is one entry of the feed. Nexus events carry the initiator name,
// ISID, target port and node; io events the counts of one interval.
type Event struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"`
	Initiator  string    `json:"initiator,omitempty"`
	ISID       string    `json:"isid,omitempty"`
	Host       string    `json:"host,omitempty"`
	TargetPort uint16    `json:"target_port,omitempty"`
	Node       string    `json:"node,omitempty"`
	LUN        *uint64   `json:"lun,omitempty"`
	// Extended: the RTPG asked for the extended header.
	Extended bool          `json:"extended,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	IO       *IOInterval   `json:"io,omitempty"`
	Change   *ChangeInfo   `json:"change,omitempty"`
	Report   *ReportInfo   `json:"report,omitempty"`
	Fault    *Fault        `json:"fault,omitempty"`
	Path     *PathInterval `json:"path,omitempty"`
}

// PathInterval is one interval of a nexus's exchanges: Exchange/Exchanges
// is the mean time from command in to status out, fabric included.
type PathInterval struct {
	Interval  time.Duration `json:"interval_ns"`
	Exchanges uint64        `json:"exchanges"`
	Exchange  time.Duration `json:"exchange_ns"`
}

// ReportInfo is a report condition as the feed reports it.
type ReportInfo struct {
	Condition string `json:"condition"`
	Raised    bool   `json:"raised"`
	Host      string `json:"host,omitempty"`
	Node      string `json:"node,omitempty"`
	LUN       uint64 `json:"lun"`
	Port      uint16 `json:"port,omitempty"`
	Cause     string `json:"cause,omitempty"`
}

// IOInterval is the I/O of one nexus to one LUN over one interval.
type IOInterval struct {
	Interval time.Duration `json:"interval_ns"`
	Reads    uint64        `json:"reads"`
	Writes   uint64        `json:"writes"`
	Other    uint64        `json:"other"`
	// Syncs: SYNCHRONIZE CACHE and VERIFY that completed GOOD (also in
	// Other). Reads+Writes+Syncs are the media commands that show the
	// host's driver uses the path.
	Syncs        uint64 `json:"syncs"`
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
	// Busy is the summed command time; Busy/(Reads+Writes+Other) is the
	// mean response time inside the array.
	Busy time.Duration `json:"busy_ns"`
	// NonOptimized counts the commands that arrived while this path was
	// active/non-optimized (the array forwarded them to the owner).
	NonOptimized uint64 `json:"non_optimized"`
}

// ChangeInfo is an ALUA change as the feed reports it.
type ChangeInfo struct {
	LUNs   []uint64 `json:"luns"`
	From   string   `json:"from,omitempty"`
	To     string   `json:"to,omitempty"`
	Cause  string   `json:"cause"`
	Failed bool     `json:"failed,omitempty"`
	Error  string   `json:"error,omitempty"`
	// Flush is the old owner's destage under I/O; Stop is how long I/O
	// to the batch was held.
	Flush time.Duration `json:"flush_ns"`
	Stop  time.Duration `json:"stop_ns"`
	// Replayed counts mirrored pages a takeover replayed; Lost lists the
	// acknowledged data a crash lost (mirroring off).
	Replayed int          `json:"replayed_pages,omitempty"`
	Lost     []array.Loss `json:"lost,omitempty"`
}

func changeInfo(c array.Change) *ChangeInfo {
	ci := &ChangeInfo{LUNs: c.LUNs, From: c.From, To: c.To, Cause: string(c.Cause), Failed: c.Failed,
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
	ring    []Event
	next    uint64 // seq of the next event; seqs start at 1
	now     func() time.Time
	consume func(Event)
}

// NewEventLog makes a log holding the last capacity events.
func NewEventLog(capacity int, now func() time.Time, consume func(Event)) *EventLog {
	return &EventLog{ring: make([]Event, capacity), next: 1, now: now, consume: consume}
}

// Add stamps e with a sequence number and time and stores it.
func (l *EventLog) Add(e Event) {
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
func (l *EventLog) Since(seq uint64) (events []Event, lost uint64) {
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
func (d *Daemon) nexusEvent(kind string, n scsi.Nexus) Event {
	e := Event{Kind: kind, Initiator: n.InitiatorName, TargetPort: n.TargetPort}
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
	e := d.nexusEvent(EventRTPG, n)
	e.LUN, e.Extended = &lun, extended
	d.Events.Add(e)
}

// UnitAttention implements scsi.Observer: the moment a host learns of a
// change, against which its switch to the new owner is measured.
func (d *Daemon) UnitAttention(n scsi.Nexus, lun uint64, r scsi.Reason) {
	e := d.nexusEvent(EventUA, n)
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
		iv := &IOInterval{Interval: interval, Reads: s.Reads - p.Reads, Writes: s.Writes - p.Writes,
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
		e := d.nexusEvent(EventIO, s.Nexus)
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
			p = iscsi.PathStat{}
		}
		n := ps.Exchanges - p.Exchanges
		if n == 0 {
			continue
		}
		e := d.nexusEvent(EventPath, ps.Nexus)
		e.Path = &PathInterval{Interval: interval, Exchanges: n, Exchange: ps.Exchange - p.Exchange}
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
