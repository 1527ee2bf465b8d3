package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/reports"
)

// capture runs f with os.Stdout going to a buffer.
func capture(t *testing.T, f func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, r)
		done <- b.String()
	}()
	ferr := f()
	os.Stdout = old
	w.Close()
	return <-done, ferr
}

// The operator's commands end to end: h1 (declared linux-dmmp) loses its
// paths to node a; status, hosts, paths and report show it, in tables and
// JSON, over the control socket and over the TCP API with a token file;
// repaired, the report clears.
func TestViewCommands(t *testing.T) {
	cfg := config.Loopback(t.TempDir(), 1<<20)
	cfg.Hosts = []array.HostConfig{{Name: "h1", Type: "linux-dmmp", Initiators: []string{"iqn.2026-11.org.example:h1"}}}
	cfg.Ownership.Tick = 50 * time.Millisecond
	cfg.Ownership.AlertDelay = 100 * time.Millisecond
	require.NoError(t, cfg.Validate())
	ctl := filepath.Join(cfg.Data, "aluad.sock")
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokFile, []byte("t0ken\n"), 0o600))
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Control: ctl, API: "127.0.0.1:0", APIToken: "t0ken", StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(time.Second)
	apiArgs := []string{"--api", "http://" + d.APIAddr(), "--token-file", tokFile}
	sock := []string{"--control", ctl}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	login := func(i int, isid byte) *initiator.Session {
		p := d.Portals()[i]
		s, err := initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Target: p.Target,
			InitiatorName: "iqn.2026-11.org.example:h1", ISID: [6]byte{0x80, 0, 0, 0, 0, isid}})
		require.NoError(t, err)
		for k := 0; k < 4; k++ { // past the power-on UA
			if _, err = s.ReportTargetPortGroups(ctx, 0, true); err == nil {
				break
			}
		}
		require.NoError(t, err)
		return s
	}
	var ss []*initiator.Session
	for i := 0; i < 4; i++ {
		s := login(i, byte(1+i))
		defer s.Close()
		ss = append(ss, s)
	}
	// Its multipath checker probes every path (one RTPG discovers none),
	// until the core knows it reaches both nodes.
	ck := initiator.NewChecker(10*time.Millisecond, ss...)
	defer ck.Stop()
	require.Eventually(t, func() bool {
		for _, h := range d.Hosts() {
			if h.Name == "h1" {
				return h.Nodes["a"] == "reaches" && h.Nodes["b"] == "reaches"
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "h1's probed paths discovered")

	// The LUN table names each LUN as its hosts see it: the WWID is
	// the NAA designator the host reads in VPD page 83h.
	vpd, err := ss[0].Inquiry(ctx, 2, true, 0x83)
	require.NoError(t, err)
	naa := ""
	for i := 4; i+4 <= len(vpd); i += 4 + int(vpd[i+3]) {
		if vpd[i+1]&0x0f == 3 && vpd[i+1]&0x30 == 0 { // NAA, of the logical unit
			naa = "naa." + hex.EncodeToString(vpd[i+4:i+4+int(vpd[i+3])])
		}
	}
	require.NotEmpty(t, naa)
	out, err := capture(t, func() error { return luns(sock) })
	require.NoError(t, err)
	require.Regexp(t, `(?m)^2\s+1MiB\s+512\s+`+naa+`\s+a\s+a\s+a\(1\)=AO\+PREF`, out)
	var ls []api.LUNInfo
	out, err = capture(t, func() error { return luns(append([]string{"-o", "json"}, sock...)) })
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &ls))
	require.Equal(t, int64(1<<20), ls[2].Size)
	require.Equal(t, naa, ls[2].WWID)

	out, err = capture(t, func() error { return status(apiArgs) })
	require.NoError(t, err)
	require.Contains(t, out, "implicit ALUA, ownership core running")
	require.Regexp(t, `NODE\s+STATE\s+GROUP\s+OWNS\s+PREFERRED_FOR\s+LOAD\s+EXPANSION\s+PORTS`, out)
	require.Regexp(t, `a\s+online\s+1\s+4\s+4\s+\d+% of 1000`, out)
	require.Contains(t, out, "a0 127.0.0.1:")
	require.Contains(t, out, "hosts 1 declared, 0 unknown initiators; sessions 4")
	_, err = capture(t, func() error { return status([]string{"--api", "http://" + d.APIAddr()}) })
	require.ErrorContains(t, err, "bearer token is required", "no token, no data")

	// Partial fault: h1's paths to node a.
	for _, p := range []string{"a0", "a1"} {
		_, err = capture(t, func() error {
			return fault(append([]string{"path-down", "--port", p, "--initiator", "iqn.2026-11.org.example:h1"}, sock...))
		})
		require.NoError(t, err)
	}
	var rs []reports.Report
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err = capture(t, func() error { return report(append([]string{"-o", "json"}, sock...)) })
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal([]byte(out), &rs))
		if len(rs) > 0 && rs[0].Condition == "host-redundancy-lost" {
			break
		}
		require.True(t, time.Now().Before(deadline), "no Host Redundancy Lost: %s", out)
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, "h1", rs[0].Host)
	require.Equal(t, "a", rs[0].Node)
	require.Equal(t, []string{"a0", "a1"}, rs[0].Ports)
	out, err = capture(t, func() error { return report(apiArgs) })
	require.NoError(t, err)
	require.Contains(t, out, "HOST REDUNDANCY LOST: host h1, node a [critical, HRL]")
	require.Contains(t, out, "Ports:    a0, a1")
	// /metrics names what an alert routes on: the report's host, node
	// and ports, and each lost path.
	text, err := api.NewHTTPClient("http://"+d.APIAddr(), "t0ken").Metrics()
	require.NoError(t, err)
	require.True(t, metricLine(text, "aluad_report_active", " 1", `condition="host-redundancy-lost"`, `host="h1"`, `node="a"`,
		`ports="a0,a1"`, `severity="critical"`), "%s", text)
	require.True(t, metricLine(text, "aluad_path_up", " 0", `host="h1"`, `port="a0"`), "a lost path")
	require.True(t, metricLine(text, "aluad_path_up", " 1", `host="h1"`, `port="b0"`), "a path up")
	require.Contains(t, out, "Recovery procedure")

	out, err = capture(t, func() error { return hosts(sock) })
	require.NoError(t, err)
	require.Regexp(t, `h1\s+linux-dmmp\s+yes\s+STANDBY\s+yes\s+unknown\s+2\s+lost\s+reaches`, out)
	out, err = capture(t, func() error { return hosts(append([]string{"-o", "json"}, apiArgs...)) })
	require.NoError(t, err)
	var hs []api.HostInfo
	require.NoError(t, json.Unmarshal([]byte(out), &hs))
	require.Equal(t, map[string]string{"a": "lost", "b": "reaches"}, hs[0].Nodes)

	out, err = capture(t, func() error { return paths(sock) })
	require.NoError(t, err)
	require.Contains(t, out, "Host h1: 4 paths, 2 FAILED", "the lost paths stay in view")
	require.Regexp(t, `state\s+up\s+up\s+FAILED \(`, out)
	require.Contains(t, out, "average latency time us")
	require.Regexp(t, `L1\s+RDY/AO`, out, "LUN 1 is node b's")
	out, err = capture(t, func() error { return paths(append([]string{"-o", "json"}, sock...)) })
	require.NoError(t, err)
	var ps []api.PathInfo
	require.NoError(t, json.Unmarshal([]byte(out), &ps))
	require.Len(t, ps, 4)
	byState := map[string][]string{}
	for _, p := range ps {
		byState[p.State] = append(byState[p.State], p.Port)
	}
	require.Equal(t, map[string][]string{"up": {"b0", "b1"}, "failed": {"a0", "a1"}}, byState)

	out, err = capture(t, func() error { return rebalance(sock) })
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "nothing to move: "), out)

	// Repair: h1 logs in to node a again; the report clears.
	_, err = capture(t, func() error { return fault(append([]string{"clear"}, sock...)) })
	require.NoError(t, err)
	again := login(0, 9)
	defer again.Close()
	ck.Add(again) // its checker probes the new path
	deadline = time.Now().Add(10 * time.Second)
	for {
		out, err = capture(t, func() error { return report(sock) })
		require.NoError(t, err)
		if strings.HasPrefix(out, "No problems") {
			break
		}
		require.True(t, time.Now().Before(deadline), "not cleared: %s", out)
		time.Sleep(50 * time.Millisecond)
	}

	for _, tc := range []struct {
		f    func([]string) error
		args []string
		want string
	}{
		{status, []string{"-o", "xml"}, `-o "xml": want text or json`},
		{hosts, []string{"extra"}, `unexpected argument "extra"`},
		{paths, []string{"--api", "http://127.0.0.1:1", "--token-file", filepath.Join(t.TempDir(), "none")}, "token file"},
		{paths, []string{"--control", filepath.Join(t.TempDir(), "none.sock")}, "no aluad answering"},
	} {
		_, err := capture(t, func() error { return tc.f(tc.args) })
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

// metricLine says text has a sample of name with every label and the
// value suffix.
func metricLine(text, name, value string, labels ...string) bool {
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name+"{") || !strings.HasSuffix(l, value) {
			continue
		}
		ok := true
		for _, lb := range labels {
			ok = ok && strings.Contains(l, lb)
		}
		if ok {
			return true
		}
	}
	return false
}
