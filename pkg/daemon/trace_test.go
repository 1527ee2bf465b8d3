package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/initiator"
)

// GET /v1/trace through the management API: the first read turns the
// trace on; rows name the host, node and port; a UNIT ATTENTION and a LUN
// RESET come back as notes; bad cursors are refused; DELETE turns it off.
func TestTraceAPI(t *testing.T) {
	d, c := apiDaemon(t, 50*time.Millisecond)
	first, err := c.Trace(0, 0, "t")
	require.NoError(t, err)
	assert.Equal(t, int64(10*time.Millisecond), first.BucketNs)
	s := dial(t, d, 0, 1, hostIQN)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The first command of a new nexus gets 29/00 (power on, reset).
	_, err = s.Read16(ctx, 0, 0, 1, 512)
	require.Error(t, err)
	for i := 0; i < 20; i++ {
		_, err := s.Read16(ctx, 0, uint64(i), 1, 512)
		require.NoError(t, err)
	}
	code, err := s.TaskMgmt(ctx, initiator.TMFLUNReset, 0, 0)
	require.NoError(t, err)
	require.Zero(t, code)
	// Buckets stay open for the trace's delay after their time.
	time.Sleep(time.Duration(first.DelayNs) + 30*time.Millisecond)
	r, err := c.Trace(first.NextBucket, first.NextNote, "t")
	require.NoError(t, err)
	var good uint32
	for _, b := range r.Buckets {
		assert.Equal(t, "h1", b.Host)
		assert.Equal(t, hostIQN, b.Initiator)
		assert.Equal(t, "a", b.Node)
		assert.Equal(t, uint16(1), b.TargetPort)
		good += b.Good
		if b.Good > 0 {
			assert.GreaterOrEqual(t, b.LastGood, b.FirstGood)
			assert.Less(t, b.LastGood, int64(10*time.Millisecond), "times are offsets inside the bucket")
		}
	}
	assert.Equal(t, uint32(20), good)
	var kinds []string
	for _, n := range r.Notes {
		kinds = append(kinds, n.Kind+" "+n.Sense+n.Function)
	}
	assert.Equal(t, []string{api.TraceCheck + " 6/29/00", api.TraceTMF + " lun-reset"}, kinds)
	r2, err := c.Trace(r.NextBucket, r.NextNote, "t")
	require.NoError(t, err)
	assert.Empty(t, r2.Notes, "a read from the cursors returns only what is new")

	var bad map[string]any
	assert.ErrorContains(t, c.Do("GET", "/v1/trace?bucket=x", nil, &bad), "bucket must be a cursor")
	require.NoError(t, c.StopTrace())
	_, on := d.SCSI.TraceIdle()
	assert.False(t, on, "DELETE /v1/trace turns it off")
}
