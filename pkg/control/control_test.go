package control

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/drive/drivetest"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

const iqn = "iqn.2026-11.org.example:h1"

// feed records what the control path publishes.
type feed struct {
	mu  sync.Mutex
	evs []api.Event
}

func (f *feed) add(e api.Event) {
	f.mu.Lock()
	f.evs = append(f.evs, e)
	f.mu.Unlock()
}

func (f *feed) kinds() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.evs {
		out = append(out, e.Kind)
	}
	return out
}

// testPath is a 2-node array on in-memory media with its device server
// and a control path whose core ticks once an hour (only posts and
// queries wake it).
func testPath(t *testing.T, core bool) (*Path, *array.Array, *scsi.Server, *feed) {
	t.Helper()
	return testPathType(t, core, "linux")
}

// testPathType is testPath with h1 declared of host type typ.
func testPathType(t *testing.T, core bool, typ string) (*Path, *array.Array, *scsi.Server, *feed) {
	t.Helper()
	arr, srv := drivetest.Array(t, "h1", typ, iqn)
	f := &feed{}
	p := New(Options{Array: arr, SCSI: srv, Publish: f.add})
	if core {
		require.NoError(t, p.Start(Config{Tick: time.Hour}))
		t.Cleanup(p.Stop)
	}
	return p, arr, srv, f
}

func nexus(port uint16, isid int) scsi.Nexus {
	return scsi.Nexus{InitiatorName: iqn, InitiatorPort: fmt.Sprintf("%s,i,0x%012x", iqn, isid), TargetPort: port}
}

// Observations reach the core as typed inputs and the feed as events:
// a login, an RTPG, an orderly logout; an RTPG the front end could not
// pin to an initiator reaches neither.
func TestObservationsReachCoreAndFeed(t *testing.T) {
	p, _, _, f := testPath(t, true)
	n := nexus(1, 0x23d000001)
	p.Fabric(fabric.Event{Kind: api.EventLogin, Nexus: n})
	p.RTPG(n, 0, true)
	p.RTPG(scsi.Nexus{TargetPort: 1}, 0, true)
	var paths []ownership.PathState
	require.NoError(t, p.Do(func(c *ownership.Core) { paths = c.PathStates() }))
	require.Len(t, paths, 1)
	require.Equal(t, ownership.Nexus{Host: "h1", Initiator: iqn, ISID: "00023d000001", Port: 1, Node: "a"}, paths[0].Nexus)
	require.False(t, paths[0].Discovered, "one RTPG does not discover a path (a kernel without multipath reads it at scan)")
	// A multipath checker's probes, one a tick for 25 ticks, do.
	for range 25 {
		p.Post(ownership.PathLatency{Nexus: p.Nexus(n), Ops: 1, Exchange: 100}, ownership.Tick{})
	}
	require.NoError(t, p.Do(func(c *ownership.Core) { paths = c.PathStates() }))
	require.True(t, paths[0].Discovered, "the checker's probes discovered the path")
	p.Fabric(fabric.Event{Kind: api.EventLogout, Nexus: n, Reason: fabric.ReasonLogout})
	require.NoError(t, p.Do(func(c *ownership.Core) { paths = c.PathStates() }))
	require.Empty(t, paths, "logged out")
	// (25 ticks with a path to a only: Initiator Connected To One Node Only.)
	require.Equal(t, []string{"login", "rtpg", "report", "logout"}, f.kinds())
	f.mu.Lock()
	require.Equal(t, "h1", f.evs[1].Host)
	require.Equal(t, uint64(0), *f.evs[1].LUN)
	require.True(t, f.evs[1].Extended)
	require.Equal(t, string(ownership.ConnectedToOneNodeOnly), f.evs[2].Report.Condition)
	require.Equal(t, fabric.ReasonLogout, f.evs[3].Reason)
	f.mu.Unlock()
}

