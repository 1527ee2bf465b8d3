// Package aluacheck checks aluad's ALUA behaviour with an independent
// client: testdata/alua-check.c, built on libiscsi, decodes INQUIRY, VPD 0x83,
// RTPG and sense bytes itself. The Go side only starts aluad, drives the
// array (moves) and asserts on what the C client saw.
package aluacheck

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/daemon"
)

// needTool builds alua-check with gcc and libiscsi-dev. Without them the
// test skips, unless ALUAD_REQUIRE_EXTERNAL is set (scripts/test.sh sets
// it after installing them), where a missing tool is a failure.
func needTool(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "alua-check")
	cmd := exec.Command("gcc", "-O2", "-Wall", "-o", out, "testdata/alua-check.c", "-liscsi")
	if b, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv("ALUAD_REQUIRE_EXTERNAL") != "" {
			t.Fatalf("building alua-check (needs gcc and libiscsi-dev): %v\n%s", err, b)
		}
		t.Skipf("alua-check not built (needs gcc and libiscsi-dev; scripts/deps.sh installs them): %v", err)
	}
	return out
}

// client is a running alua-check with one session per URL.
type client struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	log   *strings.Builder
	paths int
}

func startClient(t *testing.T, tool, initiator string, urls []string) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, tool, append([]string{"-i", initiator}, urls...)...)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outp, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	c := &client{t: t, cmd: cmd, in: in, out: bufio.NewScanner(outp), log: &strings.Builder{}, paths: len(urls)}
	require.True(t, c.out.Scan(), "alua-check did not start")
	require.Equal(t, fmt.Sprintf("ready %d", len(urls)), c.out.Text())
	t.Cleanup(c.close)
	return c
}

// do sends one command and returns its answer without the "<cmd> <i> " prefix.
func (c *client) do(format string, args ...any) string {
	c.t.Helper()
	line := fmt.Sprintf(format, args...)
	_, err := fmt.Fprintln(c.in, line)
	require.NoError(c.t, err)
	require.True(c.t, c.out.Scan(), "alua-check exited after %q", line)
	ans := c.out.Text()
	fmt.Fprintf(c.log, "> %s\n%s\n", line, ans)
	f := strings.Fields(line)
	prefix := f[0] + " " + f[1] + " "
	require.True(c.t, strings.HasPrefix(ans, prefix), "answer %q to %q", ans, line)
	return strings.TrimPrefix(ans, prefix)
}

func (c *client) close() {
	fmt.Fprintln(c.in, "quit")
	c.in.Close()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second): // logging out of a path whose node crashed can hang
		c.cmd.Process.Kill()
		<-done
	}
}

// field returns key=value's value from an answer.
func field(ans, key string) string {
	for _, f := range strings.Fields(ans) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

func startArray(t *testing.T, mode string, hosts ...array.HostConfig) *daemon.Daemon {
	t.Helper()
	cfg := config.Loopback(t.TempDir(), 16<<20)
	cfg.ALUA = mode
	cfg.Hosts = hosts
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Control: filepath.Join(cfg.Data, "aluad.sock"), StatsInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	return d
}

func urls(d *daemon.Daemon, lun uint64) []string {
	var out []string
	for _, p := range d.Portals() {
		out = append(out, fmt.Sprintf("iscsi://%s/%s/%d", p.Addr, p.Target, lun))
	}
	return out
}

// groupOf parses "1:AO:1:00:1,2;2:ANO:0:00:3,4;" into group id -> state
// and port -> group id.
func groupsOf(t *testing.T, s string) (states map[string]string, portGroup map[string]string, status map[string]string) {
	states, portGroup, status = map[string]string{}, map[string]string{}, map[string]string{}
	for _, g := range strings.Split(strings.TrimSuffix(s, ";"), ";") {
		f := strings.Split(g, ":")
		require.Len(t, f, 5, "group %q", g)
		states[f[0]] = f[1]
		status[f[0]] = f[3]
		for _, p := range strings.Split(f[4], ",") {
			portGroup[p] = f[0]
		}
	}
	return
}

func writeResult(t *testing.T, name string, c *client) {
	if dir := os.Getenv("ALUAD_RESULTS"); dir != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(c.log.String()), 0o644))
	}
}

