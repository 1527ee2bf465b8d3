package mgmt

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"
)

type ControlServer struct {
	ln   net.Listener
	http *http.Server
	path string
}

// ListenControl serves h on a Unix socket at path (mode 0600: only its
// owner and root reach it); a stale socket file is replaced, one another
// aluad answers on is refused.
func ListenControl(path string, h http.Handler) (*ControlServer, error) {
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
	cs := &ControlServer{ln: ln, path: path, http: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		ConnContext: unixConnWho}}
	go cs.http.Serve(ln)
	return cs, nil
}

// Close stops serving and removes the socket file.
func (cs *ControlServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs.http.Shutdown(ctx)
	os.Remove(cs.path)
}

// APIServer is the management API on TCP.
type APIServer struct {
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

// ListenAPI serves h on TCP at addr; an address other machines can reach
// needs a token, which every API call and /metrics must then carry.
func ListenAPI(addr, token string, h http.Handler) (*APIServer, error) {
	if err := checkAPIAddr(addr, token); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("management API: %w", err)
	}
	s := &APIServer{ln: ln, http: &http.Server{Handler: requireToken(token, h), ReadHeaderTimeout: 5 * time.Second,
		ConnContext: tcpConnWho(token != "")}}
	go s.http.Serve(ln)
	return s, nil
}

// Close stops serving.
func (s *APIServer) Close() {
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
		guarded := strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/metrics" || strings.HasPrefix(r.URL.Path, "/debug/")
		if guarded && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aluad"`)
			writeError(w, http.StatusUnauthorized, "a bearer token is required (Authorization: Bearer <token>)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// WithProfiles adds Go's runtime profiles (net/http/pprof) under
// /debug/pprof/ to h: CPU, heap, allocations, goroutines, mutex and block
// profiles of the running array, for the bench and for a user who wants
// to see where the target spends its time. Off unless asked for; behind
// the API's token like the API itself.
func WithProfiles(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", h)
	return mux
}

// Addr is the bound address.
func (s *APIServer) Addr() string { return s.ln.Addr().String() }
