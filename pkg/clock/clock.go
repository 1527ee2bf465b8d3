// Package clock is the time the running array's loops read, injected at
// the edges (CONVENTIONS: injected clocks): the real one in production,
// and a Fake that a test moves by hand, so a test of the ownership core's
// ticks or the stats interval neither sleeps nor races a real timer.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes tickers.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) Ticker
}

// Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Fake is a clock that moves only when Advance moves it. A ticker's tick
// is delivered before Advance returns (the receiver has taken it), so a
// test that advances by one period knows the loop holds that tick.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*fakeTicker
	seq     int
}

// NewFake starts a fake clock at t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now is the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTicker makes a ticker that fires every d of fake time.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	t := &fakeTicker{f: f, seq: f.seq, period: d, next: f.now.Add(d), c: make(chan time.Time), stop: make(chan struct{})}
	f.tickers = append(f.tickers, t)
	return t
}

// Tickers counts the tickers running (a test waits for a loop to start).
func (f *Fake) Tickers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.tickers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// Advance moves the clock by d, delivering every tick that falls in it,
// in time order, each once its receiver took it (or its ticker stopped).
// One goroutine advances a fake clock at a time.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	f.mu.Unlock()
	for {
		f.mu.Lock()
		var due *fakeTicker
		live := f.tickers[:0]
		for _, t := range f.tickers {
			if !t.stopped {
				live = append(live, t)
			}
		}
		f.tickers = live
		sort.Slice(f.tickers, func(i, j int) bool {
			a, b := f.tickers[i], f.tickers[j]
			if !a.next.Equal(b.next) {
				return a.next.Before(b.next)
			}
			return a.seq < b.seq // the same instant: in the order they were made
		})
		if len(f.tickers) > 0 && !f.tickers[0].next.After(end) {
			due = f.tickers[0]
		}
		if due == nil {
			f.now = end
			f.mu.Unlock()
			return
		}
		at := due.next
		f.now = at
		due.next = at.Add(due.period)
		f.mu.Unlock()
		select {
		case due.c <- at:
		case <-due.stop:
		}
	}
}

type fakeTicker struct {
	f       *Fake
	seq     int
	period  time.Duration
	next    time.Time
	c       chan time.Time
	stop    chan struct{}
	stopped bool
	once    sync.Once
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }

func (t *fakeTicker) Stop() {
	t.once.Do(func() {
		t.f.mu.Lock()
		t.stopped = true
		t.f.mu.Unlock()
		close(t.stop)
	})
}
