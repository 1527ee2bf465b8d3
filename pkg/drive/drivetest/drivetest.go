// Package drivetest builds the small array the control path's tests run
// on: the loopback configuration (nodes a and b, even LUNs on a, in
// memory) with one declared host, and a device server over it. It is
// imported by tests only.
package drivetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/media"
	"github.com/aluad/aluad/pkg/scsi"
)

// Array is the loopback array with host (of type typ, initiator iqn) and
// a device server serving its LUNs; it is closed when t ends.
func Array(t testing.TB, host, typ, iqn string) (*array.Array, *scsi.Server) {
	t.Helper()
	cfg := array.Loopback(t.TempDir(), 1<<20)
	cfg.Interlink.Penalty = 0
	cfg.Hosts = []array.HostConfig{{Name: host, Type: typ, Initiators: []string{iqn}}}
	require.NoError(t, cfg.Validate())
	arr, err := array.New(cfg, array.Options{
		OpenStore: func(_ uint64, size int64) (media.Store, error) { return media.NewMem(size), nil }})
	require.NoError(t, err)
	t.Cleanup(func() { arr.Close() })
	srv := scsi.NewServer()
	for _, l := range arr.LUNs {
		_, err := srv.AddLU(scsi.LUConfig{LUN: l.ID, BlockSize: l.BlockSize, Blocks: uint64(l.Size / int64(l.BlockSize)), Backend: l})
		require.NoError(t, err)
	}
	return arr, srv
}
