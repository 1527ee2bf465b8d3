package media

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Concurrent precise waits are each woken no sooner than asked, by the
// timerfd clock (no goroutine spins), and none is left pending.
func TestPreciseWait(t *testing.T) {
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := time.Duration(10+i*7) * time.Microsecond
			if i == 0 {
				d = 3 * time.Millisecond // the sleeping part of a long wait
			}
			start := time.Now()
			PreciseWait(d)
			assert.GreaterOrEqual(t, time.Since(start), d)
		}()
	}
	wg.Wait()
	PreciseWait(0)
	PreciseWait(-time.Second)
	waker.mu.Lock()
	defer waker.mu.Unlock()
	assert.False(t, waker.running, "no goroutine spins when no wait is pending")
	assert.GreaterOrEqual(t, waker.fd, 0, "the clock sleeps on a timerfd")
	assert.Zero(t, waker.waits.Len())
}