// Every path of every LUN: TPGS != 0, one NAA per LUN on all paths,
// unique relative port ids, the type-5 group is the RTPG group listing
// that port, exactly one AO group, both RTPG formats agree. Then a move
// through the control socket: the next command on each nexus returns
// 2A/06 exactly once, RTPG shows the new states with status 02h. STPG is
// refused with ILLEGAL REQUEST.
func TestIndependentClientImplicit(t *testing.T) {
	tool := needTool(t)
	d := startArray(t, "implicit")
	naas := map[string]uint64{}
	for _, l := range d.Array.LUNs {
		c := startClient(t, tool, "iqn.2026-11.org.example:checker", urls(d, l.ID))
		var naa string
		relports := map[string]bool{}
		for i := range d.Portals() {
			require.Equal(t, "tpgs=1", c.do("inq %d", i), "LUN %d path %d", l.ID, i)
			v := c.do("vpd83 %d", i)
			if naa == "" {
				naa = field(v, "naa")
				require.NotEqual(t, "none", naa)
			}
			require.Equal(t, naa, field(v, "naa"), "LUN %d: the same NAA on every path", l.ID)
			require.Equal(t, "1", field(v, "assoc4"), "relative port designator: association 01b")
			require.Equal(t, "1", field(v, "assoc5"), "target port group designator: association 01b")
			rp := field(v, "relport")
			require.False(t, relports[rp], "relative port id %s reported twice", rp)
			relports[rp] = true
			r0, r1 := c.do("rtpg %d 0", i), c.do("rtpg %d 1", i)
			require.Equal(t, "fmt=1", strings.Fields(r1)[0])
			require.Equal(t, "tt=10", strings.Fields(r1)[1])
			require.Equal(t, field(r0, "groups"), field(r1, "groups"), "both RTPG formats agree")
			states, portGroup, _ := groupsOf(t, field(r1, "groups"))
			require.Equal(t, field(v, "tpg"), portGroup[rp], "VPD type-5 group is the RTPG group listing port %s", rp)
			ao := 0
			for _, s := range states {
				if s == "AO" {
					ao++
				}
			}
			require.Equal(t, 1, ao, "exactly one AO group for LUN %d", l.ID)
		}
		require.Len(t, relports, 4)
		_, dup := naas[naa]
		require.False(t, dup, "LUN %d shares its NAA with LUN %d", l.ID, naas[naa])
		naas[naa] = l.ID
		require.Equal(t, "CHECK 5/20/00", c.do("stpg 0 2"), "STPG is not supported in implicit mode")
		writeResult(t, fmt.Sprintf("alua-check-lun%d.txt", l.ID), c)
	}

	// The move, seen by the independent client on all four nexuses of LUN 0.
	c := startClient(t, tool, "iqn.2026-11.org.example:mover", urls(d, 0))
	for i := range d.Portals() {
		require.Equal(t, "GOOD", c.do("tur %d", i))
	}
	ctl := api.NewClient(filepath.Join(d.Array.Config().Data, "aluad.sock"))
	ch, err := ctl.Move(0, "b")
	require.NoError(t, err)
	require.Equal(t, "a", ch.From)
	for i := range d.Portals() {
		require.Equal(t, "CHECK 6/2a/06", c.do("tur %d", i), "path %d: UA 2A/06 after the move", i)
		require.Equal(t, "GOOD", c.do("tur %d", i), "path %d: reported once, then cleared", i)
		states, _, status := groupsOf(t, field(c.do("rtpg %d 1", i), "groups"))
		require.Equal(t, map[string]string{"1": "ANO", "2": "AO"}, states)
		require.Equal(t, map[string]string{"1": "02", "2": "02"}, status, "status 02h: implicit change")
	}
	writeResult(t, "alua-check-move.txt", c)
}

// The explicit baseline honours STPG at once; the other nexuses get 2A/06.
// A host type that reports STANDBY gets 04/0B on the non-owner path.
func TestIndependentClientExplicitAndStandby(t *testing.T) {
	tool := needTool(t)
	const standbyHost = "iqn.2026-11.org.example:standby"
	d := startArray(t, "explicit", array.HostConfig{Name: "sb", Type: "linux-standby", Initiators: []string{standbyHost}})
	c := startClient(t, tool, "iqn.2026-11.org.example:explicit", urls(d, 0))
	require.Equal(t, "tpgs=3", c.do("inq 0"))
	for i := range d.Portals() {
		require.Equal(t, "GOOD", c.do("tur %d", i))
	}
	require.Equal(t, "GOOD", c.do("stpg 0 2"))
	require.Equal(t, "b", d.Array.LUN(0).Owner().Name)
	require.Equal(t, "GOOD", c.do("tur 0"), "the nexus that sent STPG gets no UA")
	for i := 1; i < len(d.Portals()); i++ {
		require.Equal(t, "CHECK 6/2a/06", c.do("tur %d", i))
	}
	_, _, status := groupsOf(t, field(c.do("rtpg 0 1"), "groups"))
	require.Equal(t, map[string]string{"1": "01", "2": "01"}, status, "status 01h: altered by STPG")
	writeResult(t, "alua-check-explicit.txt", c)

	s := startClient(t, tool, standbyHost, urls(d, 1)) // LUN 1: owner b, so a's ports are standby
	states, _, _ := groupsOf(t, field(s.do("rtpg 0 1"), "groups"))
	require.Equal(t, map[string]string{"1": "STANDBY", "2": "AO"}, states)
	require.Equal(t, "CHECK 2/04/0b", s.do("tur 0"), "TUR on a standby port: 04/0B")
	require.Equal(t, "GOOD", s.do("tur 2"))
	require.Equal(t, "tpgs=3", s.do("inq 0"), "INQUIRY is answered in standby")
	writeResult(t, "alua-check-standby.txt", s)
}

