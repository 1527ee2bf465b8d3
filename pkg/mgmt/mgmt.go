// Package mgmt owns the array's management surface: the views an admin
// reads (status, nodes, ports, hosts, connectivity, paths, latency,
// reports, LUNs; View), the Prometheus metrics, and the transports: the
// JSON API over HTTP on a local Unix socket and on TCP (with a bearer
// token beyond loopback), the event stream, /metrics, the web dashboard
// and the audit log of every state-changing call with who made it. What
// it reports and does comes from an Array (the running daemon).
package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/reports"
)

// The management API: JSON over HTTP, served on a local Unix socket (only
// local users with access to the socket file reach it) and on a TCP
// address (127.0.0.1:8090 by default; any other address needs a bearer
// token), which also serves /metrics and the web dashboard.
//
//	GET  /v1/status            the array at a glance: nodes, ports, sessions, reports by severity
//	GET  /v1/nodes             nodes with their ports, LUN counts and the core's load figures
//	GET  /v1/ports             target ports: address, group, up, sessions
//	GET  /v1/luns              owners, preferred owners, ALUA state per group, per-node counters
//	POST /v1/luns/{id}/move    {"to": "b"}: a manual move (flush under I/O, short hold, 2A/06)
//	GET  /v1/hosts             declared hosts and unknown initiators, with per-node connectivity
//	GET  /v1/connectivity      the host x node connectivity matrix
//	GET  /v1/paths             per-path counters (like "ra mlm load show"), per-LUN state on each path
//	GET  /v1/latency           per-port latency and rate over the recent stats intervals
//	GET  /v1/reports           the conditions raised now (Recovery Guru reports)
//	GET  /v1/catalog           every report condition: code, title, severity, meaning, procedure
//	GET  /v1/events?since=N    the event feed after sequence N
//	GET  /v1/events/stream     the event feed as server-sent events (?since=N)
//	GET  /v1/io                cumulative I/O per (nexus, LUN), with the last media arrival
//	POST /v1/rebalance         "rebalance now": the core plans at once (the ROI check still decides)
//	PUT  /v1/nodes/{name}/capacity {"capacity": 40}: the node's work units per tick, for the ownership core
//	POST /v1/faults            {"kind": "crash", "node": "a"}: inject a fault (see Fault)
//	GET  /v1/mappings          the LUN map: LUN, host or group (neither: all hosts), host LUN
//	POST /v1/mappings          {"lun": 3, "host": "h1", "host_lun": 0}: map; 3F/0E to the nexuses it changes
//	DELETE /v1/mappings?lun=3&host=h1 (or &group=g, or neither): unmap; 3F/0E likewise
//	GET  /v1/hosts/declared    the declared hosts as the configuration has them
//	POST /v1/hosts             {"name": "db1", "type": "linux-dmmp", "initiators": ["iqn..."]}: declare a host live
//	PATCH /v1/hosts/{name}     {"type": "linux-dmmp"} (or add_initiators, remove_initiators, group): change it live;
//	                           2A/06 where its access states change, 3F/0E where its LUN view does
//	DELETE /v1/hosts/{name}    remove it (refused while mappings name it, or while it has sessions unless
//	                           ?force=1); its initiators are undeclared after
//	GET  /v1/config            the running configuration as YAML that aluad serve --config accepts
//	GET  /v1/reports/history   every report raised and cleared (kept across restarts)
//	POST /v1/reports/clear     {"condition": "path-flapping", "lun": 0} or {"condition": "host-type-incorrect",
//	                           "host": "h1"}: clear a latched report (damping ends; observations restart)
//
// Every call but GET and HEAD is written to the audit log with who made it.
//	GET  /metrics              Prometheus text format
//	GET  /                     the web dashboard

