package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

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
//	GET  /v1/reports/history   every report raised and cleared (kept across restarts)
//	POST /v1/reports/clear     {"condition": "path-flapping", "lun": 0} or {"condition": "host-type-incorrect",
//	                           "host": "h1"}: clear a latched report (damping ends; observations restart)
//
// Every call but GET and HEAD is written to the audit log with who made it.
//	GET  /metrics              Prometheus text format
//	GET  /                     the web dashboard

// PathIOs reports the I/O counters of every (nexus, LUN).
func (d *Daemon) PathIOs() []api.PathIO {
	var out []api.PathIO
	for _, s := range d.SCSI.IOStats() {
		e := d.ctl.Event("", s.Nexus)
		out = append(out, api.PathIO{Initiator: e.Initiator, ISID: e.ISID, Host: e.Host, TargetPort: e.TargetPort,
			Node: e.Node, LUN: s.LUN, Reads: s.Reads, Writes: s.Writes, Other: s.Other, Media: s.Media,
			LastMedia: s.LastMedia, NonOptimized: s.NonOptimized, Gone: s.Gone})
	}
	return out
}

// LUNInfos reports every LUN.
func (d *Daemon) LUNInfos() []api.LUNInfo {
	var out []api.LUNInfo
	for _, l := range d.Array.LUNs {
		li := api.LUNInfo{ID: l.ID, Owner: l.Owner().Name, Preferred: l.Preferred.Name, Media: l.Media, Group: l.Group,
			Moving: l.Moving(), Generation: l.Generation()}
		for _, g := range l.Groups("") {
			li.Groups = append(li.Groups, api.GroupInfo{Node: g.Node.Name, ID: g.ID, State: g.State.String(), Pref: g.Pref,
				Status: g.Status, Ports: g.Ports})
		}
		st := l.Stats()
		for _, n := range d.Array.Nodes {
			s := &st[n.Index]
			li.Nodes = append(li.Nodes, api.NodeIO{Node: n.Name, Commands: s.Commands.Load(), Bytes: s.Bytes.Load(),
				Forwarded: s.Forwarded.Load(), ForwardedBytes: s.ForwardedBytes.Load()})
		}
		out = append(out, li)
	}
	return out
}

type controlServer struct {
	ln   net.Listener
	http *http.Server
	path string
}

func listenControl(path string, d *Daemon) (*controlServer, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s is in use by another aluad", path)
		}
		os.Remove(path) // stale, from a process that died
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	cs := &controlServer{ln: ln, path: path, http: &http.Server{Handler: d.ControlHandler(), ReadHeaderTimeout: 5 * time.Second,
		ConnContext: unixConnWho}}
	go cs.http.Serve(ln)
	return cs, nil
}

func (cs *controlServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs.http.Shutdown(ctx)
	os.Remove(cs.path)
}

// ControlHandler serves the control API.
func (d *Daemon) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/luns", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.LUNInfos())
	})
	mux.HandleFunc("POST /v1/luns/{id}/move", d.handleMove)
	mux.HandleFunc("PUT /v1/nodes/{name}/capacity", func(w http.ResponseWriter, r *http.Request) {
		var req api.CapacityRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		if err := d.SetNodeCapacity(r.PathValue("name"), req.Capacity); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, req)
	})
	mux.HandleFunc("GET /v1/reports", func(w http.ResponseWriter, r *http.Request) {
		rs, err := d.Reports()
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
		writeJSON(w, http.StatusOK, d.Status())
	})
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Nodes())
	})
	mux.HandleFunc("GET /v1/ports", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Ports())
	})
	mux.HandleFunc("GET /v1/hosts", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Hosts())
	})
	mux.HandleFunc("GET /v1/connectivity", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Connectivity())
	})
	mux.HandleFunc("GET /v1/paths", func(w http.ResponseWriter, r *http.Request) {
		ps := d.Paths()
		if ps == nil {
			ps = []api.PathInfo{}
		}
		writeJSON(w, http.StatusOK, ps)
	})
	mux.HandleFunc("GET /v1/latency", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Latency())
	})
	mux.HandleFunc("GET /v1/catalog", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, catalogSorted())
	})
	mux.HandleFunc("POST /v1/rebalance", func(w http.ResponseWriter, r *http.Request) {
		res, err := d.Rebalance()
		if err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("POST /v1/reports/clear", func(w http.ResponseWriter, r *http.Request) {
		var req api.ClearRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		if err := d.ClearReport(req); err != nil {
			writeError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"cleared": req.Condition})
	})
	mux.HandleFunc("GET /v1/events/stream", d.handleEventStream)
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
	mux.Handle("GET /", dashboard())
	mux.HandleFunc("GET /v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such API call: %s %s", r.Method, r.URL.Path))
	})
	mux.HandleFunc("GET /v1/io", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.PathIOs())
	})
	mux.HandleFunc("POST /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		var f api.Fault
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		res, err := d.Inject(f)
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
		ev, lost := d.Events.Since(since)
		writeJSON(w, http.StatusOK, api.EventsReply{Events: ev, Lost: lost})
	})
	mux.HandleFunc("GET /v1/mappings", func(w http.ResponseWriter, r *http.Request) {
		ms := d.Array.Mappings()
		if ms == nil {
			ms = []array.MappingConfig{}
		}
		writeJSON(w, http.StatusOK, ms)
	})
	mux.HandleFunc("POST /v1/mappings", func(w http.ResponseWriter, r *http.Request) {
		var m MappingRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			writeError(w, http.StatusBadRequest, "body: "+err.Error())
			return
		}
		res, err := d.Map(m, whoOf(r))
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
		res, err := d.Unmap(array.MappingConfig{LUN: lun, Host: q.Get("host"), Group: q.Get("group")}, whoOf(r))
		if err != nil {
			writeError(w, http.StatusNotFound, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /v1/reports/history", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.ReportHistory())
	})
	return d.audited(mux)
}

func (d *Daemon) handleMove(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("bad LUN %q", r.PathValue("id")))
		return
	}
	var req api.MoveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if d.Array.LUN(id) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no LUN %d", id))
		return
	}
	if d.Array.Node(req.To) == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no node %q", req.To))
		return
	}
	c, err := d.Array.Move([]uint64{id}, req.To, array.CauseManual)
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
func catalogSorted() []reports.Entry {
	out := make([]reports.Entry, 0, len(reports.Catalog))
	for _, e := range reports.Catalog {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Condition < out[j].Condition })
	return out
}
