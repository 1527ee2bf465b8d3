package scsi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The command trace counts each nexus's commands per LU in buckets
// (arrivals, completions, GOOD completions, CHECK CONDITIONs,
// non-optimized arrivals), keeps every CHECK CONDITION and TMF, reads
// from cursors, and costs nothing once stopped.
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
	assert.Equal(t, 200*time.Millisecond, r.Delay)
	assert.Empty(t, r.Buckets, "buckets stay open for the window")
	require.Len(t, r.Notes, 2)
	assert.Equal(t, TraceNote{Time: now.UnixNano(), Nexus: n2, Check: true, Opcode: OpRead10, Key: 5, ASC: 0x21}, r.Notes[0])
	assert.Equal(t, TMFLUNReset, r.Notes[1].TMF)
	assert.False(t, r.Notes[1].Check)

	now = now.Add(r.Delay)
	r, _ = s.TraceSince(0, r.NextNote)
	assert.Empty(t, r.Notes, "the notes read are not read again")
	require.Len(t, r.Buckets, 2)
	by := map[uint16]TraceBucket{}
	for _, b := range r.Buckets {
		by[b.Nexus.TargetPort] = b
	}
	t0 := time.Unix(1000, 0).UnixNano()
	assert.Equal(t, TraceBucket{Nexus: n1, LUN: 0, Start: t0, Arrived: 1, Done: 1, Good: 1,
		FirstArrival: t0, LastArrival: t0, FirstGood: t0, LastGood: t0}, by[n1.TargetPort])
	b2 := by[n2.TargetPort]
	assert.Equal(t, [5]uint32{2, 2, 1, 1, 2}, [5]uint32{b2.Arrived, b2.Done, b2.Good, b2.Checks, b2.NonOptimized})

	// A command that arrived within the window of its completion counts
	// in its own bucket; one that took longer gets a late row there.
	tr := s.trace.Load()
	tr.command(n1, 0, ioWrite, OpWrite10, &Response{Status: StatusGood}, false, now.Add(-50*time.Millisecond), now)
	tr.command(n1, 0, ioWrite, OpWrite10, &Response{Status: StatusGood}, false, now.Add(-time.Second), now)
	now = now.Add(r.Delay + 10*time.Millisecond)
	r2, _ := s.TraceSince(r.NextBucket, r.NextNote)
	var arrived, done, rows uint32
	for _, b := range r2.Buckets {
		arrived += b.Arrived
		done += b.Done
		rows++
	}
	assert.Equal(t, [3]uint32{2, 2, 3}, [3]uint32{arrived, done, rows}, "one late row, two in the window")

	s.StopTrace()
	_, on = s.TraceSince(0, 0)
	assert.False(t, on)
	s.TaskManagement(n1, TMFAbortTask, 0) // no trace: nothing to do, no panic
}

// The logs are bounded: rows a reader collected are dropped, and what it
// did not collect in time is dropped from the front and counted.
func TestTraceLogs(t *testing.T) {
	var l ringLog[int]
	l.max = 3
	for i := 0; i < 10; i++ {
		l.add(i)
		got, next, _ := l.since(uint64(i))
		assert.Equal(t, []int{i}, got, "read %d", i)
		l.ack(next)
	}
	assert.Zero(t, l.lost, "a reader that keeps up loses nothing")
	assert.LessOrEqual(t, len(l.buf)-l.head, 1)
	for i := 10; i < 15; i++ {
		l.add(i)
	}
	got, next, skipped := l.since(10)
	assert.Equal(t, []int{12, 13, 14}, got)
	assert.Equal(t, uint64(2), skipped)
	assert.Equal(t, uint64(15), next)
	assert.Equal(t, uint64(2), l.lost)
	got, _, _ = l.since(100)
	assert.Empty(t, got)
	l.ack(100) // a cursor past the end is another trace's: nothing acknowledged
	got, _, _ = l.since(12)
	assert.Equal(t, []int{12, 13, 14}, got)
	// Compaction keeps the kept entries in order.
	var m ringLog[int]
	m.max = 1 << 20
	for i := 0; i < 20000; i++ {
		m.add(i)
		if i%100 == 99 {
			m.ack(uint64(i - 10))
		}
	}
	got, _, _ = m.since(19990)
	assert.Equal(t, []int{19990, 19991, 19992, 19993, 19994, 19995, 19996, 19997, 19998, 19999}, got)
	assert.Less(t, len(m.buf), 10000)
}

// A long quiet closes the open buckets without visiting every index.
func TestTraceQuiet(t *testing.T) {
	s, _ := newALUAServer(t, 0x1)
	now := time.Unix(3000, 0)
	s.SetClock(func() time.Time { return now })
	s.StartTrace(10 * time.Millisecond)
	s.Execute(&Command{Nexus: n1, CDB: []byte{OpRead10, 0, 0, 0, 0, 0, 0, 0, 1, 0}, DataInLen: 512})
	now = now.Add(1000 * time.Hour)
	r, _ := s.TraceSince(0, 0)
	require.Len(t, r.Buckets, 1)
	assert.Equal(t, uint32(1), r.Buckets[0].Good)
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
