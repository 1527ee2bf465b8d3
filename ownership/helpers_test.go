package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// establish logs n in, reads RTPG there for luns, and marks the path
// discovered as if the host's multipath checker had probed it for the
// discovery window: an established path, for tests that start from one.
func establish(t testing.TB, c *Core, n Nexus, luns ...uint64) {
	t.Helper()
	require.NoError(t, c.Step(Login{n}))
	for _, id := range luns {
		require.NoError(t, c.Step(RTPG{Nexus: n, LUN: id}))
	}
	h := c.hosts[n.Host]
	if s := h.nexuses[keyOf(n)]; s != nil && !s.discovered {
		c.discover(h, s)
		c.reconcile(h)
	}
}