// Array is what the management API serves: the running array's views
// and operations.
type Array interface {
	Status() api.StatusInfo
	Nodes() []api.NodeInfo
	Ports() []api.PortInfo
	LUNInfos() []api.LUNInfo
	Hosts() []api.HostInfo
	Connectivity() api.Connectivity
	Paths() []api.PathInfo
	PathIOs() []api.PathIO
	// Trace reads the command trace from the cursors, turning it on;
	// StopTrace turns it off.
	Trace(bucket, note uint64, reader string) api.TraceReply
	StopTrace()
	Latency() []api.PortLatency
	Reports() ([]reports.Report, error)
	ReportHistory() []api.ReportRecord
	ClearReport(api.ClearRequest) error
	Rebalance() (api.RebalanceReply, error)
	SetNodeCapacity(node string, capacity float64) error
	// Move is an operator's move of one LUN; an unknown LUN or node is
	// ErrNotFound.
	Move(lun uint64, to string) (array.Change, error)
	Inject(api.Fault) (api.FaultResult, error)
	Mappings() []array.MappingConfig
	Map(m array.MappingConfig, who string) (api.MappingReply, error)
	Unmap(m array.MappingConfig, who string) (api.MappingReply, error)
	HostSpecs() []api.HostSpec
	AddHost(s api.HostSpec, who string) (api.HostsReply, error)
	ChangeHost(name string, c api.HostChange, who string) (api.HostsReply, error)
	RemoveHost(name string, force bool, who string) (api.HostsReply, error)
	// RunningConfig is the configuration as it runs now, as YAML.
	RunningConfig() ([]byte, error)
	// EventsSince is the feed after sequence seq, and how many events
	// after seq it no longer holds.
	EventsSince(seq uint64) ([]api.Event, uint64)
	// Publish adds an event to the feed (the audit log's records).
	Publish(api.Event)
	Gatherer() prometheus.Gatherer
	// Done is closed when the array stops (event streams end).
	Done() <-chan struct{}
}

// ErrNotFound: the call names a LUN or node the array does not have (a
// NotFound error is one).
var ErrNotFound = errors.New("not found")

// NotFound is an ErrNotFound that says what was not found, and only that.
func NotFound(msg string) error { return notFound(msg) }

type notFound string

func (e notFound) Error() string        { return string(e) }
func (e notFound) Is(target error) bool { return target == ErrNotFound }

// Handler serves the management API, /metrics and the dashboard for a,
// auditing every state-changing call.
func Handler(a Array, audit *Audit) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/luns", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.LUNInfos())
	})
	mux.HandleFunc("POST /v1/luns/{id}/move", func(w http.ResponseWriter, r *http.Request) { handleMove(a, w, r) })
	mux.HandleFunc("PUT /v1/nodes/{name}/capacity", func(w http.ResponseWriter, r *http.Request) {
		var req api.CapacityRequest
		if !decodeBody(w, r, &req) {
			return
		}
		if err := a.SetNodeCapacity(r.PathValue("name"), req.Capacity); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, req)
	})
	mux.HandleFunc("GET /v1/reports", func(w http.ResponseWriter, r *http.Request) {
		rs, err := a.Reports()
		if err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		if rs == nil {
			rs = []reports.Report{}
		}
		writeJSON(w, http.StatusOK, rs)
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Status())
	})
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Nodes())
	})
	mux.HandleFunc("GET /v1/ports", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Ports())
	})
	mux.HandleFunc("GET /v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Hosts())
	})
	mux.HandleFunc("GET /v1/connectivity", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Connectivity())
	})
	mux.HandleFunc("GET /v1/paths", func(w http.ResponseWriter, r *http.Request) {
		ps := a.Paths()
		if ps == nil {
			ps = []api.PathInfo{}
		}
		writeJSON(w, http.StatusOK, ps)
	})
	mux.HandleFunc("GET /v1/latency", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Latency())
	})
	mux.HandleFunc("GET /v1/catalog", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, catalogSorted())
	})
	mux.HandleFunc("POST /v1/rebalance", func(w http.ResponseWriter, r *http.Request) {
		res, err := a.Rebalance()
		if err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("POST /v1/reports/clear", func(w http.ResponseWriter, r *http.Request) {
		var req api.ClearRequest
		if !decodeBody(w, r, &req) {
			return
		}
		if err := a.ClearReport(req); err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"cleared": req.Condition})
	})
	mux.HandleFunc("GET /v1/events/stream", func(w http.ResponseWriter, r *http.Request) { handleEventStream(a, w, r) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Gatherer(), promhttp.HandlerOpts{
		// One family that cannot be gathered does not blank the others.
		ErrorHandling: promhttp.ContinueOnError}))
	mux.Handle("GET /", dashboard())
	mux.HandleFunc("GET /v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such API call: %s %s", r.Method, r.URL.Path))
	})
	mux.HandleFunc("GET /v1/io", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.PathIOs())
	})
	mux.HandleFunc("GET /v1/trace", func(w http.ResponseWriter, r *http.Request) {
		var cur [2]uint64
		for i, k := range []string{"bucket", "note"} {
			if v := r.URL.Query().Get(k); v != "" {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					writeError(w, http.StatusBadRequest, k+" must be a cursor (a number)")
					return
				}
				cur[i] = n
			}
		}
		writeJSON(w, http.StatusOK, a.Trace(cur[0], cur[1], r.URL.Query().Get("reader")))
	})
	mux.HandleFunc("DELETE /v1/trace", func(w http.ResponseWriter, r *http.Request) {
		a.StopTrace()
		writeJSON(w, http.StatusOK, map[string]string{"trace": "off"})
	})
	mux.HandleFunc("POST /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		var f api.Fault
		if !decodeBody(w, r, &f) {
			return
		}
		res, err := a.Inject(f)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		since, err := strconv.ParseUint(r.URL.Query().Get("since"), 10, 64)
		if err != nil && r.URL.Query().Get("since") != "" {
			writeError(w, http.StatusBadRequest, "since must be a sequence number")
			return
		}
		ev, lost := a.EventsSince(since)
		writeJSON(w, http.StatusOK, api.EventsReply{Events: ev, Lost: lost})
	})
	mux.HandleFunc("GET /v1/mappings", func(w http.ResponseWriter, r *http.Request) {
		ms := a.Mappings()
		if ms == nil {
			ms = []array.MappingConfig{}
		}
		writeJSON(w, http.StatusOK, ms)
	})
	mux.HandleFunc("POST /v1/mappings", func(w http.ResponseWriter, r *http.Request) {
		var m array.MappingConfig
		if !decodeBody(w, r, &m) {
			return
		}
		res, err := a.Map(m, whoOf(r))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("DELETE /v1/mappings", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		lun, err := strconv.ParseUint(q.Get("lun"), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "lun= must be a LUN id")
			return
		}
		res, err := a.Unmap(array.MappingConfig{LUN: lun, Host: q.Get("host"), Group: q.Get("group")}, whoOf(r))
		if err != nil {
			writeError(w, http.StatusNotFound, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	hostReply := func(w http.ResponseWriter, res api.HostsReply, err error) {
		switch {
		case errors.Is(err, ErrNotFound):
			writeError(w, http.StatusNotFound, err.Error())
		case err != nil:
			writeError(w, http.StatusBadRequest, err.Error())
		default:
			writeJSON(w, http.StatusOK, res)
		}
	}
	mux.HandleFunc("GET /v1/hosts/declared", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.HostSpecs())
	})
	mux.HandleFunc("POST /v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		var s api.HostSpec
		if !decodeBody(w, r, &s) {
			return
		}
		res, err := a.AddHost(s, whoOf(r))
		hostReply(w, res, err)
	})
	mux.HandleFunc("PATCH /v1/hosts/{name}", func(w http.ResponseWriter, r *http.Request) {
		var c api.HostChange
		if !decodeBody(w, r, &c) {
			return
		}
		res, err := a.ChangeHost(r.PathValue("name"), c, whoOf(r))
		hostReply(w, res, err)
	})
	mux.HandleFunc("DELETE /v1/hosts/{name}", func(w http.ResponseWriter, r *http.Request) {
		res, err := a.RemoveHost(r.PathValue("name"), r.URL.Query().Get("force") == "1", whoOf(r))
		hostReply(w, res, err)
	})
	mux.HandleFunc("GET /v1/config", func(w http.ResponseWriter, r *http.Request) {
		b, err := a.RunningConfig()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(b)
	})
	mux.HandleFunc("GET /v1/reports/history", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.ReportHistory())
	})
	return audit.wrap(a, mux)
}

