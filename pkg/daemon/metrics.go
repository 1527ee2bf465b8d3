package daemon

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/reports"
)

// metrics are the daemon's cumulative counters for /metrics (Prometheus
// text format 0.0.4): ownership moves and their stop times by cause, unit
// attentions by sense, reports raised, and per-port commands, bytes and
// latency, which EmitIOStats folds in from the per-nexus counters every
// stats interval (so they lag by at most one interval, and survive the
// nexuses that end).
type metrics struct {
	mu sync.Mutex
	// moves: LUNs moved, by cause; batches and failed batches by cause.
	moves, batches, failed map[string]uint64
	stop                   map[string]*histogram
	ua                     map[string]uint64
	raised                 map[string]uint64
	ports                  map[uint16]*portCounters
}

// portCounters are one target port's cumulative I/O and its recent
// per-interval latency (the dashboard's chart).
type portCounters struct {
	Commands, Reads, Writes      uint64
	BytesRead, BytesWritten      uint64
	Busy                         time.Duration // device-server time
	Exchanges                    uint64
	Exchange                     time.Duration // fabric-included exchange time
	NonOptimized                 uint64
	history                      []LatencySample
	pendOps, pendBytes, pendExch uint64
	pendExchTime                 time.Duration
}

// LatencySample is one stats interval of one port.
type LatencySample struct {
	Time time.Time `json:"time"`
	IOPS float64   `json:"iops"`
	MBps float64   `json:"mbps"`
	// MeanUs is the mean exchange time (command in to status out) in µs;
	// 0 when the port answered nothing in the interval.
	MeanUs float64 `json:"mean_us"`
}

// historyLen is how many intervals of latency the dashboard can chart.
const historyLen = 300

// stopBuckets are the upper bounds (seconds) of the stop-time histogram.
var stopBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

type histogram struct {
	counts []uint64 // per bucket, not cumulative
	sum    float64
	n      uint64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(stopBuckets))
	}
	for i, b := range stopBuckets {
		if v <= b {
			h.counts[i]++
			break
		}
	}
	h.sum += v
	h.n++
}

func newMetrics() *metrics {
	return &metrics{moves: map[string]uint64{}, batches: map[string]uint64{}, failed: map[string]uint64{},
		stop: map[string]*histogram{}, ua: map[string]uint64{}, raised: map[string]uint64{},
		ports: map[uint16]*portCounters{}}
}

func (m *metrics) change(c array.Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cause := string(c.Cause)
	m.batches[cause]++
	if c.Failed {
		m.failed[cause]++
		return
	}
	m.moves[cause] += uint64(len(c.LUNs))
	h := m.stop[cause]
	if h == nil {
		h = &histogram{}
		m.stop[cause] = h
	}
	h.observe(c.Stop.Seconds())
}

func (m *metrics) unitAttention(reason string) {
	m.mu.Lock()
	m.ua[reason]++
	m.mu.Unlock()
}

func (m *metrics) reportRaised(cond string) {
	m.mu.Lock()
	m.raised[cond]++
	m.mu.Unlock()
}

func (m *metrics) port(id uint16) *portCounters {
	p := m.ports[id]
	if p == nil {
		p = &portCounters{}
		m.ports[id] = p
	}
	return p
}

// addIO folds one nexus interval into its port (caller holds m.mu).
func (m *metrics) addIO(port uint16, iv *IOInterval) {
	p := m.port(port)
	ops := iv.Reads + iv.Writes + iv.Other
	p.Commands += ops
	p.Reads += iv.Reads
	p.Writes += iv.Writes
	p.BytesRead += iv.BytesRead
	p.BytesWritten += iv.BytesWritten
	p.Busy += iv.Busy
	p.NonOptimized += iv.NonOptimized
	p.pendOps += ops
	p.pendBytes += iv.BytesRead + iv.BytesWritten
}

