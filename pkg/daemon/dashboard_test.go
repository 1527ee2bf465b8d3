package daemon

import (
	"context"
	"os"
	"os/exec"
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

// dumpDOM loads url in headless Chromium, lets its scripts run (virtual
// time, which waits for the page's fetches), and returns the DOM.
func dumpDOM(t *testing.T, bin, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--disable-background-networking", "--disable-extensions", "--disable-sync", "--no-first-run",
		"--no-default-browser-check", "--mute-audio", "--user-data-dir="+t.TempDir(),
		"--virtual-time-budget=5000", "--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium: %s", stderr.String())
	return string(out)
}

// problem returns the Recovery Guru card of a condition for a host, or "".
func problem(dom string, cond ownership.Condition, host string) string {
	re := regexp.MustCompile(`(?s)<div class="problem [a-z]+" data-condition="` + regexp.QuoteMeta(string(cond)) +
		`" data-host="` + regexp.QuoteMeta(host) + `".*?</ol></div>`)
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

	// Repair: the paths come back and h1 logs in and reads RTPG there.
	_, err := c.Inject(api.Fault{Kind: api.FaultClear})
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
