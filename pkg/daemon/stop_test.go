package daemon

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	tcmu "github.com/aluad/aluad/tcmu-handler"
)

// A power loss or panic on the TCMU fabric is refused before the node
// fails (LIO cannot make a port silent or reset it); a crash is not.
func TestTCMURefusesSilentNodeFaults(t *testing.T) {
	l := startTCMU(t)
	d := l.d
	for _, k := range []string{api.FaultPowerLoss, api.FaultPanic} {
		_, err := d.Inject(api.Fault{Kind: k, Node: "a"})
		require.ErrorIs(t, err, tcmu.ErrNoWireModes, k)
		require.True(t, d.Array.Node("a").Up(), "%s refused before the node fails", k)
	}
	_, err := d.Inject(api.Fault{Kind: api.FaultCrash, Node: "a"})
	require.NoError(t, err)
	require.False(t, d.Array.Node("a").Up())
}

// An operator's move of a LUN or to a node the array lacks is 404 and
// says only what is missing ("no LUN 99").
func TestMoveNotFoundText(t *testing.T) {
	_, c := apiDaemon(t, time.Hour)
	_, err := c.Move(99, "a")
	require.EqualError(t, err, "no LUN 99")
	_, err = c.Move(0, "q")
	require.EqualError(t, err, `no node "q"`)
}

// Once Stop has begun (Done is closed), the ownership core takes no more
// work: a rebalance asked while the API drains is refused ("aluad is
// stopping"). An adversarial review found the core running on until the
// API had drained.
func TestCoreStopsWhenStopBegins(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Hosts = []array.HostConfig{{Name: "h1", Type: "linux-dmmp", Initiators: []string{hostIQN}}}
	cfg.Ownership.Tick = time.Hour
	require.NoError(t, cfg.Validate())
	block := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	d, err := Start(cfg, Options{Logger: quiet(), API: "127.0.0.1:0", StatsInterval: -1,
		OnEvent: func(e api.Event) {
			// Hold the audited call in flight, so Stop waits on it with
			// Done closed.
			if e.Kind == api.EventAudit {
				once.Do(func() { close(entered) })
				<-block
			}
		}})
	require.NoError(t, err)
	go func() {
		req, _ := http.NewRequest("PUT", "http://"+d.APIAddr()+"/v1/nodes/a/capacity", strings.NewReader(`{"capacity":500}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	stopped := make(chan struct{})
	go func() { d.Stop(5 * time.Second); close(stopped) }()
	<-d.Done()
	_, rerr := d.Rebalance()
	close(block)
	<-stopped
	require.Error(t, rerr, "a rebalance after Stop began")
}
