package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// The audit log: every state-changing management call (any method but
// GET and HEAD), with who made it, what it asked and how it ended. It goes
// to the event feed (kind "audit"), to the daemon's log and, with a state
// directory, appended and synced to audit.log there (JSON lines).
//
// Who: on the control socket, the peer's uid and pid from the kernel
// (SO_PEERCRED); on TCP, the remote address and whether a bearer token
// vouched for it.

// AuditRecord is one audited call.
type AuditRecord struct {
	Time   time.Time `json:"time"`
	Who    string    `json:"who"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Body   string    `json:"body,omitempty"`
	Status int       `json:"status"`
}

// Audit is the audit log (a no-op without a directory).
type Audit struct {
	mu   sync.Mutex
	file *os.File
	log  *slog.Logger
	now  func() time.Time
}

// OpenAudit appends to audit.log in dir (none when dir is empty).
func OpenAudit(dir string, log *slog.Logger, now func() time.Time) (*Audit, error) {
	if log == nil {
		log = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	if dir == "" {
		return &Audit{log: log, now: now}, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, "audit.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &Audit{file: f, log: log, now: now}, nil
}

func (a *Audit) write(r AuditRecord) error {
	if a == nil || a.file == nil {
		return nil
	}
	b, _ := json.Marshal(r)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.file.Write(append(b, '\n')); err != nil {
		return err
	}
	return a.file.Sync()
}

// Close closes the file.
func (a *Audit) Close() {
	if a != nil && a.file != nil {
		a.mu.Lock()
		a.file.Close()
		a.file = nil
		a.mu.Unlock()
	}
}

type whoKey struct{}

// withWho tags a request context with the caller's identity.
func withWho(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, whoKey{}, who)
}

// whoOf names the caller of a request.
func whoOf(r *http.Request) string {
	who, _ := r.Context().Value(whoKey{}).(string)
	if who == "" {
		who = "tcp " + r.RemoteAddr
	}
	return who
}

// unixConnWho is the ConnContext of the control socket: the peer's
// credentials.
func unixConnWho(ctx context.Context, c net.Conn) context.Context {
	return withWho(ctx, "control socket "+peerCred(c))
}

// tcpConnWho names a TCP caller; tokened says a bearer token is checked.
func tcpConnWho(tokened bool) func(ctx context.Context, c net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		how := "loopback, no token"
		if tokened {
			how = "bearer token"
		}
		return withWho(ctx, fmt.Sprintf("api %s (%s)", c.RemoteAddr(), how))
	}
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// wrap records every state-changing call to h: to the feed, the log and
// the file.
func (a *Audit) wrap(arr Array, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		rec := AuditRecord{Time: a.now().UTC(), Who: whoOf(r), Method: r.Method, Path: r.URL.RequestURI(),
			Body: string(bytes.TrimSpace(body)), Status: sw.code}
		if len(rec.Body) > 512 {
			rec.Body = rec.Body[:512] + "..."
		}
		arr.Publish(api.Event{Kind: api.EventAudit, Initiator: rec.Who,
			Reason: fmt.Sprintf("%s %s %s -> %d", rec.Method, rec.Path, rec.Body, rec.Status)})
		a.log.Info("audit", "who", rec.Who, "method", rec.Method, "path", rec.Path, "status", rec.Status)
		if err := a.write(rec); err != nil {
			a.log.Error("audit log write failed", "err", err)
		}
	})
}
