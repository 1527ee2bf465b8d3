package daemon

import (
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/initiator"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two sessions of one host through one target port (two ifaces bound to
// one portal, or a reboot whose new session logs in before the old one
// times out): each is its own aluad_path_up sample (isid), and the
// scrape answers.
func TestFaultsPathUpTwoSessionsOnePort(t *testing.T) {
	d, c := apiDaemon(t, 50*time.Millisecond)
	s1 := dial(t, d, 0, 1, hostIQN)
	t.Cleanup(func() { s1.Close() })
	s2 := dial(t, d, 0, 2, hostIQN)
	t.Cleanup(func() { s2.Close() })
	text, err := c.Metrics()
	require.NoError(t, err, "a scrape with two sessions of h1 on a0")
	parseMetrics(t, text)
}

// A host reboots: its new session (new ISID) logs in through a0 before
// the target notices the old one is gone, whose end by a fault comes
// after it. a0 is up: no failed path is listed beside the live one.
func TestFaultsRebootNewISIDLeavesFailedPath(t *testing.T) {
	d, c := apiDaemon(t, 50*time.Millisecond)
	old := dial(t, d, 0, 1, hostIQN)
	t.Cleanup(func() { old.Close() })
	s := dial(t, d, 0, 2, hostIQN) // the host after its reboot
	t.Cleanup(func() { s.Close() })
	old.Close() // the old connection dies (no Logout)
	require.Eventually(t, func() bool { return len(d.SCSI.Nexuses()) == 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	ps, err := c.Paths()
	require.NoError(t, err)
	for _, p := range ps {
		require.Equal(t, "up", p.State, "h1 is logged in through %s: %+v", p.Port, p)
	}
}

// A host dies (its connection drops, no Logout) and the operator removes
// it: its failed path goes with it (no alert left that cannot resolve).
func TestFaultsRemovedHostFailedForever(t *testing.T) {
	d, c := apiDaemon(t, 50*time.Millisecond)
	s := dial(t, d, 0, 1, hostIQN)
	s.Close()
	require.Eventually(t, func() bool { return len(d.SCSI.Nexuses()) == 0 }, 5*time.Second, 10*time.Millisecond)
	_, err := d.RemoveHost("h1", false, "test")
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	ps, err := c.Paths()
	require.NoError(t, err)
	require.Empty(t, ps, "a removed host's path that will never come back")
}

// web is declared with CHAP; unknown initiators are allowed (the
// default) and no target-wide CHAP is set. Removing web live, or taking
// its initiator off it, would let its IQN log in with no secret at all:
// refused (the config file's to change, on purpose); its IQN still needs
// CHAP.
func TestFaultsRemovedCHAPHostKeepsCHAP(t *testing.T) {
	d, _ := accessDaemon(t, "allow", nil)
	_, err := d.Unmap(array.MappingConfig{LUN: 5, Host: "web"}, "test")
	require.NoError(t, err)
	_, err = d.RemoveHost("web", false, "test")
	require.ErrorContains(t, err, "authenticates with CHAP")
	_, err = d.ChangeHost("web", api.HostChange{RemoveInitiators: []string{webIQN}, AddInitiators: []string{"iqn.2026-11.org.example:web-9"}}, "test")
	require.ErrorContains(t, err, "authenticates with CHAP")
	s, err := dialWith(d, 0, initiator.Config{InitiatorName: webIQN})
	if err == nil {
		s.Close()
	}
	require.Error(t, err, "web's IQN still needs CHAP")
}