// addPath folds one nexus's exchanges into its port (caller holds m.mu).
func (m *metrics) addPath(port uint16, pi *PathInterval) {
	p := m.port(port)
	p.Exchanges += pi.Exchanges
	p.Exchange += pi.Exchange
	p.pendExch += pi.Exchanges
	p.pendExchTime += pi.Exchange
}

// endInterval closes one stats interval on every port (caller holds m.mu).
func (m *metrics) endInterval(ports []*array.Port, now time.Time, iv time.Duration) {
	secs := iv.Seconds()
	if secs <= 0 {
		return
	}
	for _, ap := range ports {
		p := m.port(ap.RelativeID)
		s := LatencySample{Time: now, IOPS: float64(p.pendOps) / secs, MBps: float64(p.pendBytes) / secs / 1e6}
		if p.pendExch > 0 {
			s.MeanUs = float64(p.pendExchTime) / float64(p.pendExch) / float64(time.Microsecond)
		}
		if len(p.history) == historyLen {
			copy(p.history, p.history[1:])
			p.history = p.history[:historyLen-1]
		}
		p.history = append(p.history, s)
		p.pendOps, p.pendBytes, p.pendExch, p.pendExchTime = 0, 0, 0, 0
	}
}

// promWriter writes the text exposition format: HELP and TYPE once per
// family, then its samples, with label values escaped.
type promWriter struct {
	w   io.Writer
	err error
}

