package daemon

import (
	"context"
	imagepng "image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/reports"
)

// chromium finds a headless-capable Chromium (ALUAD_CHROMIUM overrides).
func chromium() string {
	if p := os.Getenv("ALUAD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// headless runs Chromium on url at 1400x900 with virtual time (which
// waits for the page's fetches), with the last argument what it does:
// --dump-dom (the DOM on stdout) or --screenshot=FILE.
func headless(t *testing.T, bin, url, what string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-extensions", "--disable-sync", "--no-first-run",
		"--no-default-browser-check", "--mute-audio", "--user-data-dir="+t.TempDir(), "--hide-scrollbars",
		"--window-size=1400,900", "--virtual-time-budget=5000", what, url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium: %s", stderr.String())
	return string(out)
}

// dumpDOM is the page's DOM once its scripts have run.
func dumpDOM(t *testing.T, bin, url string) string { return headless(t, bin, url, "--dump-dom") }

// screenshot saves the first screen (1400x900) as a PNG and returns its
// path; ALUAD_DASHBOARD_PNG copies it there too (the image in docs).
func screenshot(t *testing.T, bin, url string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dashboard.png")
	headless(t, bin, url, "--screenshot="+p)
	if dst := os.Getenv("ALUAD_DASHBOARD_PNG"); dst != "" {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, b, 0o644))
	}
	return p
}

// cardAttr is a dashboard card's data attribute (markLayout's).
func cardAttr(dom, id, attr string) string {
	m := regexp.MustCompile(`<section id="` + id + `"[^>]*\sdata-` + attr + `="([a-z]+)"`).FindStringSubmatch(dom)
	if m == nil {
		return ""
	}
	return m[1]
}

// problem returns the Recovery Guru card of a condition for a host, or "".
func problem(dom string, cond ownership.Condition, host string) string {
	re := regexp.MustCompile(`(?s)<details class="problem [a-z]+" data-condition="` + regexp.QuoteMeta(string(cond)) +
		`" data-host="` + regexp.QuoteMeta(host) + `".*?</ol></details>`)
	return re.FindString(dom)
}

// The dashboard in a real browser: a partial fault (h1 loses its paths
// to node a) shows as Host Redundancy Lost with h1, node a and ports
// a0, a1 in the Recovery Guru view, beside a host with sessions but no
// RTPG shown as Multipath Not Discovering Paths; after the repair the
// page no longer shows Host Redundancy Lost. The page reads the API with
// the token from its URL fragment.
func TestDashboardInChromium(t *testing.T) {
	bin := chromium()
	if bin == "" {
		if os.Getenv("ALUAD_REQUIRE_EXTERNAL") != "" {
			t.Fatal("ALUAD_REQUIRE_EXTERNAL is set but no chromium is installed")
		}
		t.Skip("no chromium (apt-get install chromium; scripts/test.sh installs it and requires this test)")
	}
	d, c, ticks := apiDaemonOn(t, 50*time.Millisecond, clock.NewFake(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)))
	url := "http://" + d.APIAddr() + "/#token=" + apiToken
	const h2 = "iqn.2026-11.org.example:h2"
	loginAll(t, d, hostIQN, 1)
	for i, port := range []int{0, 2} { // h2: logged in, never an RTPG
		s := dial(t, d, port, byte(5+i), h2)
		defer s.Close()
	}
	tickReports(t, c, ticks, "multipath not discovering", func(rs []reports.Report) bool {
		return find(rs, ownership.MultipathNotDiscovering, h2) != nil
	})
	for _, p := range []string{"a0", "a1"} {
		_, err := c.Inject(api.Fault{Kind: api.FaultPathDown, Port: p, Initiator: hostIQN})
		require.NoError(t, err)
	}
	tickReports(t, c, ticks, "host redundancy lost", func(rs []reports.Report) bool {
		return find(rs, ownership.HostRedundancyLost, "h1") != nil
	})

	dom := dumpDOM(t, bin, url)
	require.Contains(t, dom, `data-state="ready"`, "the page read the API")
	hrl := problem(dom, ownership.HostRedundancyLost, "h1")
	require.NotEmpty(t, hrl, "Host Redundancy Lost is shown:\n%s", dom)
	require.Contains(t, hrl, `data-node="a" data-ports="a0,a1"`)
	require.Contains(t, hrl, "Host Redundancy Lost: host h1, node a")
	require.Contains(t, hrl, "<dt>Ports</dt><dd>a0, a1</dd>")
	require.Contains(t, hrl, "Recovery procedure")
	require.Contains(t, hrl, "critical")
	mnd := problem(dom, ownership.MultipathNotDiscovering, h2)
	require.NotEmpty(t, mnd, "Multipath Not Discovering Paths is shown")
	require.Contains(t, mnd, "Multipath Not Discovering Paths: host "+h2)
	require.Contains(t, dom, `class="c-lost">lost</td>`, "the connectivity matrix shows h1's lost node")
	require.Contains(t, dom, "unknown initiator", "h2 is not declared")
	require.Contains(t, dom, "<svg", "the latency chart is drawn")

	// The layout at 1400 px: nothing cut off; each report one line
	// (closed) that opens; the ownership map and the paths, failed ones
	// too, on the first screen; times in ISO 8601 UTC.
	for _, card := range []string{"guru", "ownership", "connectivity", "paths", "latency"} {
		require.Equal(t, "false", cardAttr(dom, card, "overflow"), "card %s fits 1400 px", card)
	}
	for _, card := range []string{"guru", "ownership", "connectivity", "paths"} {
		require.Equal(t, "false", cardAttr(dom, card, "fold"), "card %s starts on the first screen", card)
	}
	require.NotRegexp(t, `<details class="problem[^>]* open`, dom, "reports closed: one line each")
	require.Regexp(t, `<summary>.*Host Redundancy Lost: host h1, node a.*since 20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ`, hrl)
	require.Regexp(t, `<tr data-port="a0" data-state="failed" class="failed"><td>h1</td>`, dom, "h1's failed path is listed")
	png := screenshot(t, bin, url)
	f, err := os.Open(png)
	require.NoError(t, err)
	cfg, err := imagepng.DecodeConfig(f)
	f.Close()
	require.NoError(t, err)
	require.Equal(t, [2]int{1400, 900}, [2]int{cfg.Width, cfg.Height})

	// Repair: the paths come back and h1 logs in and reads RTPG there.
	_, err = c.Inject(api.Fault{Kind: api.FaultClear})
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		s := dial(t, d, i, byte(10+i), hostIQN)
		defer s.Close()
		rtpgOn(t, s)
	}
	tickReports(t, c, ticks, "host redundancy restored", func(rs []reports.Report) bool {
		return find(rs, ownership.HostRedundancyLost, "h1") == nil
	})
	dom = dumpDOM(t, bin, url)
	require.Contains(t, dom, `data-state="ready"`)
	require.Empty(t, problem(dom, ownership.HostRedundancyLost, "h1"), "cleared after the repair")
	require.NotEmpty(t, problem(dom, ownership.MultipathNotDiscovering, h2), "h2 is still not discovering")
}
