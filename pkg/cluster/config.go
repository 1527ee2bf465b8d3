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
}

// On reports whether the section is there.
func (c Config) On() bool { return len(c.Etcd) > 0 || len(c.Interlink) > 0 }

// Defaults for the section's zero fields.
const (
	DefaultLeaseTTL      = 2 * time.Second
	DefaultFailbackAfter = 2 * time.Second
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
	if len(nodes) != 2 {
		// The holder of a controller's mirror copies is its one partner;
		// with three or more, which node holds them must be recorded
		// before the leader can pick the takeover's target.
		return fmt.Errorf("cluster: %d nodes; controllers as processes run two (a witness is the third etcd member)", len(nodes))
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
