package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/initiator"
)

// mediaIO reads and writes a block of LUN 0 on s, as a host's I/O does:
// a unit attention is read and the command sent again. It returns the
// unit attentions seen.
func mediaIO(t *testing.T, ctx context.Context, s *initiator.Session) (uas []string) {
	t.Helper()
	for try := 0; ; try++ {
		_, err := s.Read16(ctx, 0, 8, 1, 512)
		if err == nil {
			err = s.Write16(ctx, 0, 16, make([]byte, 512), 512, false)
		}
		var ce *initiator.CheckError
		if err != nil && errors.As(err, &ce) && try < 4 {
			if k, asc, ascq := ce.KeyASC(); k == 6 {
				uas = append(uas, string([]byte{asc, ascq}))
				continue
			}
		}
		require.NoError(t, err)
		return uas
	}
}

// hti lists the hosts Host Type Incorrect is raised for.
func hti(d *Daemon) []string {
	var out []string
	rs, _ := d.ctl.Reports()
	for _, r := range rs {
		if r.Condition == ownership.HostTypeIncorrect {
			out = append(out, r.Host)
		}
	}
	return out
}

// Host Type Incorrect's own remedy, on a running array through the real
// target: a host declared linux-dmmp that sends media I/O and never reads
// RTPG (libiscsi's tools, a stack that ignores ALUA) is reported; its
// type changed live to legacy ends the report, with the same sessions
// carrying I/O throughout (told 2A/06, as a real array tells a host whose
// access states changed). An undeclared initiator that does the same is
// reported under its own name; declaring a host for it, live, moves its
// sessions to that host with nothing dropped, and the change survives a
// restart.
func TestHostTypeChangedLive(t *testing.T) {
	tick := 50 * time.Millisecond
	cfg := testConfig(t.TempDir())
	cfg.Hosts = []array.HostConfig{{Name: "h1", Type: "linux-dmmp", Initiators: []string{hostIQN}}}
	cfg.Ownership.Tick, cfg.Ownership.DiscoveryWindow, cfg.Ownership.AlertDelay = tick, 5*tick, 2*tick
	require.NoError(t, cfg.Validate())
	clk := clock.NewFake(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC))
	stateDir := t.TempDir()
	d, err := Start(cfg, Options{Logger: quiet(), API: "127.0.0.1:0", APIToken: apiToken, StatsInterval: -1, Clock: clk,
		StateDir: stateDir})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	c := api.NewHTTPClient("http://"+d.APIAddr(), apiToken)
	ticks := coreTicks(t, d, clk, tick)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const lib = "iqn.2026-11.org.example:libiscsi"
	// Each logged in twice to node a (libiscsi's tools log in to the
	// portal they are given; a host on two nodes without multipath is
	// Multipath Not Discovering Paths instead).
	ha, hb := dial(t, d, 0, 1, hostIQN), dial(t, d, 1, 2, hostIQN)
	la, lb := dial(t, d, 0, 3, lib), dial(t, d, 1, 4, lib) // undeclared
	sessions := []*initiator.Session{ha, hb, la, lb}
	for _, s := range sessions {
		defer s.Close()
		_, err := s.ClearUA(ctx, 0, 4)
		require.NoError(t, err)
	}
	run := func(n int) (uas []string) {
		for range n {
			uas = append(uas, mediaIO(t, ctx, ha)...)
			uas = append(uas, mediaIO(t, ctx, la)...)
			ticks(1)
		}
		return uas
	}
	var rep api.HostsReply
	run(12) // past the discovery window (5 ticks) and the alert delay
	require.ElementsMatch(t, []string{"h1", lib}, hti(d), "both never read RTPG")

	rep, err = c.ChangeHost("h1", api.HostChange{Type: "legacy"})
	require.NoError(t, err)
	require.Equal(t, []string{strings.ToLower(hostIQN)}, rep.Retyped)
	uas := run(4)
	require.Contains(t, uas, "\x2a\x06", "h1's nexuses told ASYMMETRIC ACCESS STATE CHANGED")
	require.Equal(t, []string{lib}, hti(d), "h1's report ended with its new type")

	_, err = c.AddHost(api.HostSpec{Name: "lib1", Type: "legacy", Initiators: []string{lib}})
	require.NoError(t, err)
	run(4)
	require.Empty(t, hti(d), "declared for what it is: nothing raised")
	byName := map[string]api.HostInfo{}
	for _, h := range d.Hosts() {
		byName[h.Name] = h
	}
	require.True(t, byName["lib1"].Declared)
	require.Equal(t, 2, byName["lib1"].Sessions, "its sessions are lib1's now")
	require.NotContains(t, byName, lib, "no longer an unknown initiator")
	ev, _ := d.Events.Since(0)
	for _, e := range ev {
		require.NotEqual(t, api.EventLogout, e.Kind, "no session dropped: %+v", e)
	}
	for _, s := range sessions {
		_, err := s.ClearUA(ctx, 0, 4)
		require.NoError(t, err, "every session still answers")
	}

	// Kept in the state file: a restart on the same directories has them.
	require.NoError(t, d.Stop(5*time.Second))
	d2, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1, StateDir: stateDir})
	require.NoError(t, err)
	defer d2.Stop(5 * time.Second)
	require.ElementsMatch(t, []api.HostSpec{
		{Name: "h1", Type: "legacy", Initiators: []string{hostIQN}},
		{Name: "lib1", Type: "legacy", Initiators: []string{lib}},
	}, d2.HostSpecs())
}

