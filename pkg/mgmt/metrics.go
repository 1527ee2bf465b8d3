package mgmt

import (
	"encoding/hex"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
)

// metrics are the daemon's Prometheus metrics (client_golang, on a
// registry of its own): ownership moves and their stop times by cause,
// unit attentions by sense and reports raised are counted as they happen;
// the array's state (nodes, ports, owners, active reports) and per-port
// commands, bytes and latency are read at scrape time by a collector. The
// per-port counters are folded in from the per-nexus counters every stats
// interval by EmitIOStats (so they lag by at most one interval, and
// survive the nexuses that end).
type Metrics struct {
	reg *prometheus.Registry
	// moves: LUNs moved, by cause; batches and failed batches by cause.
	moves, batches, failed *prometheus.CounterVec
	stop                   *prometheus.HistogramVec
	ua, raised             *prometheus.CounterVec

	mu    sync.Mutex
	ports map[uint16]*portCounters
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
	history                      []api.LatencySample
	pendOps, pendBytes, pendExch uint64
	pendExchTime                 time.Duration
}

// historyLen is how many intervals of latency the dashboard can chart.
const historyLen = 300

// stopBuckets are the upper bounds (seconds) of the stop-time histogram.
var stopBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// NewMetrics registers the counters and the scrape-time collector of v
// (which the views then read the latency history from).
func NewMetrics(v *View) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), ports: map[uint16]*portCounters{}}
	counter := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	m.moves = counter("aluad_ownership_moves_total", "LUNs whose ownership moved, by cause.", "cause")
	m.batches = counter("aluad_ownership_batches_total", "Ownership transitions (batches of LUNs), by cause.", "cause")
	m.failed = counter("aluad_ownership_failed_total", "Ownership transitions that failed and were rolled back, by cause.", "cause")
	m.stop = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "aluad_ownership_stop_seconds",
		Help: "How long I/O to a moving batch was held, by cause.", Buckets: stopBuckets}, []string{"cause"})
	m.ua = counter("aluad_unit_attentions_total", "Unit attentions reported to initiators, by ASC/ASCQ.", "asc_ascq")
	m.raised = counter("aluad_reports_raised_total", "Report conditions raised, by condition.", "condition")
	m.reg.MustRegister(m.moves, m.batches, m.failed, m.stop, m.ua, m.raised, stateCollector{v})
	return m
}

// Change counts an ownership change.
func (m *Metrics) Change(c array.Change) {
	cause := string(c.Cause)
	m.batches.WithLabelValues(cause).Inc()
	if c.Failed {
		m.failed.WithLabelValues(cause).Inc()
		return
	}
	m.moves.WithLabelValues(cause).Add(float64(len(c.LUNs)))
	m.stop.WithLabelValues(cause).Observe(c.Stop.Seconds())
}

// UnitAttention counts a unit attention reported to a host.
func (m *Metrics) UnitAttention(reason string) { m.ua.WithLabelValues(reason).Inc() }

// ReportRaised counts a report condition raised.
func (m *Metrics) ReportRaised(cond string) { m.raised.WithLabelValues(cond).Inc() }

// port returns a port's counters (caller holds m.mu).
func (m *Metrics) port(id uint16) *portCounters {
	p := m.ports[id]
	if p == nil {
		p = &portCounters{}
		m.ports[id] = p
	}
	return p
}

// AddIO folds one nexus interval into its port.
func (m *Metrics) AddIO(port uint16, iv *api.IOInterval) {
	m.mu.Lock()
	defer m.mu.Unlock()
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

// AddPath folds one nexus's exchanges into its port.
func (m *Metrics) AddPath(port uint16, pi *api.PathInterval) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.port(port)
	p.Exchanges += pi.Exchanges
	p.Exchange += pi.Exchange
	p.pendExch += pi.Exchanges
	p.pendExchTime += pi.Exchange
}

