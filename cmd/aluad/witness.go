package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aluad/aluad/pkg/cluster"
)

// witnessCmd runs an etcd member with no controller: the third vote two
// controllers need for a quorum (docs/cluster.md).
func witnessCmd(args []string) error {
	fs := newFlags("witness")
	name := fs.String("name", "witness", "the member's name in the etcd cluster")
	data := fs.String("data", "aluad-witness", "the member's data directory")
	clientURL := fs.String("client-url", "http://127.0.0.1:2379", "where clients (the controllers) reach it")
	peerURL := fs.String("peer-url", "http://127.0.0.1:2380", "where the other members reach it")
	members := fs.String("cluster", "", "every member as NAME=PEER-URL,... (default: this one alone)")
	existing := fs.Bool("existing", false, "join a cluster that runs already (after etcdctl member add) instead of founding one")
	wait := fs.Duration("join-timeout", time.Minute, "how long to wait for the other members to form a quorum")
	heartbeat, election := raftFlags(fs, "")
	if err := parse(fs, args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("witness starting: waiting for a quorum", "name", *name, "cluster", *members)
	m, err := cluster.StartMember(cluster.MemberConfig{Name: *name, Dir: *data, ClientURL: *clientURL, PeerURL: *peerURL,
		Cluster: *members, Existing: *existing, Heartbeat: *heartbeat, Election: *election}, *wait)
	if err != nil {
		return err
	}
	defer m.Close()
	log.Info("witness serving", "name", *name, "clients", *clientURL, "peers", *peerURL, "data", *data)
	select {
	case <-ctx.Done():
		log.Info("witness stopping", "name", *name)
	case err := <-m.Err():
		return fmt.Errorf("etcd member %s: %w", *name, err)
	}
	return nil
}

// raftFlags adds etcd's Raft timings (its --heartbeat-interval and
// --election-timeout; give every member the same): slow or loaded
// machines, such as VMs under emulation, need longer ones than etcd's
// defaults, and the cluster's lease_ttl at least 1.5 election timeouts.
func raftFlags(fs *flag.FlagSet, prefix string) (heartbeat, election *time.Duration) {
	heartbeat = fs.Duration(prefix+"heartbeat", 0, "the etcd member's Raft heartbeat interval (default: etcd's, 100ms)")
	election = fs.Duration(prefix+"election", 0, "the etcd member's election timeout (default: etcd's, 1s)")
	return heartbeat, election
}