// untilRTPG sends "tur i" and "rtpg i 1" until the group states are want
// (or 20 s pass) and returns every answer seen, for the UA checks. Each
// round also sends a TUR down every path of checked, as a multipath path
// checker does on the paths it is not using for I/O.
func untilRTPG(t *testing.T, c *client, i int, want map[string]string, checked ...*client) []string {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, k := range checked {
			for j := range k.paths {
				k.do("tur %d", j)
			}
		}
		seen = append(seen, c.do("tur %d", i))
		r := c.do("rtpg %d 1", i)
		if strings.HasPrefix(r, "fmt=") {
			if states, _, _ := groupsOf(t, field(r, "groups")); fmt.Sprint(states) == fmt.Sprint(want) {
				return seen
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("path %d: RTPG never showed %v; answers: %v", i, want, seen)
	return nil
}

// The running daemon fails over and back by itself: a crash of node b
// (injected through the control API, as 'aluad fault crash' does) moves
// LUN 1 to a; the libiscsi client on a's path gets 2A/06 and RTPG shows a
// AO, b UNAVAILABLE. After b restarts and the client logs in on b's paths
// again (a full recovery), the stability window passes and LUN 1 fails
// back: 2A/06 again and b AO.
func TestIndependentClientSeesFailoverAndFailback(t *testing.T) {
	tool := needTool(t)
	cfg := config.Loopback(t.TempDir(), 16<<20)
	cfg.Ownership = control.Config{Tick: 50 * time.Millisecond, FailbackWindow: 500 * time.Millisecond}
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Control: filepath.Join(cfg.Data, "aluad.sock")})
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	ctl := api.NewClient(filepath.Join(cfg.Data, "aluad.sock"))
	const ini = "iqn.2026-11.org.example:failover"
	all := urls(d, 1) // LUN 1: preferred and owned by b (ports 3, 4)
	c := startClient(t, tool, ini, all)
	for i := range all {
		c.do("tur %d", i) // 29/00 power on, reset
		require.Equal(t, "GOOD", c.do("tur %d", i))
		require.True(t, strings.HasPrefix(c.do("rtpg %d 1", i), "fmt=1"))
	}
	res, err := ctl.Inject(api.Fault{Kind: api.FaultCrash, Node: "b"})
	require.NoError(t, err)
	require.Empty(t, res.Change.Lost, "mirroring on: nothing lost")
	seen := untilRTPG(t, c, 0, map[string]string{"1": "AO", "2": "UNAVAILABLE"})
	require.Contains(t, seen, "CHECK 6/2a/06", "the failover is announced on a's path")
	_, _, status := groupsOf(t, field(c.do("rtpg 0 1"), "groups"))
	require.Equal(t, "02", status["1"], "an implicit change")

	_, err = ctl.Inject(api.Fault{Kind: api.FaultRestart, Node: "b"})
	require.NoError(t, err)
	back := startClient(t, tool, ini, all[2:]) // the host logs in on b's paths again
	for i := range all[2:] {
		back.do("tur %d", i)
		require.True(t, strings.HasPrefix(back.do("rtpg %d 1", i), "fmt=1"))
	}
	// One RTPG does not show the array a path (scsi_dh_alua reads it on
	// every path at scan, multipath or not): the host's checker probing b's
	// paths does.
	seen = untilRTPG(t, c, 0, map[string]string{"1": "ANO", "2": "AO"}, back)
	require.Contains(t, seen, "CHECK 6/2a/06", "the failback is announced on a's path")
	var causes []string
	evs, _ := d.Events.Since(0)
	for _, e := range evs {
		if e.Kind == api.EventALUA && e.Change != nil && slices.Contains(e.Change.LUNs, 1) {
			causes = append(causes, e.Change.Cause)
		}
	}
	require.Equal(t, []string{"node-down", "failover", "node-up", "failback"}, causes)
	writeResult(t, "alua-check-failover.txt", c)
}
