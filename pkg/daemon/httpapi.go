package daemon

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// Connectivity reports the host x node matrix.
func (d *Daemon) Connectivity() api.Connectivity {
	c := api.Connectivity{Hosts: []api.ConnectivityRow{}}
	for _, n := range d.Array.Nodes {
		c.Nodes = append(c.Nodes, n.Name)
	}
	for _, h := range d.Hosts() {
		row := api.ConnectivityRow{Host: h.Name, Declared: h.Declared, Type: h.Type}
		for _, n := range c.Nodes {
			row.Cells = append(row.Cells, h.Nodes[n])
		}
		c.Hosts = append(c.Hosts, row)
	}
	return c
}

// handleEventStream serves the feed as server-sent events: one "data:"
// line of JSON per event, its sequence number as the event id, from
// ?since=N (or the Last-Event-ID header a reconnecting client sends).
func (d *Daemon) handleEventStream(w http.ResponseWriter, r *http.Request) {
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
		evs, lost := d.Events.Since(since)
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
		case <-d.done:
			return
		case <-t.C:
		}
	}
}

// apiServer is the management API on TCP.
type apiServer struct {
	ln   net.Listener
	http *http.Server
}

// isLoopback: the address can only be reached from this machine.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkAPIAddr refuses an address other machines can reach unless a token
// guards it.
func checkAPIAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("management API address %q: %v", addr, err)
	}
	if !isLoopback(host) && token == "" {
		return fmt.Errorf("management API address %s is reachable from other machines: give it a token "+
			"(--api-token-file, or ALUAD_API_TOKEN), or bind it to 127.0.0.1", addr)
	}
	return nil
}

func listenAPI(addr, token string, h http.Handler) (*apiServer, error) {
	if err := checkAPIAddr(addr, token); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("management API: %w", err)
	}
	s := &apiServer{ln: ln, http: &http.Server{Handler: requireToken(token, h), ReadHeaderTimeout: 5 * time.Second,
		ConnContext: tcpConnWho(token != "")}}
	go s.http.Serve(ln)
	return s, nil
}

func (s *apiServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.http.Shutdown(ctx)
}

// requireToken guards the API and /metrics with a bearer token (none when
// token is empty). The dashboard's own files carry no data and are served
// to anyone; the page sends the token it was given in its URL fragment.
func requireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		guarded := strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/metrics"
		if guarded && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aluad"`)
			writeError(w, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// APIAddr is the bound address of the management API ("" when none).
func (d *Daemon) APIAddr() string {
	if d.api == nil {
		return ""
	}
	return d.api.ln.Addr().String()
}
