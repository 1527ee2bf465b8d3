package qualify

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress shows the run's progress: a bar redrawn in place on a
// terminal, a line per step otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	t0    time.Time
	mu    sync.Mutex
	i     int
	name  string
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func newProgress(w io.Writer, tty bool, total int) *progress {
	p := &progress{w: w, tty: tty, total: total, t0: time.Now(), done: make(chan struct{})}
	if w == nil || !tty {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			p.draw()
			select {
			case <-p.done:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *progress) draw() {
	p.mu.Lock()
	i, name := p.i, p.name
	p.mu.Unlock()
	const width = 30
	n := width * max(i-1, 0) / max(p.total, 1)
	fmt.Fprintf(p.w, "\r\x1b[Kqualify [%s%s] %d/%d %4.0fs %s", strings.Repeat("#", n), strings.Repeat(".", width-n),
		i, p.total, time.Since(p.t0).Seconds(), name)
}

// set names the step the run is in (1-based).
func (p *progress) set(i int, name string) {
	p.mu.Lock()
	p.i, p.name = i, name
	p.mu.Unlock()
	if p.w != nil && !p.tty {
		fmt.Fprintf(p.w, "[%6.1fs] %d/%d %s\n", time.Since(p.t0).Seconds(), i, p.total, name)
	}
}

func (p *progress) stop() {
	p.once.Do(func() {
		close(p.done)
		p.wg.Wait()
		if p.w != nil && p.tty {
			p.draw()
			fmt.Fprintln(p.w)
		}
	})
}
