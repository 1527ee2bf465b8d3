package cluster

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"time"
)

// Config is the cluster section of the configuration file: present, it
// makes each controller a process of its own (`aluad controller`).
type Config struct {
	// Etcd lists the client URLs of the etcd cluster the controllers use
	// (members they run themselves, witnesses, or an existing cluster).
	Etcd []string `yaml:"etcd"`
	// Interlink maps every node to the address its interlink listens on.
	Interlink map[string]string `yaml:"interlink"`
	// LeaseTTL is how long a controller that stopped renewing its lease
	// stays a member for the others: the failover's main cost (whole
	// seconds, default 2s).
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// FailbackAfter is, with the ownership core off, how long a
	// preferred owner must have been back before its LUNs fail back to it
	// (with the core on, its failback window decides, from the hosts); and
	// with two lease TTLs, how long a controller that never served may
	// take to start before its partner takes its LUNs over (default 2s).
	FailbackAfter time.Duration `yaml:"failback_after"`
	// Fencing is how a survivor makes sure a controller whose lease ran
	// out never writes again before it takes that controller's LUNs:
	// "process" (every controller on one machine: SIGKILL through a
	// pidfd, and a wait for the exit; the default when every interlink
	// address is a loopback one), "command" (FenceCommand, a fence agent,
	// for controllers on several machines) or "none" (no fencing: a
	// controller paused past its lease may write over a survivor's newer
	// data; only when asked for).
	Fencing string `yaml:"fencing"`
	// FenceCommand is the fence agent and its arguments, "{node}",
	// "{host}" and "{pid}" replaced by the fenced controller's; exit
	// status 0 means fenced (fencing: command).
	FenceCommand []string `yaml:"fence_command"`
	// FenceTimeout bounds one fence: the wait for a killed process to
	// exit, or a fence agent's run (default 60s; a power fence may take
	// tens of seconds). Until a fence succeeds, the node's LUNs wait.
	FenceTimeout time.Duration `yaml:"fence_timeout"`
	// InterlinkTimeout is how long a controller's interlink peer may send
	// nothing (no frame, no heartbeat) before its connection is ended as
	// silent and redialled (default lease_ttl/4; heartbeats go every
	// quarter of it). A machine that pauses its controllers for seconds
	// (VMs under emulation) needs it longer; at most half the lease (a
	// silent link must end before a write's wait for its mirror copy,
	// one lease, gives up).
	InterlinkTimeout time.Duration `yaml:"interlink_timeout"`
}

// The fencing methods.
const (
	FenceProcess = "process"
	FenceCommand = "command"
	FenceNone    = "none"
)

// On reports whether the section is there.
func (c Config) On() bool { return len(c.Etcd) > 0 || len(c.Interlink) > 0 }

// Defaults for the section's zero fields.
const (
	DefaultLeaseTTL      = 2 * time.Second
	DefaultFailbackAfter = 2 * time.Second
	DefaultFenceTimeout  = time.Minute
)

// Validate fills the defaults and checks the section against the nodes
// of the array.
func (c *Config) Validate(nodes []string) error {
	if !c.On() {
		return nil
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.FailbackAfter == 0 {
		c.FailbackAfter = DefaultFailbackAfter
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		return fmt.Errorf("cluster.lease_ttl: %v is not a whole number of seconds of at least 1s (etcd grants leases in seconds)", c.LeaseTTL)
	}
	if c.FenceTimeout == 0 {
		c.FenceTimeout = DefaultFenceTimeout
	}
	if c.FenceTimeout < time.Second {
		return fmt.Errorf("cluster.fence_timeout: %v is under 1s", c.FenceTimeout)
	}
	if c.InterlinkTimeout == 0 {
		c.InterlinkTimeout = c.LeaseTTL / 4
	}
	if c.InterlinkTimeout < 100*time.Millisecond || c.InterlinkTimeout > c.LeaseTTL/2 {
		return fmt.Errorf("cluster.interlink_timeout: %v is outside 100ms..lease_ttl/2 (%v)", c.InterlinkTimeout, c.LeaseTTL/2)
	}
	if c.FailbackAfter < 0 {
		return fmt.Errorf("cluster.failback_after: %v is negative", c.FailbackAfter)
	}
	if len(c.Etcd) == 0 {
		return fmt.Errorf("cluster.etcd: no etcd client URL (the members the controllers run, witnesses, or an existing cluster)")
	}
	for _, e := range c.Etcd {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return fmt.Errorf("cluster.etcd: %q is not an http(s)://host:port URL", e)
		}
	}
	if err := c.validateFencing(); err != nil {
		return err
	}
	if len(nodes) < 2 {
		// (a controller's mirror copies are on another one)
		return fmt.Errorf("cluster: %d node; controllers as processes run two or more", len(nodes))
	}
	known := map[string]bool{}
	for _, n := range nodes {
		known[n] = true
		addr, ok := c.Interlink[n]
		if !ok {
			return fmt.Errorf("cluster.interlink: node %s has no interlink address", n)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("cluster.interlink: node %s: %q is not host:port", n, addr)
		}
	}
	var extra []string
	for n := range c.Interlink {
		if !known[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return fmt.Errorf("cluster.interlink: no node %q in the array", extra[0])
	}
	return nil
}

// validateFencing picks the default method and checks the choice against
// the layout: process fencing reaches only processes on this machine.
func (c *Config) validateFencing() error {
	local := true
	for _, addr := range c.Interlink {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil // reported with the interlink's checks
		}
		ip := net.ParseIP(host)
		local = local && (host == "localhost" || (ip != nil && ip.IsLoopback()))
	}
	if c.Fencing == "" {
		switch {
		case len(c.FenceCommand) > 0:
			c.Fencing = FenceCommand
		case local:
			c.Fencing = FenceProcess
		default:
			return fmt.Errorf("cluster.fencing: the controllers' interlink addresses are not all loopback ones, so they may run " +
				"on several machines, where a survivor cannot kill a paused controller's process: set cluster.fence_command " +
				"to a fence agent, or fencing: process if they all run on one machine, or fencing: none to accept that a " +
				"paused controller may write over newer data")
		}
	}
	switch c.Fencing {
	case FenceProcess, FenceNone:
		if len(c.FenceCommand) > 0 {
			return fmt.Errorf("cluster.fence_command: set, but cluster.fencing is %q (want command)", c.Fencing)
		}
	case FenceCommand:
		if len(c.FenceCommand) == 0 || c.FenceCommand[0] == "" {
			return fmt.Errorf("cluster.fencing: command, but cluster.fence_command names no fence agent")
		}
	default:
		return fmt.Errorf("cluster.fencing: %q; want process, command or none", c.Fencing)
	}
	return nil
}
