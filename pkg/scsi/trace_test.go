package scsi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The command trace counts each nexus's commands per LU in buckets
// (arrivals, GOOD completions, CHECK CONDITIONs, non-optimized arrivals),
// keeps every CHECK CONDITION and TMF, reads from cursors, and costs
// nothing once stopped.
func TestTrace(t *testing.T) {
	s, _ := newALUAServer(t, 0x1)
	now := time.Unix(1000, 0)
	s.SetClock(func() time.Time { return now })
	read10 := []byte{OpRead10, 0, 0, 0, 0, 0, 0, 0, 1, 0}
	tur := make([]byte, 6)
	s.Execute(&Command{Nexus: n1, CDB: read10, DataInLen: 512})
	_, on := s.TraceSince(0, 0)
	require.False(t, on, "off until started")
	s.StartTrace(10 * time.Millisecond)
	s.Execute(&Command{Nexus: n1, CDB: read10, DataInLen: 512})
	s.Execute(&Command{Nexus: n1, CDB: tur}) // not a media command: not counted
	now = now.Add(25 * time.Millisecond)
	s.Execute(&Command{Nexus: n2, CDB: read10, DataInLen: 512}) // through the ANO port
	s.Execute(&Command{Nexus: n2, CDB: []byte{OpRead10, 0, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0}, DataInLen: 512})
	s.TaskManagement(n1, TMFLUNReset, 0)

	r, on := s.TraceSince(0, 0)
	require.True(t, on)
	require.Len(t, r.Buckets, 1, "n1's bucket closed when a later one opened; n2's, in progress, is not read")
	assert.Equal(t, n1, r.Buckets[0].Nexus)
	now = now.Add(10 * time.Millisecond)
	r, _ = s.TraceSince(0, 0)
	require.Len(t, r.Buckets, 2)
	by := map[uint16]TraceBucket{}
	for _, b := range r.Buckets {
		by[b.Nexus.TargetPort] = b
	}
	b1, b2 := by[n1.TargetPort], by[n2.TargetPort]
	assert.Equal(t, TraceBucket{Nexus: n1, LUN: 0, Start: time.Unix(1000, 0).UnixNano(), Arrived: 1, Good: 1,
		FirstArrival: time.Unix(1000, 0).UnixNano(), LastArrival: time.Unix(1000, 0).UnixNano(),
		FirstGood: time.Unix(1000, 0).UnixNano(), LastGood: time.Unix(1000, 0).UnixNano()}, b1)
	assert.Equal(t, uint32(2), b2.Arrived)
	assert.Equal(t, uint32(1), b2.Good)
	assert.Equal(t, uint32(1), b2.Checks)
	assert.Equal(t, uint32(2), b2.NonOptimized)
	require.Len(t, r.Notes, 2)
	assert.Equal(t, TraceNote{Time: now.Add(-10 * time.Millisecond).UnixNano(), Nexus: n2, Check: true, Opcode: OpRead10, Key: 5, ASC: 0x21}, r.Notes[0])
	assert.Equal(t, TMFLUNReset, r.Notes[1].TMF)
	assert.False(t, r.Notes[1].Check)

	// Cursors: nothing new, then a command that arrived two buckets before
	// it completed lands in its arrival bucket as a late row.
	r2, _ := s.TraceSince(r.NextBucket, r.NextNote)
	assert.Empty(t, r2.Buckets)
	assert.Empty(t, r2.Notes)
	tr := s.trace.Load()
	arr := now.Add(-30 * time.Millisecond)
	tr.command(n1, 0, ioWrite, OpWrite10, &Response{Status: StatusGood}, false, arr, now)
	now = now.Add(10 * time.Millisecond)
	r3, _ := s.TraceSince(r.NextBucket, r.NextNote)
	require.Len(t, r3.Buckets, 2)
	var arrived, good uint32
	for _, b := range r3.Buckets {
		if b.Start == arr.UnixNano()-arr.UnixNano()%int64(10*time.Millisecond) {
			arrived += b.Arrived
			assert.Zero(t, b.Good)
		} else {
			good += b.Good
		}
	}
	assert.Equal(t, uint32(1), arrived)
	assert.Equal(t, uint32(1), good)

	s.StopTrace()
	_, on = s.TraceSince(0, 0)
	assert.False(t, on)
	s.TaskManagement(n1, TMFAbortTask, 0) // no trace: nothing to do, no panic
}

// The trace's logs are bounded: what a reader did not collect in time is
// dropped from the front and counted.
func TestTraceBounded(t *testing.T) {
	s, _ := newALUAServer(t, 0x1)
	now := time.Unix(2000, 0)
	s.SetClock(func() time.Time { return now })
	s.StartTrace(time.Millisecond)
	s.trace.Load().max = 3
	read10 := []byte{OpRead10, 0, 0, 0, 0, 0, 0, 0, 1, 0}
	for i := 0; i < 5; i++ {
		s.Execute(&Command{Nexus: n1, CDB: read10, DataInLen: 512})
		now = now.Add(time.Millisecond)
	}
	r, _ := s.TraceSince(0, 0)
	assert.Len(t, r.Buckets, 3)
	assert.Equal(t, uint64(2), r.Lost)
	assert.Equal(t, uint64(5), r.NextBucket)
	assert.Equal(t, now.Add(-3*time.Millisecond).UnixNano(), r.Buckets[0].Start)
}

func TestSenseCodes(t *testing.T) {
	for _, c := range []struct {
		b             []byte
		key, asc, asq byte
	}{
		{BuildSense(Sense(ReasonUAAsymmetricChanged), false), 6, 0x2a, 6},
		{BuildSense(Sense(ReasonUAAsymmetricChanged), true), 6, 0x2a, 6},
		{[]byte{0x70, 0, 2}, 0, 0, 0},
		{nil, 0, 0, 0},
	} {
		k, a, q := senseCodes(c.b)
		assert.Equal(t, [3]byte{c.key, c.asc, c.asq}, [3]byte{k, a, q}, "%x", c.b)
	}
}
