package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/state"
)

func serve(args []string) error {
	sv, err := startServe(args)
	if err != nil || sv == nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s := <-sig
	sv.log.Info("stopping", "signal", s.String())
	if err := sv.stop(); err != nil {
		return err
	}
	sv.log.Info("stopped; data flushed")
	return nil
}

// serving is a started 'aluad serve'.
type serving struct {
	d     *daemon.Daemon
	log   *slog.Logger
	claim *state.Claim
	stop  func() error
}

// startServe parses serve's flags, claims the data (and state) directory,
// and starts the array. A start that fails leaves the directories as it
// found them; on a directory another aluad holds it fails before
// anything is read or created there.
func startServe(args []string) (*serving, error) {
	fs := newFlags("serve")
	cfgPath := fs.String("config", "", "YAML config file (default: the embedded 2-node array)")
	data := fs.String("data", "", "directory for LUN backing files (overrides the config's data:)")
	target := fs.String("target", "", "iSCSI target name (overrides the config's target:)")
	fabric := fs.String("fabric", "", "front end: iscsi (the embedded pure-Go target) or tcmu (LIO + target_core_user; overrides the config's fabric.kind)")
	verbose := fs.Bool("v", false, "debug logging")
	nop := fs.Duration("nop-interval", 15*time.Second, "send NOP-In pings to idle initiators at this interval; unanswered for twice that, the connection is closed (0: off)")
	grace := fs.Duration("grace", 10*time.Second, "how long in-flight commands may run at shutdown")
	control := fs.String("control", "", "control socket path (default: <data>/aluad.sock; \"off\" for none)")
	stats := fs.Duration("stats-interval", time.Second, "emit per-nexus I/O events at this interval")
	apiFlag := fs.String("api", api.DefaultAPI, "management API, /metrics and dashboard address (\"off\" for none; beyond loopback it needs a token)")
	tokenFile := fs.String("api-token-file", "", "file holding the API's bearer token (env ALUAD_API_TOKEN holds the token itself)")
	stateDir := fs.String("state", "", "directory for the state that survives restarts (owners, LUN map, report history) and the audit log (default: <data>/state; \"off\" for none)")
	profiles := fs.Bool("pprof", false, "serve Go's runtime profiles (CPU, heap, allocations, goroutines) under /debug/pprof/ on the API")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	cfg := config.Default()
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return nil, err
		}
	}
	if *data != "" {
		cfg.Data = *data
	}
	if *target != "" {
		cfg.Target = *target
	}
	if *fabric != "" {
		cfg.Fabric.Kind = *fabric
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctl := *control
	switch ctl {
	case "":
		ctl = defaultControl(cfg.Data)
	case "off":
		ctl = ""
	}
	if *stats <= 0 {
		return nil, fmt.Errorf("--stats-interval must be positive")
	}
	apiAddr := *apiFlag
	if apiAddr == "off" {
		apiAddr = ""
	}
	token, err := readToken(*tokenFile)
	if err != nil {
		return nil, err
	}
	st := *stateDir
	switch st {
	case "":
		st = filepath.Join(cfg.Data, "state")
	case "off":
		st = ""
	}
	// The API's address is tried before anything else: the array listens
	// for hosts before it binds the API, and a host could have written
	// to a new LUN file by the time a busy API port failed the start.
	if apiAddr != "" {
		ln, err := net.Listen("tcp", apiAddr)
		if err != nil {
			return nil, fmt.Errorf("api: %w", err)
		}
		ln.Close()
	}
	claim, err := state.ClaimDirs(cfg.Data, st)
	if err != nil {
		return nil, err
	}
	d, err := daemon.Start(cfg, daemon.Options{Logger: log, NopInterval: *nop, Control: ctl, StatsInterval: *stats,
		API: apiAddr, APIToken: token, StateDir: st, Profiles: *profiles})
	if err != nil {
		claim.Undo()
		return nil, err
	}
	unpublish := func() {}
	if ctl != "" {
		unpublish = publishLocal(ctl)
	}
	for _, p := range d.Portals() {
		fmt.Printf("portal %s %s %s %s\n", p.Node, p.Port, p.Addr, p.Target)
	}
	if a := d.APIAddr(); a != "" {
		fmt.Printf("api http://%s/ (dashboard), http://%s/metrics, http://%s/v1/status\n", a, a, a)
	}
	log.Info("serving", "nodes", len(d.Array.Nodes), "luns", len(d.Array.LUNs), "data", cfg.Data,
		"alua", cfg.ALUA, "control", ctl, "api", d.APIAddr(), "token", token != "")
	sv := &serving{d: d, log: log, claim: claim}
	sv.stop = func() error {
		defer claim.Release()
		defer unpublish()
		return d.Stop(*grace)
	}
	return sv, nil
}
