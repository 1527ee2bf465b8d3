package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/reports"
)

// Client talks to a running aluad over its control socket or its
// management API on TCP.
type Client struct {
	path  string // the socket, or the API's base URL
	base  string
	token string
	http  *http.Client
}

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{path: path, base: "http://aluad", http: &http.Client{Transport: tr, Timeout: 2 * time.Minute}}
}

// NewHTTPClient returns a client for the management API at base
// ("http://127.0.0.1:8090"), sending token (if any) as a bearer token.
func NewHTTPClient(base, token string) *Client {
	base = strings.TrimRight(base, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &Client{path: base, base: base, token: token, http: &http.Client{Timeout: 2 * time.Minute}}
}

// NewHTTPClientDial is NewHTTPClient with the connections made by dial
// (the QEMU lab dials into its network namespace).
func NewHTTPClientDial(base, token string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Client {
	c := NewHTTPClient(base, token)
	c.http.Transport = &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 4}
	return c
}

// Do sends one API call: body (if any) as JSON, the reply decoded into
// out (if any); an error reply becomes the error.
func (c *Client) Do(method, url string, body, out any) error {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, c.base+url, rd)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("no aluad answering on %s (is 'aluad serve' running, and is this its --control or --api?): %w", c.path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 && resp.StatusCode != http.StatusInternalServerError {
		var e struct{ Error string }
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error != "" {
			return fmt.Errorf("%s", e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: bad reply: %w", method, url, err)
	}
	if resp.StatusCode == http.StatusInternalServerError {
		return fmt.Errorf("%s %s failed", method, url)
	}
	return nil
}

// LUNs lists the LUNs with their owners and group states.
func (c *Client) LUNs() ([]LUNInfo, error) {
	var out []LUNInfo
	return out, c.Do("GET", "/v1/luns", nil, &out)
}

// Move moves one LUN to node to and returns the change made.
func (c *Client) Move(lun uint64, to string) (*ChangeInfo, error) {
	var out ChangeInfo
	if err := c.Do("POST", fmt.Sprintf("/v1/luns/%d/move", lun), MoveRequest{To: to}, &out); err != nil {
		if out.Error != "" {
			return &out, fmt.Errorf("move failed and was rolled back: %s", out.Error)
		}
		return nil, err
	}
	return &out, nil
}

// Events returns the events after seq.
func (c *Client) Events(seq uint64) (EventsReply, error) {
	var out EventsReply
	return out, c.Do("GET", fmt.Sprintf("/v1/events?since=%d", seq), nil, &out)
}

// Inject injects a fault into the running daemon.
func (c *Client) Inject(f Fault) (FaultResult, error) {
	var out FaultResult
	return out, c.Do("POST", "/v1/faults", f, &out)
}

// IO returns the cumulative I/O counters of every (nexus, LUN).
func (c *Client) IO() ([]PathIO, error) {
	var out []PathIO
	return out, c.Do("GET", "/v1/io", nil, &out)
}

// SetCapacity re-declares a node's capacity to the ownership core.
func (c *Client) SetCapacity(node string, capacity float64) error {
	var out CapacityRequest
	return c.Do("PUT", "/v1/nodes/"+node+"/capacity", CapacityRequest{Capacity: capacity}, &out)
}

// Reports returns the conditions raised now.
func (c *Client) Reports() ([]reports.Report, error) {
	var out []reports.Report
	return out, c.Do("GET", "/v1/reports", nil, &out)
}

// Status returns the array at a glance.
func (c *Client) Status() (StatusInfo, error) {
	var out StatusInfo
	return out, c.Do("GET", "/v1/status", nil, &out)
}

// Hosts returns the declared hosts and the unknown initiators.
func (c *Client) Hosts() ([]HostInfo, error) {
	var out []HostInfo
	return out, c.Do("GET", "/v1/hosts", nil, &out)
}

// Connectivity returns the host x node matrix.
func (c *Client) Connectivity() (Connectivity, error) {
	var out Connectivity
	return out, c.Do("GET", "/v1/connectivity", nil, &out)
}

// Paths returns every path's counters.
func (c *Client) Paths() ([]PathInfo, error) {
	var out []PathInfo
	return out, c.Do("GET", "/v1/paths", nil, &out)
}

// ClearReport clears a latched report (path-flapping by LUN,
// host-type-incorrect by host).
func (c *Client) ClearReport(req ClearRequest) error {
	var out map[string]string
	return c.Do("POST", "/v1/reports/clear", req, &out)
}

// Rebalance asks for a balance plan now.
func (c *Client) Rebalance() (RebalanceReply, error) {
	var out RebalanceReply
	return out, c.Do("POST", "/v1/rebalance", struct{}{}, &out)
}

// Metrics returns the Prometheus text exposition.
func (c *Client) Metrics() (string, error) {
	req, err := http.NewRequest("GET", c.base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return string(b), err
}

// Mappings lists the LUN map.
func (c *Client) Mappings() ([]array.MappingConfig, error) {
	var out []array.MappingConfig
	return out, c.Do("GET", "/v1/mappings", nil, &out)
}

// Map adds a mapping.
func (c *Client) Map(m array.MappingConfig) (MappingReply, error) {
	var out MappingReply
	return out, c.Do("POST", "/v1/mappings", m, &out)
}

// HostSpecs lists the declared hosts as the configuration has them.
func (c *Client) HostSpecs() ([]HostSpec, error) {
	var out []HostSpec
	return out, c.Do("GET", "/v1/hosts/declared", nil, &out)
}

// RunningConfig is the running array's configuration as YAML.
func (c *Client) RunningConfig() ([]byte, error) {
	req, err := http.NewRequest("GET", c.base+"/v1/config", nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no aluad answering on %s (is 'aluad serve' running, and is this its --control or --api?): %w", c.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s", e.Error)
		}
		return nil, fmt.Errorf("GET /v1/config: %s", resp.Status)
	}
	return b, nil
}

// AddHost declares a host on the running array.
func (c *Client) AddHost(s HostSpec) (HostsReply, error) {
	var out HostsReply
	return out, c.Do("POST", "/v1/hosts", s, &out)
}

// ChangeHost changes a declared host's type, initiators or group live.
func (c *Client) ChangeHost(name string, ch HostChange) (HostsReply, error) {
	var out HostsReply
	return out, c.Do("PATCH", "/v1/hosts/"+url.PathEscape(name), ch, &out)
}

// RemoveHost removes a declared host (force: even with sessions logged in).
func (c *Client) RemoveHost(name string, force bool) (HostsReply, error) {
	var out HostsReply
	q := ""
	if force {
		q = "?force=1"
	}
	return out, c.Do("DELETE", "/v1/hosts/"+url.PathEscape(name)+q, nil, &out)
}

// Unmap removes the mapping of lun to host, group or (both empty) all hosts.
func (c *Client) Unmap(lun uint64, host, group string) (MappingReply, error) {
	q := url.Values{"lun": {strconv.FormatUint(lun, 10)}}
	if host != "" {
		q.Set("host", host)
	}
	if group != "" {
		q.Set("group", group)
	}
	var out MappingReply
	return out, c.Do("DELETE", "/v1/mappings?"+q.Encode(), nil, &out)
}

// ReportHistory lists every report raised and cleared.
func (c *Client) ReportHistory() ([]ReportRecord, error) {
	var out []ReportRecord
	return out, c.Do("GET", "/v1/reports/history", nil, &out)
}

// Trace reads the command trace from the cursors (GET /v1/trace) as
// reader, turning it on at the first read.
func (c *Client) Trace(bucket, note uint64, reader string) (TraceReply, error) {
	var out TraceReply
	return out, c.Do("GET", fmt.Sprintf("/v1/trace?bucket=%d&note=%d&reader=%s", bucket, note, url.QueryEscape(reader)), nil, &out)
}

// StopTrace turns the command trace off (DELETE /v1/trace).
func (c *Client) StopTrace() error {
	var out map[string]any
	return c.Do("DELETE", "/v1/trace", nil, &out)
}
