package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/controller"
	"github.com/aluad/aluad/pkg/daemon"
)

// controllerCmd runs one controller of a cluster as its own process
// (docs/cluster.md): every controller reads the same configuration file,
// with its cluster section, and names the node it runs.
func controllerCmd(args []string) error {
	fs := newFlags("controller")
	cfgPath := fs.String("config", "", "the array's YAML configuration with its cluster section (required; the same file for every controller)")
	node := fs.String("node", "", "the node this process runs (required)")
	etcdData := fs.String("etcd-data", "", "run an etcd member in this process, with its data here (default: none; use the cluster's etcd URLs)")
	etcdName := fs.String("etcd-name", "", "the member's name in the etcd cluster (default: the node's)")
	clientURL := fs.String("etcd-client-url", "http://127.0.0.1:2379", "where clients reach the member")
	peerURL := fs.String("etcd-peer-url", "http://127.0.0.1:2380", "where the other members reach the member")
	members := fs.String("etcd-cluster", "", "every member as NAME=PEER-URL,... (default: this one alone)")
	existing := fs.Bool("etcd-existing", false, "join an etcd cluster that runs already instead of founding one")
	wait := fs.Duration("join-timeout", time.Minute, "how long to wait for etcd's quorum and for a previous incarnation's lease to end")
	nop := fs.Duration("nop-interval", 15*time.Second, "NOP-In pings to idle initiators at this interval (0: off)")
	grace := fs.Duration("grace", 10*time.Second, "how long in-flight commands may run at shutdown")
	control := fs.String("control", "", "control socket path (default: none)")
	heartbeat, election := raftFlags(fs, "etcd-")
	apiAddr := fs.String("api", "", "management API, /metrics and dashboard address (default: none; beyond loopback it needs a token)")
	tokenFile := fs.String("api-token-file", "", "file holding the API's bearer token (env ALUAD_API_TOKEN holds the token itself)")
	verbose := fs.Bool("v", false, "debug logging")
	if err := parse(fs, args); err != nil {
		return err
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		return err
	}
	if *cfgPath == "" || *node == "" {
		return fmt.Errorf("controller: --config and --node are required")
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	o := controller.Options{Config: cfg, Node: *node, JoinTimeout: *wait,
		Daemon: daemon.Options{Logger: log, NopInterval: *nop, Control: *control, API: *apiAddr, APIToken: token}}
	if *etcdData != "" {
		name := *etcdName
		if name == "" {
			name = *node
		}
		o.Member = &cluster.MemberConfig{Name: name, Dir: *etcdData, ClientURL: *clientURL, PeerURL: *peerURL,
			Cluster: *members, Existing: *existing, Heartbeat: *heartbeat, Election: *election}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	c, err := controller.Start(o)
	if err != nil {
		return err
	}
	for _, p := range c.D.Portals() {
		if p.Node == *node {
			fmt.Printf("portal %s %s %s %s\n", p.Node, p.Port, p.Addr, p.Target)
		}
	}
	select {
	case s := <-sig:
		log.Info("stopping", "signal", s.String())
	case <-c.Err():
		c.Stop(*grace)
		return c.Error()
	}
	if err := c.Stop(*grace); err != nil {
		return err
	}
	log.Info("stopped; data flushed, lease revoked")
	return nil
}
