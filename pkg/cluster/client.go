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
// of them when none did (members). A watch on a dropped member's stream
// would hang as well: Dropped wakes the watchers, which read afresh and
// watch again.
//
// Probes run on the wall clock: they time the network, not the array.
type Client struct {
	*clientv3.Client
	*members
	probes []*clientv3.Client
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
	c := &Client{Client: cli}
	c.members = newMembers(endpoints, func(up []string) { c.Client.SetEndpoints(up...) })
	if len(endpoints) > 1 { // one member: nothing to choose
		for _, ep := range endpoints {
			p, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, Logger: zap.NewNop()})
			if err != nil {
				c.Close()
				return nil, err
			}
			c.probes = append(c.probes, p)
		}
		c.start(func(ctx context.Context, i int) error {
			_, err := c.probes[i].Get(ctx, "health")
			return err
		})
	}
	return c, nil
}

// Close stops the probes and closes the client.
func (c *Client) Close() error {
	c.members.close()
	for _, p := range c.probes {
		p.Close()
	}
	return c.Client.Close()
}

// members keeps a client's calls on the etcd members that answer: it
// probes each one every ProbeEvery, on its own connection, and the
// endpoints are those that answered the last probe within ProbeWait, or
// all when none did. Client uses it for etcd's client, Balanced for a
// Backend per member (the simulation's).
type members struct {
	all   []string
	every time.Duration
	wait  time.Duration
	set   func(up []string) // the endpoints calls go to now

	mu      sync.Mutex
	healthy []string
	dropped chan struct{} // closed (and replaced) when a member is dropped

	stop chan struct{}
	wg   sync.WaitGroup
}

func newMembers(endpoints []string, set func(up []string)) *members {
	return &members{all: slices.Clone(endpoints), every: ProbeEvery, wait: ProbeWait, set: set,
		healthy: slices.Clone(endpoints), dropped: make(chan struct{}), stop: make(chan struct{})}
}

// start probes every member (probe asks member i once) until close.
func (m *members) start(probe func(ctx context.Context, i int) error) {
	m.wg.Add(1)
	go m.probeLoop(probe)
}

func (m *members) close() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	m.wg.Wait()
}

// Healthy lists the endpoints calls go to now.
func (m *members) Healthy() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.healthy)
}

// Dropped is closed when a member is next dropped from the endpoints.
func (m *members) Dropped() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dropped
}

func (m *members) probeLoop(probe func(ctx context.Context, i int) error) {
	defer m.wg.Done()
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		m.use(m.probe(probe))
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
	}
}

// probe asks every member at once and lists those that answered in time.
func (m *members) probe(probe func(ctx context.Context, i int) error) []string {
	ok := make([]bool, len(m.all))
	var wg sync.WaitGroup
	for i := range m.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), m.wait)
			defer cancel()
			ok[i] = probe(ctx, i) == nil
		}()
	}
	wg.Wait()
	var up []string
	for i, ep := range m.all {
		if ok[i] {
			up = append(up, ep)
		}
	}
	return up
}

// use makes up the client's endpoints (all, if up is empty), and wakes
// the watchers if a member was dropped.
func (m *members) use(up []string) {
	if len(up) == 0 {
		up = m.all
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Equal(up, m.healthy) {
		return
	}
	drop := false
	for _, ep := range m.healthy {
		drop = drop || !slices.Contains(up, ep)
	}
	m.healthy = up
	m.set(up)
	if drop {
		close(m.dropped)
		m.dropped = make(chan struct{})
	}
}
