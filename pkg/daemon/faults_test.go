package daemon

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/initiator"
)

func TestFaultInjection(t *testing.T) {
	cfg := config.Loopback(t.TempDir(), 1<<20)
	ctl := filepath.Join(cfg.Data, "aluad.sock")
	// The core ticks on a fake clock, moved by hand when the test waits
	// for it (the failover below).
	clk := clock.NewFake(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
	d, err := Start(cfg, Options{Logger: quiet(), Control: ctl, Clock: clk})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	c := api.NewClient(ctl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	portals := d.Portals()
	dial := func(i int, ini string) error {
		s, err := initiator.Dial(ctx, initiator.Config{Addr: portals[i].Addr, Target: cfg.Target, InitiatorName: ini,
			DialTimeout: time.Second})
		if err == nil {
			s.Close()
		}
		return err
	}
	const x, y = "iqn.2026-11.org.example:x", "iqn.2026-11.org.example:y"

	bad := []struct {
		f    api.Fault
		want string
	}{
		{api.Fault{Kind: "melt"}, "unknown fault"},
		{api.Fault{Kind: api.FaultCrash, Node: "z"}, `no node "z"`},
		{api.Fault{Kind: api.FaultRestart, Node: "a"}, "not down"},
		{api.Fault{Kind: api.FaultPortDown}, "needs a port"},
		{api.Fault{Kind: api.FaultPortDown, Port: "q9"}, `no port "q9"`},
		{api.Fault{Kind: api.FaultPathDown, Port: "a0"}, "needs an initiator"},
		{api.Fault{Kind: api.FaultDelay, Port: "a0", Delay: time.Hour}, "delay must be"},
		{api.Fault{Kind: api.FaultPowerLoss, Node: "z"}, `no node "z"`},
		{api.Fault{Kind: api.FaultPanic}, `no node ""`},
		{api.Fault{Kind: api.FaultCablePull}, "needs a port"},
		{api.Fault{Kind: api.FaultCablePlug, Port: "c7"}, `no port "c7"`},
	}
	for _, b := range bad {
		_, err := c.Inject(b.f)
		require.ErrorContains(t, err, b.want, "%+v", b.f)
	}

	// A port down refuses logins; up again, it takes them.
	_, err = c.Inject(api.Fault{Kind: api.FaultPortDown, Port: "a0"})
	require.NoError(t, err)
	require.Error(t, dial(0, x))
	require.NoError(t, dial(1, x), "the node's other port is up")
	_, err = c.Inject(api.Fault{Kind: api.FaultPortUp, Port: "1"})
	require.NoError(t, err)
	require.NoError(t, dial(0, x))

	// A path down is one initiator's: x is refused on b0, y is not.
	_, err = c.Inject(api.Fault{Kind: api.FaultPathDown, Port: "b0", Initiator: x})
	require.NoError(t, err)
	require.Error(t, dial(2, x))
	require.NoError(t, dial(2, y))
	_, err = c.Inject(api.Fault{Kind: api.FaultClear})
	require.NoError(t, err)
	require.NoError(t, dial(2, x))

	// A live session on a port that goes down is dropped.
	s, err := initiator.Dial(ctx, initiator.Config{Addr: portals[3].Addr, Target: cfg.Target, InitiatorName: y})
	require.NoError(t, err)
	defer s.Close()
	_, err = c.Inject(api.Fault{Kind: api.FaultPortDown, Port: "b1"})
	require.NoError(t, err)
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the session on the downed port was not dropped")
	}

	// A delay on a path is accepted and removed; commands still complete.
	_, err = c.Inject(api.Fault{Kind: api.FaultDelay, Port: "a1", Delay: 5 * time.Millisecond})
	require.NoError(t, err)
	s2, err := initiator.Dial(ctx, initiator.Config{Addr: portals[1].Addr, Target: cfg.Target, InitiatorName: x})
	require.NoError(t, err)
	defer s2.Close()
	_, err = s2.ClearUA(ctx, 0, 4)
	require.NoError(t, err)

	// A crash takes the node's ports and LUNs; the core fails its LUNs over.
	res, err := c.Inject(api.Fault{Kind: api.FaultCrash, Node: "b"})
	require.NoError(t, err)
	require.Equal(t, "node-down", res.Change.Cause)
	require.Error(t, dial(2, y), "a crashed node answers no login")
	ticks := coreTicks(t, d, clk, time.Second)
	for i := 0; d.Array.LUN(1).Owner().Name != "a" && i < 10; i++ {
		ticks(1)
	}
	// The core decided on a tick; its batch runs on the executor's
	// goroutine, which the fake clock does not wait for.
	require.Eventually(t, func() bool { return d.Array.LUN(1).Owner().Name == "a" }, 10*time.Second, time.Millisecond,
		"failed over by the ownership core")
	_, err = c.Inject(api.Fault{Kind: api.FaultCrash, Node: "b"})
	require.ErrorContains(t, err, "already down")
}
