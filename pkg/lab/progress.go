package lab

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress shows a run's progress: a bar redrawn in place on a terminal,
// a line per event otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	label string
	total time.Duration
	t0    time.Time
	mu    sync.Mutex
	phase string
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func newProgress(o RunOptions, label string, total time.Duration, t0 time.Time) *progress {
	p := &progress{w: o.Progress, tty: o.TTY, label: label, total: total, t0: t0, phase: "steady load", done: make(chan struct{})}
	if p.w == nil {
		return p
	}
	if !p.tty {
		fmt.Fprintf(p.w, "%s: %v of load with faults\n", label, total)
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
	el := time.Since(p.t0)
	frac := min(float64(el)/float64(p.total), 1)
	const width = 30
	n := int(frac * width)
	p.mu.Lock()
	phase := p.phase
	p.mu.Unlock()
	fmt.Fprintf(p.w, "\r%s [%s%s] %3.0f/%.0fs %-20s", p.label, strings.Repeat("#", n), strings.Repeat(".", width-n),
		el.Seconds(), p.total.Seconds(), phase)
}

// set names the phase the run is in.
func (p *progress) set(phase string) {
	p.mu.Lock()
	p.phase = phase
	p.mu.Unlock()
	if p.w != nil && !p.tty {
		fmt.Fprintf(p.w, "  %5.1fs %s\n", time.Since(p.t0).Seconds(), phase)
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
