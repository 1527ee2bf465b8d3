package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/fence"
)

// Fencing (docs/cluster.md, Fencing): before the leader takes a gone
// controller's LUNs over, and before a node joins again, the node's last
// process that neither left cleanly nor was fenced is fenced, and its
// incarnation record deleted. A process of this machine (this boot or an
// earlier one) is fenced by its pidfd whatever the method, so a fence
// agent never acts on the machine that runs it; another machine's by the
// configured method. The leader fences in the background, one job per
// incarnation, so a slow agent neither holds its other decisions nor is
// run again every round.

// errFencing is a fence under way: the takeover waits.
var errFencing = errors.New("controller: fencing under way")

// fenceJob is one fence of one incarnation (its record's revision).
type fenceJob struct {
	rev    int64
	done   chan struct{}
	killed bool // the fencer succeeded (the record may still need deleting)
	err    error
	ended  time.Time
	tries  int // of this incarnation, this one included
}

// setUpFencing learns this process's identity and picks the fencers.
func (c *Controller) setUpFencing() error {
	c.fences = map[string]*fenceJob{}
	var err error
	if c.self, err = fence.Self(); err != nil {
		if c.cc.Fencing != cluster.FenceNone || c.o.Fencer != nil {
			return err
		}
		c.log.Warn("this process cannot name itself for fencing", "err", err)
	}
	switch c.fencer = c.o.Fencer; {
	case c.fencer != nil:
	case c.cc.Fencing == cluster.FenceNone:
		c.fencer = fence.None{}
		c.log.Warn("cluster.fencing: none: a controller paused past its lease may write over a survivor's newer data")
	case c.cc.Fencing == cluster.FenceCommand:
		c.fencer = &fence.Command{Argv: c.cc.FenceCommand}
		c.local = fence.NewProcess(c.self)
	default:
		c.local = fence.NewProcess(c.self)
		c.fencer = c.local
	}
	return nil
}

// fencerFor is the fencer of a process with identity id: this machine's
// pidfd where it reaches the process, else the configured method.
func (c *Controller) fencerFor(id fence.Identity) fence.Fencer {
	if c.local != nil && c.local.Reaches(id) {
		return c.local
	}
	return c.fencer
}

// fenceNode fences node's last incarnation now, if it has one that
// neither left cleanly nor was fenced (and that is no member: a member's
// is its running process), and deletes its record.
func (c *Controller) fenceNode(ctx context.Context, node string) error {
	inc, ok, member, err := c.store.Incarnation(ctx, node)
	switch {
	case err != nil || !ok:
		return err
	case member:
		return fmt.Errorf("controller: node %s is a member: its process runs", node)
	}
	if _, err := c.runFence(ctx, node, inc); err != nil {
		return err
	}
	return c.markFenced(inc)
}

// runFence runs the fencer for inc and logs the outcome.
func (c *Controller) runFence(ctx context.Context, node string, inc cluster.Incarnation) (time.Duration, error) {
	if inc.Process.Instance != "" && inc.Process.Instance == c.self.Instance {
		return 0, fmt.Errorf("controller: node %s's last incarnation is this controller", node)
	}
	f := c.fencerFor(inc.Process)
	start := time.Now()
	err := f.Fence(ctx, node, inc.Process)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		c.log.Error("fencing failed: the node's LUNs wait until it is fenced", "fenced", node, "method", f.Method(),
			"took", took, "err", err)
		return took, err
	}
	c.log.Warn("fenced the node's last process", "fenced", node, "method", f.Method(),
		"pid", inc.Process.PID, "host", inc.Process.Host, "took", took)
	return took, nil
}

// markFenced deletes a fenced incarnation's record, on its own deadline.
func (c *Controller) markFenced(inc cluster.Incarnation) error {
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	return c.store.MarkFenced(ctx, inc)
}

// fenced is the leader's question before a takeover from node: nil once
// node's last process is fenced (or left cleanly); errFencing while a
// fence runs in the background (it wakes the leader when it ends); the
// last failure until it is tried again (1 s after it, doubling to 30 s).
func (c *Controller) fenced(node string) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.cc.LeaseTTL)
	inc, ok, member, err := c.store.Incarnation(ctx, node)
	cancel()
	switch {
	case err != nil:
		return err
	case !ok:
		return nil
	case member:
		return fmt.Errorf("controller: node %s is a member again", node)
	}
	c.fenceMu.Lock()
	defer c.fenceMu.Unlock()
	tries := 1
	if j := c.fences[node]; j != nil && j.rev == inc.Rev {
		select {
		case <-j.done:
		default:
			return errFencing
		}
		if j.killed { // fenced; only the record's deletion failed
			return c.markFenced(inc)
		}
		// A failed fence is tried again after 1 s, doubling to 30 s: an
		// agent's power API is not hammered.
		if time.Since(j.ended) < min(30*time.Second, time.Second<<min(j.tries-1, 5)) {
			return j.err
		}
		tries = j.tries + 1
	}
	j := &fenceJob{rev: inc.Rev, done: make(chan struct{}), tries: tries}
	c.fences[node] = j
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		fctx, cancel := context.WithTimeout(c.ctx, c.cc.FenceTimeout)
		_, err := c.runFence(fctx, node, inc)
		cancel()
		j.killed = err == nil
		if err == nil {
			err = c.markFenced(inc)
		}
		j.err, j.ended = err, time.Now()
		close(j.done)
		c.wake()
	}()
	return errFencing
}
