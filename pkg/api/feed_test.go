package api

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEventLogRing(t *testing.T) {
	var consumed []uint64
	l := NewEventLog(4, func() time.Time { return time.Unix(0, 0) }, func(e Event) { consumed = append(consumed, e.Seq) })
	for i := 0; i < 6; i++ {
		l.Add(Event{Kind: EventLogin})
	}
	tests := []struct {
		since     uint64
		wantFirst uint64
		wantN     int
		wantLost  uint64
	}{
		{0, 3, 4, 2}, // 1 and 2 were overwritten
		{2, 3, 4, 0},
		{4, 5, 2, 0},
		{6, 0, 0, 0},
		{9, 0, 0, 0},
	}
	for _, tc := range tests {
		ev, lost := l.Since(tc.since)
		require.Len(t, ev, tc.wantN, "since %d", tc.since)
		require.Equal(t, tc.wantLost, lost, "since %d", tc.since)
		if tc.wantN > 0 {
			require.Equal(t, tc.wantFirst, ev[0].Seq)
		}
	}
	require.Equal(t, []uint64{1, 2, 3, 4, 5, 6}, consumed)
}
