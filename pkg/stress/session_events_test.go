package stress

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/iscsi"
)

// loginEvents lists the login and logout events of one initiator, in order.
func loginEvents(d *daemon.Daemon, name string) []string {
	evs, _ := d.Events.Since(0)
	var out []string
	for _, e := range evs {
		if e.Initiator == name && (e.Kind == api.EventLogin || e.Kind == api.EventLogout) {
			out = append(out, e.Kind)
		}
	}
	return out
}

// TestLoginKnownBeforeResponse: when the initiator hears it is logged in,
// the array already knows the login (an API call made right after a login
// sees it).
func TestLoginKnownBeforeResponse(t *testing.T) {
	d := limitsDaemon(t, iscsi.LimitsConfig{})
	for i := 0; i < 40; i++ {
		s, err := dialIn(d, i%len(d.Portals()), "iqn.2026-11.org.example:k", byte(i))
		require.NoError(t, err)
		require.Len(t, loginEvents(d, "iqn.2026-11.org.example:k"), 2*i+1, "login %d is known at once", i)
		s.Close()
		require.Eventually(t, func() bool { return len(loginEvents(d, "iqn.2026-11.org.example:k")) == 2*i+2 },
			5e9, 1e7, "and its end")
	}
}

// TestReinstatementAnnouncesInOrder: a host that drops its connection and
// logs in again at once with the same ISID races the old session's end
// with the reinstatement. Whatever wins, the array hears the old session's
// logout before the new one's login, so the last word on a live nexus is
// a login.
func TestReinstatementAnnouncesInOrder(t *testing.T) {
	d := limitsDaemon(t, iscsi.LimitsConfig{})
	const name = "iqn.2026-11.org.example:r"
	s, err := dialIn(d, 0, name, 1)
	require.NoError(t, err)
	for i := 0; i < 60; i++ {
		var wg sync.WaitGroup
		var next *initiator.Session
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			next, err = dialIn(d, 0, name, 1)
			require.NoError(t, err)
		}()
		s.Close()
		wg.Wait()
		s = next
		evs := loginEvents(d, name)
		for j, k := range evs {
			want := api.EventLogin
			if j%2 == 1 {
				want = api.EventLogout
			}
			require.Equal(t, want, k, "round %d, event %d of %v", i, j, evs)
		}
		require.Equal(t, api.EventLogin, evs[len(evs)-1], "round %d: the live session's login is the last word", i)
	}
	s.Close()
}
