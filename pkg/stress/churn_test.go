package stress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
)

// TestSessionChurnEventsPair: hosts reinstate sessions, cold-reset, log out, drop
// connections while ports go down and up; then the daemon stops. Nothing
// hangs, and per nexus the events alternate login/logout ending in a logout.
func TestSessionChurnEventsPair(t *testing.T) {
	cfg := config.Loopback(t.TempDir(), 64<<20)
	require.NoError(t, cfg.Validate())
	// A ring that holds every event of the run: the check reads them all.
	d, err := daemon.Start(cfg, daemon.Options{StatsInterval: -1, EventCapacity: 1 << 20})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			name := fmt.Sprintf("iqn.2026-11.org.example:w%d", w%3)
			for ctx.Err() == nil {
				s, err := dialIn(d, rng.IntN(len(d.Portals())), name, byte(1+rng.IntN(2)))
				if err != nil {
					continue
				}
				c2, c := context.WithTimeout(ctx, 300*time.Millisecond)
				switch rng.IntN(4) {
				case 0:
					s.TaskMgmt(c2, 7, 0, 0) // target cold reset
				case 1:
					s.Logout(c2)
				case 2:
					s.TestUnitReady(c2, 0)
				}
				c()
				s.Close()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			p := d.Portals()[rand.IntN(len(d.Portals()))]
			d.Target.SetPortUp(p.RelativeID, false)
			time.Sleep(time.Millisecond)
			d.Target.SetPortUp(p.RelativeID, true)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// Stop while it all runs.
	time.Sleep(4 * time.Second)
	stopped := make(chan struct{})
	go func() { d.Stop(time.Second); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop hangs")
	}
	cancel()
	wg.Wait()
	evs, lost := d.Events.Since(0)
	require.Zero(t, lost)
	last := map[string]string{}
	n := 0
	for _, e := range evs {
		if e.Kind != api.EventLogin && e.Kind != api.EventLogout {
			continue
		}
		n++
		k := fmt.Sprintf("%s/%s/%d", e.Initiator, e.ISID, e.TargetPort)
		prev := last[k]
		if (e.Kind == api.EventLogin && prev == api.EventLogin) || (e.Kind == api.EventLogout && prev != api.EventLogin) {
			for _, x := range evs {
				if x.Seq+12 > e.Seq && x.Seq < e.Seq+6 && (x.Kind == api.EventLogin || x.Kind == api.EventLogout) && fmt.Sprintf("%s/%s/%d", x.Initiator, x.ISID, x.TargetPort) == k {
					t.Logf("seq %d %s %s reason=%q", x.Seq, k, x.Kind, x.Reason)
				}
			}
		}
		if e.Kind == api.EventLogin {
			require.NotEqual(t, api.EventLogin, prev, "%s: two logins in a row (seq %d)", k, e.Seq)
		} else {
			require.Equal(t, api.EventLogin, prev, "%s: logout without a login (seq %d)", k, e.Seq)
		}
		last[k] = e.Kind
	}
	for k, v := range last {
		require.Equal(t, api.EventLogout, v, "%s still logged in after Stop", k)
	}
	require.Zero(t, d.Target.SessionCount())
	t.Logf("%d login/logout events over %d nexuses", n, len(last))
}
