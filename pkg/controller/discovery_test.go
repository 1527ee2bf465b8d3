package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/initiator"
)

// A host that discovers through either controller learns every port of
// both, as from one array: SendTargets on a's port names b's ports too
// (with their portal group tags), and the other way round, including
// while the other controller is down.
func TestDiscoveryNamesEveryControllersPorts(t *testing.T) {
	l := newLab(t)
	var want []string
	for i := range l.cfg.Nodes {
		for j := range l.cfg.Nodes[i].Ports {
			l.cfg.Nodes[i].Ports[j].Addr = freeAddr(t) // named by the other controller: no port 0
			want = append(want, l.cfg.Nodes[i].Ports[j].Addr)
		}
	}
	a := l.start("a")
	defer a.Stop(time.Second)
	discover := func(c *Controller, node string) []string {
		t.Helper()
		for _, p := range c.D.Portals() {
			if p.Node != node {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Discovery: true, DialTimeout: 2 * time.Second})
			require.NoError(t, err)
			defer s.Close()
			kvs, err := s.SendTargets(ctx)
			require.NoError(t, err)
			var got []string
			tags := map[string]bool{}
			for _, kv := range kvs {
				if kv.Key == "TargetAddress" {
					var addr string
					var tpgt int
					_, err := fmt.Sscanf(kv.Value, "%s", &addr)
					require.NoError(t, err)
					i := len(addr) - 1
					for addr[i] != ',' {
						i--
					}
					_, err = fmt.Sscanf(addr[i+1:], "%d", &tpgt)
					require.NoError(t, err)
					require.False(t, tags[addr[i+1:]], "portal group tag %d twice", tpgt)
					tags[addr[i+1:]] = true
					got = append(got, addr[:i])
				}
			}
			return got
		}
		t.Fatalf("no port of node %s", node)
		return nil
	}
	// b has not started: its ports are named all the same.
	require.ElementsMatch(t, want, discover(a, "a"))
	b := l.start("b")
	defer b.Stop(time.Second)
	require.ElementsMatch(t, want, discover(b, "b"))
}
