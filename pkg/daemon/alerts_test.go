package daemon

import (
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
)

// The example alert rules (docs/alerts) name only metrics and labels the
// running array exports, and Prometheus's own promtool accepts them and
// their unit test (the alerts fire with the labels a route needs).
func TestAlertRules(t *testing.T) {
	const rules = "../../docs/alerts/aluad.rules.yml"
	raw, err := os.ReadFile(rules)
	require.NoError(t, err)
	d, c := apiDaemon(t, 50*time.Millisecond)
	ss := loginAll(t, d, hostIQN, 1)
	require.NotEmpty(t, ss)
	// A node down: a report raised, and the node's paths failed.
	_, err = c.Inject(api.Fault{Kind: "crash", Node: "b"})
	require.NoError(t, err)
	var fams map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		text, err := c.Metrics()
		require.NoError(t, err)
		fams = parseMetrics(t, text)
		return fams["aluad_report_active"] != nil
	}, 10*time.Second, 20*time.Millisecond, "a report in /metrics")
	names := regexp.MustCompile(`aluad_[a-z_]+`).FindAllString(string(raw), -1)
	require.NotEmpty(t, names)
	for _, n := range names {
		require.Contains(t, fams, n, "the rules use %s", n)
	}
	for _, l := range regexp.MustCompile(`\$labels\.([a-z_]+)`).FindAllStringSubmatch(string(raw), -1) {
		found := false
		for _, f := range fams {
			for _, m := range f.Metric {
				for _, lp := range m.Label {
					found = found || lp.GetName() == l[1]
				}
			}
		}
		require.True(t, found, "label %s is exported", l[1])
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("ALUAD_REQUIRE_EXTERNAL") != "" {
			t.Fatal("ALUAD_REQUIRE_EXTERNAL is set but promtool (Debian prometheus) is not installed")
		}
		t.Log("promtool not installed: the rules were not checked by Prometheus (scripts/deps.sh installs it)")
		return
	}
	out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(promtool, "test", "rules", "aluad.rules.test.yml")
	cmd.Dir = "../../docs/alerts"
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}
