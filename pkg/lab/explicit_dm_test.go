package lab

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
)

// TestExplicitLinuxDMTakesOver: with explicit ALUA a linux-dmmp host that
// loses its paths to the owner goes on through the other group, declared
// with ANO (default) or STANDBY (linux-dmmp) non-owner paths: with
// STANDBY, the path group's activation sends the STPG that moves the
// LUN, as scsi_dh_alua does on an array that allows explicit ALUA.
func TestExplicitLinuxDMTakesOver(t *testing.T) {
	for _, typ := range []string{"default", "linux-dmmp"} {
		t.Run(typ, func(t *testing.T) {
			ctx := context.Background()
			env, err := Start(ctx, EnvConfig{LUNs: 2, LUNSize: 1 << 20, ALUA: "explicit", Mirror: true, Tick: 100 * time.Millisecond,
				Stacks: []HostSpec{{Name: "h1", Stack: "linux-dmmp", Type: typ}}})
			require.NoError(t, err)
			defer env.Close()
			h := env.Hosts[0]
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			require.NoError(t, h.Write(wctx, 0, 0, make([]byte, 4096), false))
			cancel()
			for _, p := range []string{"a0", "a1"} {
				_, err := env.D.Inject(api.Fault{Kind: api.FaultPathDown, Port: p, Initiator: env.IQN["h1"]})
				require.NoError(t, err)
			}
			wctx, cancel = context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			require.NoError(t, h.Write(wctx, 0, 0, make([]byte, 4096), false), "a write after losing the owner's paths")
			if typ == "linux-dmmp" {
				require.Equal(t, "b", env.D.Array.LUN(0).Owner().Name, "the host's STPG moved LUN 0")
				require.EqualValues(t, 1, h.Stats().STPGs)
			}
		})
	}
}