// Mistakes get a message and change nothing.
func TestHostChangesRefused(t *testing.T) {
	d, c := apiDaemon(t, 20*time.Millisecond)
	_, err := c.Map(array.MappingConfig{LUN: 0, Host: "h1"})
	require.NoError(t, err)
	before := d.HostSpecs()
	for _, tc := range []struct {
		name string
		do   func() error
		want string
	}{
		{"add twice", func() error {
			_, err := c.AddHost(api.HostSpec{Name: "h1", Initiators: []string{"iqn.2026-11.org.example:x"}})
			return err
		}, "already exists"},
		{"no initiator", func() error { _, err := c.AddHost(api.HostSpec{Name: "h2"}); return err }, "at least one initiator"},
		{"unknown type", func() error {
			_, err := c.AddHost(api.HostSpec{Name: "h2", Type: "solaris", Initiators: []string{"iqn.2026-11.org.example:x"}})
			return err
		}, `unknown type "solaris"`},
		{"initiator taken", func() error {
			_, err := c.AddHost(api.HostSpec{Name: "h2", Initiators: []string{strings.ToUpper(hostIQN)}})
			return err
		}, "is declared by hosts"},
		{"no such host", func() error { _, err := c.ChangeHost("nobody", api.HostChange{Type: "linux"}); return err }, `no host "nobody"`},
		{"nothing to change", func() error { _, err := c.ChangeHost("h1", api.HostChange{}); return err }, "nothing to change"},
		{"last initiator", func() error {
			_, err := c.ChangeHost("h1", api.HostChange{RemoveInitiators: []string{hostIQN}})
			return err
		}, "no initiator left"},
		{"mapped host", func() error { _, err := c.RemoveHost("h1", false); return err }, "has mappings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorContains(t, tc.do(), tc.want)
			require.Equal(t, before, d.HostSpecs(), "nothing changed")
		})
	}
}

// config dump writes what serve --config reads back: the same array,
// with the hosts changed live.
func TestRunningConfigRoundTrip(t *testing.T) {
	d, c := apiDaemon(t, 20*time.Millisecond)
	_, err := c.AddHost(api.HostSpec{Name: "db2", Type: "windows", Initiators: []string{"iqn.1991-05.com.microsoft:db2"}, Group: "g"})
	require.NoError(t, err)
	b, err := c.RunningConfig()
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "dump.yaml")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	got, err := config.Load(p)
	require.NoError(t, err, "%s", b)
	want := d.cfg
	want.Config = d.Array.Config()
	require.Equal(t, want.Hosts, got.Hosts)
	require.ElementsMatch(t, want.Mappings, got.Mappings)
	require.Equal(t, want.ArrayID, got.ArrayID, "the same WWIDs")
	require.Equal(t, want.Nodes, got.Nodes)
	require.Equal(t, want.LUNs, got.LUNs)
	require.Equal(t, want.Ownership, got.Ownership)
	require.Equal(t, want.Cache, got.Cache)
}
