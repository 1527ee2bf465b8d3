package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)

// Advance delivers every tick that falls in the span, in time order,
// each taken before Advance returns; a stopped ticker gets none.
func TestFakeTicks(t *testing.T) {
	f := NewFake(t0)
	a, b := f.NewTicker(10*time.Millisecond), f.NewTicker(25*time.Millisecond)
	// One receiver: it records each tick before it takes the next, so
	// the record is the delivery order.
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for len(got) < 7 {
			select {
			case at := <-a.C():
				got = append(got, "a@"+at.Sub(t0).String())
			case at := <-b.C():
				got = append(got, "b@"+at.Sub(t0).String())
			}
		}
	}()
	f.Advance(50 * time.Millisecond)
	<-done
	require.Equal(t, []string{"a@10ms", "a@20ms", "b@25ms", "a@30ms", "a@40ms", "a@50ms", "b@50ms"}, got)
	require.Equal(t, t0.Add(50*time.Millisecond), f.Now())

	b.Stop()
	next := make(chan struct{})
	go func() { <-a.C(); close(next) }()
	f.Advance(10 * time.Millisecond) // b's tick at 75 ms is not due; a's at 60 ms is
	<-next
	require.Equal(t, 1, f.Tickers())
	c := f.NewTicker(time.Second)
	c.Stop()
	require.Equal(t, 1, f.Tickers(), "a stopped ticker is not counted")
	a.Stop()
	f.Advance(time.Hour) // nobody receives, nothing blocks
	require.Equal(t, 0, f.Tickers())
}

func TestRealTicks(t *testing.T) {
	tk := Real.NewTicker(time.Millisecond)
	defer tk.Stop()
	<-tk.C()
	require.False(t, Real.Now().IsZero())
}
