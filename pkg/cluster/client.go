package cluster

import (
	"context"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Client is an etcd client that sends its calls only to the members
// that answer. A member whose process is paused (SIGSTOP, a frozen VM)
// keeps its TCP connections open and answers nothing; etcd's client
// balances calls over every endpoint round robin without a health check,
// and gRPC's keepalive cannot be set below 10 s, so a third of the calls
// would wait out their deadlines there: lease renewals, the leader's
// reads, a takeover's writes. So every member is probed on its own
// connection (a linearizable read, as `etcdctl endpoint health` does: it
// needs the member and a quorum with a leader), and the client's
// endpoints are the members that answered the last probe in time, or all
// of them when none did. A watch on a dropped member's stream would hang
// as well: Dropped wakes the watchers, which read afresh and watch again.
//
// Probes run on the wall clock: they time the network, not the array.
type Client struct {
	*clientv3.Client
	all    []string
	probes []*clientv3.Client
	every  time.Duration
	wait   time.Duration

	mu      sync.Mutex
	healthy []string
	dropped chan struct{} // closed (and replaced) when a member is dropped

	stop chan struct{}
	wg   sync.WaitGroup
}

// Probe timings: how often each member is probed, and how long an
// answer may take (a loaded machine's healthy member answers well
// within it; a frozen one never does).
const (
	ProbeEvery = 250 * time.Millisecond
	ProbeWait  = 750 * time.Millisecond
)

// Dial connects to the etcd members at endpoints and starts probing them.
func Dial(endpoints []string) (*Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	c := &Client{Client: cli, all: slices.Clone(endpoints), every: ProbeEvery, wait: ProbeWait,
		healthy: slices.Clone(endpoints), dropped: make(chan struct{}), stop: make(chan struct{})}
	if len(endpoints) > 1 { // one member: nothing to choose
		for _, ep := range endpoints {
			p, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Logger: zap.NewNop()})
			if err != nil {
				c.Close()
				return nil, err
			}
			c.probes = append(c.probes, p)
		}
		c.wg.Add(1)
		go c.probeLoop()
	}
	return c, nil
}

// Healthy lists the endpoints calls go to now.
func (c *Client) Healthy() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.healthy)
}

// Dropped is closed when a member is next dropped from the endpoints.
func (c *Client) Dropped() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Close stops the probes and closes the client.
func (c *Client) Close() error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
	for _, p := range c.probes {
		p.Close()
	}
	return c.Client.Close()
}

func (c *Client) probeLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		c.use(c.probe())
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// probe asks every member at once and lists those that answered in time.
func (c *Client) probe() []string {
	ok := make([]bool, len(c.probes))
	var wg sync.WaitGroup
	for i, p := range c.probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), c.wait)
			defer cancel()
			_, err := p.Get(ctx, "health")
			ok[i] = err == nil
		}()
	}
	wg.Wait()
	var up []string
	for i, ep := range c.all {
		if ok[i] {
			up = append(up, ep)
		}
	}
	return up
}

// use makes up the client's endpoints (all, if up is empty), and wakes
// the watchers if a member was dropped.
func (c *Client) use(up []string) {
	if len(up) == 0 {
		up = c.all
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if slices.Equal(up, c.healthy) {
		return
	}
	drop := false
	for _, ep := range c.healthy {
		drop = drop || !slices.Contains(up, ep)
	}
	c.healthy = up
	c.Client.SetEndpoints(up...)
	if drop {
		close(c.dropped)
		c.dropped = make(chan struct{})
	}
}
