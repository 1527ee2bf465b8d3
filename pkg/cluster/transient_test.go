package cluster

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Which etcd errors Init tries again: those of a cluster electing a
// leader, not those of a request it refuses.
func TestTransient(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"no leader", rpctypes.ErrGRPCNoLeader, true},
		{"no leader (as the client returns it)", rpctypes.ErrNoLeader, true},
		{"leader changed (as the client returns it)", rpctypes.ErrLeaderChanged, true},
		{"leader changed", rpctypes.ErrGRPCLeaderChanged, true},
		{"request timed out", rpctypes.ErrGRPCTimeout, true},
		{"proposal dropped (as a client sees it)", status.Error(codes.Unknown, "raft proposal dropped"), true},
		{"permission denied", rpctypes.ErrGRPCPermissionDenied, false},
		{"permission denied (as the client returns it)", rpctypes.ErrPermissionDenied, false},
		{"request too large", rpctypes.ErrGRPCRequestTooLarge, false},
		{"not a gRPC error", errors.New("boom"), false},
	} {
		t.Run(tt.name, func(t *testing.T) { assert.Equal(t, tt.want, transient(tt.err)) })
	}
}