// A change is announced to the hosts before anything else hears of it
// (2A/06 after a move, 2A/07 after a failed implicit one, nothing after a
// failed STPG), and a move the core did not make is told to it.
func TestChangesAnnouncedAndToldToTheCore(t *testing.T) {
	p, arr, srv, f := testPath(t, true)
	n := nexus(1, 1)
	srv.NexusUp(n)
	tur := func() scsi.Response { return srv.Execute(&scsi.Command{Nexus: n, CDB: []byte{0, 0, 0, 0, 0, 0}}) }
	for tur().Status != scsi.StatusGood { // the power-on UA
	}
	_, err := arr.Move([]uint64{0}, "b", alua.CauseManual)
	require.NoError(t, err)
	r := tur()
	require.Equal(t, scsi.StatusCheckCondition, r.Status)
	ps, err := scsi.ParseSense(r.Sense)
	require.NoError(t, err)
	require.Equal(t, [2]byte{0x2a, 0x06}, [2]byte{ps.ASC, ps.ASCQ})
	var owner string
	require.NoError(t, p.Do(func(c *ownership.Core) { owner = c.Owner(0) }))
	require.Equal(t, "b", owner, "the operator's move was told to the core")
	require.Contains(t, f.kinds(), "alua")

	tests := []struct {
		name   string
		failed bool
		stpg   bool
		want   [2]byte // zero: no unit attention
	}{
		{"failed implicit transition", true, false, [2]byte{0x2a, 0x07}},
		{"failed STPG", true, true, [2]byte{}},
	}
	for _, tc := range tests {
		cause := alua.CauseBalance
		if tc.stpg {
			cause = alua.CauseSTPG
		}
		p.changed(array.Change{LUNs: []uint64{0}, From: "b", To: "a", Cause: cause, Failed: tc.failed})
		r := tur()
		if tc.want == [2]byte{} {
			require.Equal(t, scsi.StatusGood, r.Status, tc.name)
			continue
		}
		ps, err := scsi.ParseSense(r.Sense)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.want, [2]byte{ps.ASC, ps.ASCQ}, tc.name)
	}
}

// A query of the core sees every event posted before it: the API never
// answers from before a login the host already completed.
func TestQuerySeesPostedEvents(t *testing.T) {
	p, arr, _, _ := testPath(t, true)
	port := arr.Ports[0]
	for i := 0; i < 200; i++ {
		isid := fmt.Sprintf("80000000%04x", i)
		p.Post(ownership.Login{Nexus: ownership.Nexus{Host: "h1", Initiator: iqn, ISID: isid,
			Port: port.RelativeID, Node: port.Node.Name}})
		var seen bool
		require.NoError(t, p.Do(func(c *ownership.Core) {
			for _, ps := range c.PathStates() {
				seen = seen || ps.Nexus.ISID == isid
			}
		}))
		require.True(t, seen, "login %d was not stepped before the query", i)
	}
}

// With the core off the path still observes and publishes, and every
// call on the core says it is off.
func TestWithoutTheCore(t *testing.T) {
	p, _, _, f := testPath(t, false)
	require.False(t, p.Running())
	p.Fabric(fabric.Event{Kind: api.EventLogin, Nexus: nexus(1, 1)})
	require.Equal(t, []string{"login"}, f.kinds())
	require.ErrorIs(t, p.Do(func(*ownership.Core) {}), ErrNoCore)
	_, err := p.Reports()
	require.ErrorIs(t, err, ErrNoCore)
	_, _, err = p.Rebalance()
	require.ErrorIs(t, err, ErrNoCore)
	require.ErrorIs(t, p.ClearReport(ownership.ClearReport{}), ErrNoCore)
	p.Stop() // nothing to stop
}

// The ownership section maps onto the core's ticks: per-condition alert
// delays by name (0s is at once), and names outside the catalog refused.
func TestConfigCore(t *testing.T) {
	oc, tick := Config{Tick: 500 * time.Millisecond, AlertDelay: 2 * time.Second,
		AlertDelays: map[ownership.Condition]time.Duration{ownership.NodeOffline: 0, ownership.PathDegraded: 10 * time.Second}}.Core(false)
	require.Equal(t, 500*time.Millisecond, tick)
	require.Equal(t, 4, oc.Debounce)
	require.Equal(t, map[ownership.Condition]int{ownership.NodeOffline: 0, ownership.PathDegraded: 20}, oc.Debounces)
	require.NoError(t, oc.Validate())
	require.False(t, oc.Passive)
	oc, _ = Config{}.Core(true)
	require.True(t, oc.Passive)
	require.Nil(t, oc.Debounces)

	for _, tt := range []struct {
		name string
		c    Config
		want string
	}{
		{"unknown condition", Config{AlertDelays: map[ownership.Condition]time.Duration{"node-on-fire": time.Second}}, "not a report condition"},
		{"negative delay", Config{AlertDelays: map[ownership.Condition]time.Duration{ownership.NodeOffline: -time.Second}}, "must not be negative"},
		{"negative tick", Config{Tick: -time.Second}, "must not be negative"},
		{"path factor", Config{PathDegradedFactor: 0.5}, "path_degraded_factor"},
	} {
		t.Run(tt.name, func(t *testing.T) { require.ErrorContains(t, tt.c.Validate(), tt.want) })
	}
}
