package ownership

import (
	"fmt"
	"strings"
)

// Crash loops. A controller that keeps failing (a firmware fault that
// recurs, a power supply that cuts out) must not pull its LUNs back after
// each restart: every failback puts the hosts' I/O on it just in time
// for its next crash, so each crash hits them again. A node that went
// down CrashCount times within CrashWindow is unstable: no automatic
// failback to it (nor balance or shipping onto it) until it has been up
// without a break for CrashStable, or the operator clears Node Unstable.
// Failover off it is never held back.

// unstable: the node has failed CrashCount times within CrashWindow and
// has not been up without a break for CrashStable since.
func (c *Core) unstable(name string) bool {
	n := c.nodes[name]
	return n != nil && n.unstable
}

// noteFailure records a node going down; the CrashCount-th failure within
// the window makes it unstable.
func (c *Core) noteFailure(n *node) {
	n.failures = append(n.failures, c.now)
	c.pruneFailures(n)
	if c.cfg.CrashCount > 0 && len(n.failures) >= c.cfg.CrashCount && !n.unstable {
		n.unstable, n.unstableAt = true, c.now
	}
}

func (c *Core) pruneFailures(n *node) {
	recent := n.failures[:0]
	for _, t := range n.failures {
		if c.now-t < c.cfg.CrashWindow {
			recent = append(recent, t)
		}
	}
	n.failures = recent
}

// trackCrashes forgets failures older than the window; an unstable node
// that has been up for CrashStable is stable again.
func (c *Core) trackCrashes() {
	for _, name := range c.nodeNames {
		n := c.nodes[name]
		c.pruneFailures(n)
		if n.unstable && n.up && c.now-n.upSince >= c.cfg.CrashStable {
			n.unstable = false
		}
	}
}

// stableNodes drops the unstable nodes from a list of destinations.
func (c *Core) stableNodes(nodes []string) []string {
	out := nodes[:0:0]
	for _, n := range nodes {
		if !c.unstable(n) {
			out = append(out, n)
		}
	}
	return out
}

// unstableCause says why a node is held: its failures and what waits.
func (c *Core) unstableCause(name string) string {
	n := c.nodes[name]
	var at []string
	for _, t := range n.failures {
		at = append(at, fmt.Sprint(t))
	}
	var held []string
	for _, id := range c.lunIDs {
		if l := c.luns[id]; l.preferred == name && l.owner != name {
			held = append(held, fmt.Sprint(id))
		}
	}
	cause := fmt.Sprintf("node %s has been failing again and again since tick %d (%d failures within the last %s",
		name, n.unstableAt, len(n.failures), c.span(c.cfg.CrashWindow))
	if len(at) > 0 {
		cause += ", at ticks " + strings.Join(at, ", ")
	}
	cause += fmt.Sprintf("): no automatic failback to it, nor balance or shipping onto it, until it has been up "+
		"without a break for %s or this report is cleared", c.span(c.cfg.CrashStable))
	if len(held) > 0 {
		cause += "; LUNs held off it: " + strings.Join(held, ", ")
	}
	return cause
}