// EndInterval closes one stats interval on every port (the latency
// history's sample).
func (m *Metrics) EndInterval(ports []*array.Port, now time.Time, iv time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	secs := iv.Seconds()
	if secs <= 0 {
		return
	}
	for _, ap := range ports {
		p := m.port(ap.RelativeID)
		s := api.LatencySample{Time: now, IOPS: float64(p.pendOps) / secs, MBps: float64(p.pendBytes) / secs / 1e6}
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

// Gatherer is the registry, for /metrics.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Write writes every metric in the Prometheus text format.
func (m *Metrics) Write(w io.Writer) error {
	fams, err := m.reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// stateCollector reads the array's state and the per-port counters at
// scrape time.
type stateCollector struct{ v *View }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descNodeUp      = desc("aluad_node_up", "1 when the storage node is serving.", "node")
	descPortUp      = desc("aluad_port_up", "1 when the target port accepts logins (not taken down by a fault).", "node", "port")
	descSessions    = desc("aluad_sessions", "Logged-in normal iSCSI sessions (I_T nexuses), by target port.", "node", "port")
	descLUNOwner    = desc("aluad_lun_owner", "1 for the node that owns the LUN.", "lun", "node")
	descOnPreferred = desc("aluad_lun_on_preferred", "1 when the LUN is owned by its preferred owner.", "lun")
	descReports     = desc("aluad_reports_active", "Report conditions raised now, by condition and severity.", "condition", "severity")
	descReport      = desc("aluad_report_active", "1 for each report raised now, with what it is about (route alerts on host, node, luns, ports).",
		"condition", "code", "severity", "host", "node", "luns", "ports")
	descPathUp = desc("aluad_path_up", "1 for a host's logged-in path (one per session: isid), 0 for one that ended by a fault and has not come back.",
		"host", "initiator", "isid", "node", "port")
	descLUNSize     = desc("aluad_lun_size_bytes", "The LUN's capacity.", "lun", "wwid")
	descLUNCommands = desc("aluad_lun_commands_total", "SCSI commands to the LUN, by the node they arrived at.", "lun", "node")
	descLUNBytes    = desc("aluad_lun_bytes_total", "Bytes read and written to the LUN, by the node they arrived at.", "lun", "node")
	descLUNForward  = desc("aluad_lun_forwarded_commands_total", "Commands to the LUN that arrived at a non-owner node and went over the interlink.", "lun", "node")
	descCacheSize   = desc("aluad_cache_size_bytes", "The node's cache size (cache.size).", "node")
	descCacheUsed   = desc("aluad_cache_used_bytes", "Bytes the node's cache holds.", "node")
	descCacheDirty  = desc("aluad_cache_dirty_bytes", "Acknowledged writes in the node's cache not yet on the media.", "node")
	descCacheLimit  = desc("aluad_cache_dirty_limit_bytes", "The dirty level at which writes wait for destaging (cache.dirty_limit).", "node")
	descCacheMirror = desc("aluad_cache_mirror_held_bytes", "The partner's dirty pages the node's cache holds as their mirror copy.", "node")
	descNodeLoad    = desc("aluad_node_load_ratio", "The work the node served as owner in the last tick over its capacity (1 = the capacity the core plans with).", "node")
	descNodeCap     = desc("aluad_node_capacity_units", "The node's capacity in work units per tick (ownership.node_capacity, or set live).", "node")
	// portFamilies are the per-port counters, labelled node and port.
	portFamilies = []struct {
		d *prometheus.Desc
		v func(c *portCounters) float64
	}{
		{desc("aluad_port_commands_total", "SCSI commands that reached LUNs through the port.", "node", "port"),
			func(c *portCounters) float64 { return float64(c.Commands) }},
		{desc("aluad_port_read_bytes_total", "Bytes read through the port.", "node", "port"),
			func(c *portCounters) float64 { return float64(c.BytesRead) }},
		{desc("aluad_port_written_bytes_total", "Bytes written through the port.", "node", "port"),
			func(c *portCounters) float64 { return float64(c.BytesWritten) }},
		{desc("aluad_port_non_optimized_commands_total", "Commands that arrived while the port's group was non-optimized for the LUN (forwarded).", "node", "port"),
			func(c *portCounters) float64 { return float64(c.NonOptimized) }},
		{desc("aluad_port_service_seconds_total", "Summed device-server time of the port's commands (divide by commands for the mean).", "node", "port"),
			func(c *portCounters) float64 { return c.Busy.Seconds() }},
		{desc("aluad_port_exchanges_total", "Commands answered through the port (the exchange count).", "node", "port"),
			func(c *portCounters) float64 { return float64(c.Exchanges) }},
		{desc("aluad_port_exchange_seconds_total", "Summed exchange time, command in to status out, fabric included (divide by exchanges for the mean latency).", "node", "port"),
			func(c *portCounters) float64 { return c.Exchange.Seconds() }},
	}
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeUp, descPortUp, descSessions, descLUNOwner, descOnPreferred, descReports,
		descReport, descPathUp, descLUNSize, descLUNCommands, descLUNBytes, descLUNForward, descCacheSize, descCacheUsed,
		descCacheDirty, descCacheLimit, descCacheMirror, descNodeLoad, descNodeCap} {
		ch <- d
	}
	for _, f := range portFamilies {
		ch <- f.d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	v, arr := c.v, c.v.Array
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	for _, n := range arr.Nodes {
		gauge(descNodeUp, b2f(n.Up()), n.Name)
	}
	for _, pt := range arr.Ports {
		gauge(descPortUp, b2f(v.portUp(pt)), pt.Node.Name, pt.Name)
	}
	perPort := map[uint16]int{}
	for _, s := range v.sessions() {
		perPort[s.Nexus.TargetPort]++
	}
	for _, pt := range arr.Ports {
		gauge(descSessions, float64(perPort[pt.RelativeID]), pt.Node.Name, pt.Name)
	}
	seen := map[[5]string]bool{} // one sample per label set, whatever the views list
	for _, p := range v.Paths() {
		k := [5]string{p.Host, p.Initiator, p.ISID, p.Node, p.Port}
		if !seen[k] {
			seen[k] = true
			gauge(descPathUp, b2f(p.State == "up"), k[:]...)
		}
	}
	counter := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...)
	}
	for _, l := range arr.LUNs {
		own, lun := l.Owner(), strconv.FormatUint(l.ID, 10)
		st := l.Stats()
		for _, n := range arr.Nodes {
			gauge(descLUNOwner, b2f(n == own), lun, n.Name)
			s := &st[n.Index]
			counter(descLUNCommands, float64(s.Commands.Load()), lun, n.Name)
			counter(descLUNBytes, float64(s.Bytes.Load()), lun, n.Name)
			counter(descLUNForward, float64(s.Forwarded.Load()), lun, n.Name)
		}
		gauge(descOnPreferred, b2f(own == l.Preferred), lun)
		gauge(descLUNSize, float64(l.Size), lun, "naa."+hex.EncodeToString(arr.NAA(l)))
	}
	for _, n := range arr.Nodes {
		if n.Remote() || n.Cache == nil {
			continue // another controller process reports its cache
		}
		cs, cc := n.Cache.Stats(), n.Cache.Config()
		gauge(descCacheSize, float64(cc.Capacity), n.Name)
		gauge(descCacheUsed, float64(cs.Bytes), n.Name)
		gauge(descCacheDirty, float64(cs.Dirty), n.Name)
		gauge(descCacheLimit, float64(cc.DirtyLimit), n.Name)
		gauge(descCacheMirror, float64(cs.MirrorHeld), n.Name)
	}
	for _, ni := range v.Nodes() {
		if ni.Capacity > 0 {
			gauge(descNodeLoad, ni.Utilisation, ni.Name)
			gauge(descNodeCap, ni.Capacity, ni.Name)
		}
	}
	m := v.Metrics
	m.mu.Lock()
	rows := make([]portCounters, len(arr.Ports))
	for i, pt := range arr.Ports {
		rows[i] = *m.port(pt.RelativeID)
	}
	m.mu.Unlock()
	for _, f := range portFamilies {
		for i, pt := range arr.Ports {
			ch <- prometheus.MustNewConstMetric(f.d, prometheus.CounterValue, f.v(&rows[i]), pt.Node.Name, pt.Name)
		}
	}
	if rs, err := v.Reports(); err == nil {
		count := map[string]int{}
		for _, r := range rs {
			count[string(r.Condition)]++
		}
		for _, e := range ownership.Catalog() {
			gauge(descReports, float64(count[string(e.Condition)]), string(e.Condition), string(e.Severity))
		}
		for _, r := range rs {
			var luns []string
			for _, l := range r.LUNs {
				luns = append(luns, strconv.FormatUint(l, 10))
			}
			gauge(descReport, 1, string(r.Condition), r.Code, string(r.Severity), r.Host, r.Node, strings.Join(luns, ","),
				strings.Join(r.Ports, ","))
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
