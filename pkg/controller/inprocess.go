package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/fence"
)

// What a cluster of controllers in one process (the tests' labs, the
// cluster simulation in pkg/clustersim) needs of a controller: its
// STONITH as a kill, a pause of its media writes, and what the process
// would show from outside.

// InProcess fences controllers that run in the caller's own process:
// STONITH of one is its kill (what it held in memory is gone; from the
// fence on it serves and writes nothing more). Add each controller as it
// starts.
type InProcess struct {
	mu sync.Mutex
	by map[string]*Controller // by instance
	// Delay: each fence takes this long first (a power fence's seconds).
	Delay time.Duration
}

// NewInProcess is a fencer of no controller yet.
func NewInProcess() *InProcess { return &InProcess{by: map[string]*Controller{}} }

// Add makes c fenceable by its instance.
func (f *InProcess) Add(c *Controller) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.by[c.self.Instance] = c
}

// Method implements fence.Fencer.
func (f *InProcess) Method() string { return "in-process" }

// Fence implements fence.Fencer.
func (f *InProcess) Fence(ctx context.Context, node string, id fence.Identity) error {
	select {
	case <-time.After(f.Delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	f.mu.Lock()
	c := f.by[id.Instance]
	f.mu.Unlock()
	if c == nil {
		return fmt.Errorf("no controller of this process is instance %s of node %s", id.Instance, node)
	}
	// As SIGKILL: from now on nothing of it reaches the media or serves;
	// its goroutines end in the background (one may wait on a store it
	// is cut off from, as no killed process does).
	c.MarkGone()
	go c.Kill()
	return nil
}

// MarkGone: nothing more of the process reaches the media (writes under
// way end first, held ones are refused) and it serves nothing; what a
// SIGKILL does at once, before Kill ends its goroutines.
func (c *Controller) MarkGone() {
	c.gone.Store(true)
	c.mgate.kill()
}

// Gone says whether the controller was killed (MarkGone or Kill).
func (c *Controller) Gone() bool { return c.gone.Load() }

// PauseMedia holds the media writes that come from now (on) as a paused
// process's: what it had on its way to the media (a destage past its
// fence check) waits, and goes on when it resumes (off), or never if it
// is killed meanwhile.
func (c *Controller) PauseMedia(on bool) { c.mgate.pause(on) }

// Instance is this process's incarnation in the cluster.
func (c *Controller) Instance() string { return c.self.Instance }

// Interlinked says whether the interlink to peer is up.
func (c *Controller) Interlinked(peer string) bool { return c.linkTo(peer) != nil }
