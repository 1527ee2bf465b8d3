package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// MemberConfig is one embedded etcd member: a controller's own, or a
// witness's (a member with no controller, the third vote two controllers
// need for a quorum).
type MemberConfig struct {
	// Name is the member's name in the etcd cluster (the node's name, or
	// "witness").
	Name string
	// Dir holds its data (the write-ahead log and snapshots).
	Dir string
	// ClientURL and PeerURL are where it listens for clients and for the
	// other members, as http://host:port.
	ClientURL, PeerURL string
	// Cluster lists every member as name=peerURL, comma separated (empty:
	// this member alone).
	Cluster string
	// Existing joins a cluster that already runs instead of founding one.
	Existing bool
	// Token names the cluster (default "aluad"), so members of two
	// clusters never mix.
	Token string
	// Heartbeat and Election are etcd's Raft timings (default 100 ms and
	// 1 s, etcd's own).
	Heartbeat, Election time.Duration
	// LogLevel is etcd's own log level on stderr (default "error";
	// "fatal" keeps it quiet, as tests do).
	LogLevel string
}

// Member is a running embedded etcd member.
type Member struct {
	etcd *embed.Etcd
	cfg  MemberConfig
	once sync.Once
}

// StartMember starts an embedded member and waits until it has joined a
// cluster with a leader, or until timeout.
func StartMember(c MemberConfig, timeout time.Duration) (*Member, error) {
	if c.Name == "" || c.Dir == "" {
		return nil, errors.New("cluster: an etcd member needs a name and a data directory")
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = c.Name, c.Dir
	cfg.Logger, cfg.LogLevel = "zap", "error"
	if c.LogLevel != "" {
		cfg.LogLevel = c.LogLevel
	}
	cu, err := parseURL("client", c.ClientURL)
	if err != nil {
		return nil, err
	}
	pu, err := parseURL("peer", c.PeerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = c.Cluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = c.Name + "=" + c.PeerURL
	}
	if c.Existing {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.InitialClusterToken = "aluad"
	if c.Token != "" {
		cfg.InitialClusterToken = c.Token
	}
	if c.Heartbeat > 0 {
		cfg.TickMs = uint(c.Heartbeat / time.Millisecond)
	}
	if c.Election > 0 {
		cfg.ElectionMs = uint(c.Election / time.Millisecond)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd member %s: %w", c.Name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("cluster: etcd member %s: %w", c.Name, err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("cluster: etcd member %s: no quorum within %v (are the other members of %q up?)",
			c.Name, timeout, cfg.InitialCluster)
	}
	return &Member{etcd: e, cfg: c}, nil
}

// Err reports a failure of the running member.
func (m *Member) Err() <-chan error { return m.etcd.Err() }

// ClientURL is where clients reach the member.
func (m *Member) ClientURL() string { return m.cfg.ClientURL }

// Close stops the member (once; again is nothing).
func (m *Member) Close() { m.once.Do(m.etcd.Close) }

func parseURL(what, s string) (url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || !strings.HasPrefix(u.Scheme, "http") {
		return url.URL{}, fmt.Errorf("cluster: %s URL %q: want http://host:port", what, s)
	}
	return *u, nil
}

// HandOffLeadership moves the Raft leadership of the etcd cluster away
// from this member, to a member keep accepts (a witness), if this member
// leads. A controller's member should not lead: when the leader's process
// is killed, etcd elects a new leader and renews every lease a full TTL,
// the dead controller's too, so its failover waits an election and a
// second TTL. It reports whether it moved the leadership.
func (m *Member) HandOffLeadership(ctx context.Context, keep func(name string) bool) (bool, error) {
	srv := m.etcd.Server
	if srv.Leader() != srv.MemberID() {
		return false, nil
	}
	for _, mb := range srv.Cluster().Members() {
		if mb.ID != srv.MemberID() && !mb.IsLearner && keep(mb.Name) {
			if err := srv.MoveLeader(ctx, uint64(srv.MemberID()), uint64(mb.ID)); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	return false, nil
}