func (p *promWriter) family(name, typ, help string) {
	p.printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func (p *promWriter) sample(name string, v float64, labels ...string) {
	var b strings.Builder
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(labels[i])
			b.WriteString(`="`)
			b.WriteString(escapeLabel(labels[i+1]))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(formatFloat(v))
	b.WriteByte('\n')
	p.printf("%s", b.String())
}

func (p *promWriter) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`).Replace(s)
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// WriteMetrics writes every metric in the Prometheus text format.
func (d *Daemon) WriteMetrics(w io.Writer) error {
	p := &promWriter{w: w}
	arr := d.Array
	p.family("aluad_node_up", "gauge", "1 when the storage node is serving.")
	for _, n := range arr.Nodes {
		p.sample("aluad_node_up", b2f(n.Up()), "node", n.Name)
	}
	p.family("aluad_port_up", "gauge", "1 when the target port accepts logins (not taken down by a fault).")
	for _, pt := range arr.Ports {
		up := pt.Node.Up() && (d.fabric == nil || d.fabric.PortUp(pt.RelativeID))
		p.sample("aluad_port_up", b2f(up), "node", pt.Node.Name, "port", pt.Name)
	}
	sessions := 0
	if d.fabric != nil {
		sessions = len(d.fabric.PathStats())
	}
	p.family("aluad_sessions", "gauge", "Logged-in normal iSCSI sessions (I_T nexuses).")
	p.sample("aluad_sessions", float64(sessions))
	p.family("aluad_lun_owner", "gauge", "1 for the node that owns the LUN.")
	for _, l := range arr.LUNs {
		own := l.Owner()
		for _, n := range arr.Nodes {
			p.sample("aluad_lun_owner", b2f(n == own), "lun", strconv.FormatUint(l.ID, 10), "node", n.Name)
		}
	}
	p.family("aluad_lun_on_preferred", "gauge", "1 when the LUN is owned by its preferred owner.")
	for _, l := range arr.LUNs {
		p.sample("aluad_lun_on_preferred", b2f(l.Owner() == l.Preferred), "lun", strconv.FormatUint(l.ID, 10))
	}

	m := d.metrics
	m.mu.Lock()
	p.family("aluad_ownership_moves_total", "counter", "LUNs whose ownership moved, by cause.")
	for _, c := range sortedKeys(m.moves) {
		p.sample("aluad_ownership_moves_total", float64(m.moves[c]), "cause", c)
	}
	p.family("aluad_ownership_batches_total", "counter", "Ownership transitions (batches of LUNs), by cause.")
	for _, c := range sortedKeys(m.batches) {
		p.sample("aluad_ownership_batches_total", float64(m.batches[c]), "cause", c)
	}
	p.family("aluad_ownership_failed_total", "counter", "Ownership transitions that failed and were rolled back, by cause.")
	for _, c := range sortedKeys(m.failed) {
		p.sample("aluad_ownership_failed_total", float64(m.failed[c]), "cause", c)
	}
	p.family("aluad_ownership_stop_seconds", "histogram", "How long I/O to a moving batch was held, by cause.")
	for _, c := range sortedKeys(m.stop) {
		h := m.stop[c]
		cum := uint64(0)
		for i, b := range stopBuckets {
			cum += h.counts[i]
			p.sample("aluad_ownership_stop_seconds_bucket", float64(cum), "cause", c, "le", formatFloat(b))
		}
		p.sample("aluad_ownership_stop_seconds_bucket", float64(h.n), "cause", c, "le", "+Inf")
		p.sample("aluad_ownership_stop_seconds_sum", h.sum, "cause", c)
		p.sample("aluad_ownership_stop_seconds_count", float64(h.n), "cause", c)
	}
	p.family("aluad_unit_attentions_total", "counter", "Unit attentions reported to initiators, by ASC/ASCQ.")
	for _, r := range sortedKeys(m.ua) {
		p.sample("aluad_unit_attentions_total", float64(m.ua[r]), "asc_ascq", r)
	}
	p.family("aluad_reports_raised_total", "counter", "Report conditions raised, by condition.")
	for _, c := range sortedKeys(m.raised) {
		p.sample("aluad_reports_raised_total", float64(m.raised[c]), "condition", c)
	}
	type portRow struct {
		pt *array.Port
		c  portCounters
	}
	var rows []portRow
	for _, pt := range arr.Ports {
		rows = append(rows, portRow{pt, *m.port(pt.RelativeID)})
	}
	m.mu.Unlock()

	families := []struct {
		name, typ, help string
		v               func(c *portCounters) float64
	}{
		{"aluad_port_commands_total", "counter", "SCSI commands that reached LUNs through the port.",
			func(c *portCounters) float64 { return float64(c.Commands) }},
		{"aluad_port_read_bytes_total", "counter", "Bytes read through the port.",
			func(c *portCounters) float64 { return float64(c.BytesRead) }},
		{"aluad_port_written_bytes_total", "counter", "Bytes written through the port.",
			func(c *portCounters) float64 { return float64(c.BytesWritten) }},
		{"aluad_port_non_optimized_commands_total", "counter", "Commands that arrived while the port's group was non-optimized for the LUN (forwarded).",
			func(c *portCounters) float64 { return float64(c.NonOptimized) }},
		{"aluad_port_service_seconds_total", "counter", "Summed device-server time of the port's commands (divide by commands for the mean).",
			func(c *portCounters) float64 { return c.Busy.Seconds() }},
		{"aluad_port_exchanges_total", "counter", "Commands answered through the port (the exchange count).",
			func(c *portCounters) float64 { return float64(c.Exchanges) }},
		{"aluad_port_exchange_seconds_total", "counter", "Summed exchange time, command in to status out, fabric included (divide by exchanges for the mean latency).",
			func(c *portCounters) float64 { return c.Exchange.Seconds() }},
	}
	for _, f := range families {
		p.family(f.name, f.typ, f.help)
		for _, r := range rows {
			p.sample(f.name, f.v(&r.c), "node", r.pt.Node.Name, "port", r.pt.Name)
		}
	}
	p.family("aluad_reports_active", "gauge", "Report conditions raised now, by condition and severity.")
	if rs, err := d.Reports(); err == nil {
		count := map[string]int{}
		for _, r := range rs {
			count[string(r.Condition)]++
		}
		for _, e := range catalogSorted() {
			p.sample("aluad_reports_active", float64(count[string(e.Condition)]), "condition", string(e.Condition),
				"severity", string(e.Severity))
		}
	}
	return p.err
}

func catalogSorted() []reports.Entry {
	out := make([]reports.Entry, 0, len(reports.Catalog))
	for _, e := range reports.Catalog {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Condition < out[j].Condition })
	return out
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