// handleMove is POST /v1/luns/{id}/move.
func handleMove(a Array, w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad LUN %q", r.PathValue("id")))
		return
	}
	var req api.MoveRequest
	if !decodeBody(w, r, &req) {
		return
	}
	c, err := a.Move(id, req.To)
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	switch {
	case errors.Is(err, array.ErrNoChange):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil && !c.Failed:
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, api.NewChangeInfo(c))
	default:
		writeJSON(w, http.StatusOK, api.NewChangeInfo(c))
	}
}

// decodeBody reads a small JSON body into v, refusing unknown fields; a
// bad body is answered 400 and false returned.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// catalogSorted is the report catalog in condition order.
func catalogSorted() []ownership.Warnable {
	out := ownership.Catalog()
	sort.Slice(out, func(i, j int) bool { return out[i].Condition < out[j].Condition })
	return out
}

// handleEventStream serves the feed as server-sent events: one "data:"
// line of JSON per event, its sequence number as the event id, from
// ?since=N (or the Last-Event-ID header a reconnecting client sends).
func handleEventStream(a Array, w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming is not supported on this connection")
		return
	}
	from := r.URL.Query().Get("since")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		from = id
	}
	since, err := strconv.ParseUint(from, 10, 64)
	if err != nil && from != "" {
		writeError(w, http.StatusBadRequest, "since must be a sequence number")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		evs, lost := a.EventsSince(since)
		if lost > 0 {
			fmt.Fprintf(w, "event: lost\ndata: %d\n\n", lost)
		}
		for _, e := range evs {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, b)
			since = e.Seq
		}
		if len(evs) > 0 || lost > 0 {
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-a.Done():
			return
		case <-t.C:
		}
	}
}
