package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/initiator"
)

// A live host and a live mapping to it, then the config file's hosts
// edited and a restart: hosts and mappings both come from the config
// file (the live ones are dropped, together), and the state file is not
// rejected over them: the LUN owners survive.
func TestHostsConfigEditKeepsTheState(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Hosts = []array.HostConfig{{Name: "h1", Type: "linux-dmmp", Initiators: []string{hostIQN}}}
	require.NoError(t, cfg.Validate())
	stateDir := t.TempDir()
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1, StateDir: stateDir})
	require.NoError(t, err)
	_, err = d.AddHost(api.HostSpec{Name: "db2", Type: "linux", Initiators: []string{"iqn.2026-11.org.example:db2"}}, "test")
	require.NoError(t, err)
	_, err = d.Array.SetMappings([]array.MappingConfig{{LUN: 1, Host: "db2"}})
	require.NoError(t, err)
	l0 := d.Array.LUN(0)
	other := "b"
	if l0.Owner().Name == "b" {
		other = "a"
	}
	_, err = d.Array.Move([]uint64{0}, other, alua.CauseManual)
	require.NoError(t, err)
	d.stateDirty()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, d.Stop(5*time.Second))

	cfg2 := cfg
	cfg2.Hosts = []array.HostConfig{{Name: "h1", Type: "linux", Initiators: []string{hostIQN}}} // edited
	require.NoError(t, cfg2.Validate())
	d2, err := Start(cfg2, Options{Logger: quiet(), StatsInterval: -1, StateDir: stateDir})
	require.NoError(t, err)
	defer d2.Stop(5 * time.Second)
	ev, _ := d2.Events.Since(0)
	for _, e := range ev {
		require.NotEqual(t, api.EventState, e.Kind, "state rejected: %s", e.Reason)
	}
	require.Equal(t, other, d2.Array.LUN(0).Owner().Name, "LUN 0's owner survives the restart")
}

// An initiator whose name has upper case, logged in, has its host removed
// live: it is an undeclared host after, under one name everywhere, and
// its logout is found (the core does not keep it logged in).
func TestHostsRemoveHostMixedCaseInitiator(t *testing.T) {
	const ini = "iqn.1991-05.com.microsoft:WIN-DB1"
	cfg := testConfig(t.TempDir())
	cfg.Hosts = []array.HostConfig{{Name: "win1", Type: "windows", Initiators: []string{ini}}}
	cfg.Ownership.Tick = 20 * time.Millisecond
	require.NoError(t, cfg.Validate())
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	s := dial(t, d, 0, 1, ini)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = s.ClearUA(ctx, 0, 4)
	_, err = d.RemoveHost("win1", true, "test")
	require.NoError(t, err)
	require.NoError(t, d.ctl.Do(func(*ownership.Core) {}))
	s.Close()
	require.Eventually(t, func() bool { return len(d.SCSI.Nexuses()) == 0 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	var states []ownership.HostState
	require.NoError(t, d.ctl.Do(func(c *ownership.Core) { states = c.HostStates() }))
	for _, st := range states {
		require.Empty(t, st.Reaches, "host %s logged out of everything, yet the core has it reaching %v", st.Host, st.Reaches)
		require.Empty(t, st.ProtocolOnly, "host %s logged out of everything, yet the core has it logged in to %v", st.Host, st.ProtocolOnly)
	}
}

// config dump with inline CHAP and no mutual CHAP: with the secret put
// back as the dump's header says, serve accepts it (an absent secret is
// written empty, not redacted).
func TestHostsDumpInlineCHAPPutBack(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Auth.CHAP = &array.CHAPConfig{User: "u", Secret: "inline-secret-123456"}
	require.NoError(t, cfg.Validate())
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	b, err := d.RunningConfig()
	require.NoError(t, err)
	put := strings.Replace(string(b), "secret: (redacted)", "secret: inline-secret-123456", 1)
	p := filepath.Join(t.TempDir(), "dump.yaml")
	require.NoError(t, os.WriteFile(p, []byte(put), 0o600))
	_, err = config.Load(p)
	require.NoError(t, err, "%s", put)
}

// A host that reaches only the non-owner node has its type changed live
// to a STANDBY type while the core is busy: its paths are handed off
// (ANO) before the change shows, so its I/O on its only path goes on.
func TestHostsRetypeToStandbyBeforeHandoff(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Hosts = []array.HostConfig{{Name: "h1", Type: "linux", Initiators: []string{hostIQN}}}
	cfg.Ownership.Tick = 20 * time.Millisecond
	require.NoError(t, cfg.Validate())
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	port := -1
	for i, p := range d.Portals() {
		if p.Node != d.Array.LUN(0).Owner().Name {
			port = i
			break
		}
	}
	s := dial(t, d, port, 1, hostIQN)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = s.ClearUA(ctx, 0, 4)
	mediaIO(t, ctx, s)

	entered, release := make(chan struct{}), make(chan struct{})
	go d.ctl.Do(func(*ownership.Core) { close(entered); <-release }) // the core busy for a moment
	<-entered
	_, err = d.ChangeHost("h1", api.HostChange{Type: "linux-dmmp"}, "test")
	require.NoError(t, err)
	defer close(release)
	mediaIO(t, ctx, s) // its only path: must still carry I/O
}

// Host web has CHAP of its own and unknown initiators are refused; an
// initiator added to web live must log in with web's CHAP (the policy is
// read at each login, from the hosts as they are).
func TestHostsAddedInitiatorSkipsHostCHAP(t *testing.T) {
	d, _ := accessDaemon(t, "refuse", nil)
	const web2 = "iqn.2026-11.org.example:web-2"
	_, err := d.ChangeHost("web", api.HostChange{AddInitiators: []string{web2}}, "test")
	require.NoError(t, err)
	s, err := dialWith(d, 0, initiator.Config{InitiatorName: web2, ISID: [6]byte{0x80, 0, 0, 0, 0, 9}})
	if err == nil {
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = s.ClearUA(ctx, 0, 4)
		luns, lerr := s.ReportLUNs(ctx)
		require.NoError(t, lerr)
		t.Logf("logged in without CHAP; REPORT LUNS: %v", luns)
	}
	require.Error(t, err, "web's LUN reached without web's CHAP secret")
}

// A host with sessions logged in (here it sees its LUN through its
// group) is not removed without --force: its sessions would lose their
// LUNs mid-I/O.
func TestHostsRemoveHostWithLiveSessionsLosesLUNs(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Hosts = []array.HostConfig{
		{Name: "h1", Type: "linux-dmmp", Initiators: []string{hostIQN}, Group: "g"},
		{Name: "h2", Type: "linux-dmmp", Initiators: []string{"iqn.2026-11.org.example:h2"}, Group: "g"},
	}
	cfg.Mappings = []array.MappingConfig{{LUN: 0, Group: "g"}}
	cfg.Access.UnknownInitiators = "no-luns"
	require.NoError(t, cfg.Validate())
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	s := dial(t, d, 0, 1, hostIQN)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = s.ClearUA(ctx, 0, 4)
	mediaIO(t, ctx, s)
	_, err = d.RemoveHost("h1", false, "test")
	require.ErrorContains(t, err, "has 1 sessions logged in", "h1 is logged in and reads LUN 0 through group g")
	_, err = d.RemoveHost("h1", true, "test")
	require.NoError(t, err, "--force removes it")
}
