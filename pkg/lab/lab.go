// Package lab owns the in-process lab runs: an aluad daemon on loopback,
// emulated multipath hosts over the Go initiator (real iSCSI), a workload
// generator with per-I/O latency recording, fault injection, and the runs
// built from them: the crash check (no acknowledged write lost), the
// transition benchmark (I/O latency through failback and rebalance) and
// the mirroring bandwidth comparison. It drives pkg/daemon from outside,
// as a user's hosts would; nothing here is imported by the array.
package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/daemon"
)

// Env is one running array with its hosts.
type Env struct {
	D     *daemon.Daemon
	Hosts []*Host
	LUNs  []uint64
	dir   string
	log   io.Writer
}

// EnvConfig shapes an Env.
type EnvConfig struct {
	LUNs    int
	LUNSize int64
	Hosts   int
	Mirror  bool
	// Tick is the ownership core's tick; windows scale with it.
	Tick           time.Duration
	FailbackWindow time.Duration
	Cooldown       time.Duration
	PlanInterval   time.Duration
	NodeCapacity   float64
	Penalty        time.Duration
	// Dir holds the LUN files (a temporary directory when empty).
	Dir string
	// Verbose logs the daemon at info level to Log.
	Verbose bool
	Log     io.Writer
}

// Start brings up the array and logs every host in on every path.
func Start(ctx context.Context, ec EnvConfig) (*Env, error) {
	dir := ec.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "aluad-lab-"); err != nil {
			return nil, err
		}
	}
	cfg := array.Loopback(dir, ec.LUNSize)
	cfg.LUNs = cfg.LUNs[:0]
	for i := 0; i < ec.LUNs; i++ {
		cfg.LUNs = append(cfg.LUNs, array.LUNConfig{ID: uint64(i), Size: array.Size(ec.LUNSize),
			Preferred: cfg.Nodes[i%len(cfg.Nodes)].Name, Media: "ram", Group: "dg0"})
	}
	cfg.Cache.Mirror = &ec.Mirror
	cfg.Interlink.Penalty = ec.Penalty
	cfg.Ownership = array.OwnershipConfig{Tick: ec.Tick, FailbackWindow: ec.FailbackWindow, Cooldown: ec.Cooldown,
		PlanInterval: ec.PlanInterval, DiscoveryWindow: 10 * ec.Tick, NodeCapacity: ec.NodeCapacity}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logw := ec.Log
	if logw == nil {
		logw = io.Discard
	}
	level := slog.LevelWarn
	if ec.Verbose {
		level = slog.LevelInfo
	}
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: level}))})
	if err != nil {
		return nil, err
	}
	e := &Env{D: d, dir: dir, log: logw}
	if ec.Dir == "" {
		e.dir = dir
	} else {
		e.dir = ""
	}
	for _, l := range d.Array.LUNs {
		e.LUNs = append(e.LUNs, l.ID)
	}
	for i := 0; i < ec.Hosts; i++ {
		name := fmt.Sprintf("h%d", i+1)
		h, err := NewHost(ctx, name, "iqn.2026-11.org.aluad.lab:"+name, cfg.Target, d.Portals(), e.LUNs)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.Hosts = append(e.Hosts, h)
	}
	return e, nil
}

// Close logs the hosts out, stops the daemon and removes a temporary dir.
func (e *Env) Close() {
	for _, h := range e.Hosts {
		h.Close()
	}
	e.D.Stop(5 * time.Second)
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// WaitOwners polls until every LUN is owned by its preferred node (or want
// returns true), up to limit.
func (e *Env) WaitOwners(limit time.Duration, want func(l *array.LUN) bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ok := true
		for _, l := range e.D.Array.LUNs {
			if !want(l) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// AtPreferred: the LUN is on its preferred owner and not moving.
func AtPreferred(l *array.LUN) bool { return l.Owner() == l.Preferred && !l.Moving() }
