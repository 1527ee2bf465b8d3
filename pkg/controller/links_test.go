package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/cluster"
)

// The interlink's silence timeout is cluster.interlink_timeout, pinged
// every quarter of it; a section built without Validate falls back to a
// quarter of the lease.
func TestLinkTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name               string
		cc                 cluster.Config
		timeout, heartbeat time.Duration
	}{
		{"configured", cluster.Config{LeaseTTL: 6 * time.Second, InterlinkTimeout: 4 * time.Second}, 4 * time.Second, time.Second},
		{"unset", cluster.Config{LeaseTTL: 2 * time.Second}, 500 * time.Millisecond, 125 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := (&Controller{cc: tc.cc}).linkOptions()
			require.Equal(t, tc.timeout, o.Timeout)
			require.Equal(t, tc.heartbeat, o.Heartbeat)
		})
	}
}
