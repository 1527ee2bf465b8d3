// Package lab owns the in-process lab runs: an aluad daemon on loopback,
// emulated hosts of pkg/hosts (real iSCSI over the Go initiator), a
// workload generator with per-I/O latency recording, fault injection, and
// the runs built from them. The main one runs a scenario file
// (scenario.go; the default is scenarios/default.txt): hosts of several
// multipath stacks under steady load through timed faults, then the same
// with explicit ALUA and hosts that drive ownership by STPG; it measures
// per event the worst I/O, the longest stall, ownership moves, thrash and
// how long each host took to follow, and writes a table, JSON, an SVG
// chart and an HTML report. The others are the crash check (no
// acknowledged write lost), the transition benchmark and the mirroring
// comparison. It drives pkg/daemon from outside, as a user's hosts would;
// nothing here is imported by the array.
package lab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/hosts"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/units"
)

// Env is one running array with its hosts.
type Env struct {
	D     *daemon.Daemon
	Hosts []*hosts.Host
	// IQN maps a host name to its initiator name.
	IQN  map[string]string
	LUNs []uint64
	dir  string
	log  io.Writer
}

// EnvConfig shapes an Env.
type EnvConfig struct {
	LUNs    int
	LUNSize int64
	// Hosts is the number of quick ALUA followers (QuickFollower) when
	// Stacks is empty; Stacks declares hosts with their personalities.
	Hosts  int
	Stacks []HostSpec
	ALUA   string // implicit (default) or explicit
	Mirror bool
	// Tick is the ownership core's tick; windows scale with it.
	Tick           time.Duration
	FailbackWindow time.Duration
	// FailbackCooldown: no failback within this long of a move (the
	// failback window when zero). StressWindow: how long stress must
	// hold before a balance move (1 s when zero: lab runs are short).
	FailbackCooldown time.Duration
	StressWindow     time.Duration
	Cooldown         time.Duration
	PlanInterval     time.Duration
	ShipWindow       time.Duration
	NodeCapacity     float64
	Penalty          time.Duration
	// NoCrashHold turns the core's crash-loop hold off (runs that crash a
	// node on purpose again and again and want each failback).
	NoCrashHold bool
	// Dir holds the LUN files (a temporary directory when empty).
	Dir string
	// Verbose logs the daemon at info level to Log.
	Verbose bool
	Log     io.Writer
	// Control, when set, is where the daemon's control socket listens
	// (for runs that drive the array through its API, as aluad qualify).
	Control string
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
	cfg := config.Loopback(dir, ec.LUNSize)
	cfg.LUNs = cfg.LUNs[:0]
	for i := 0; i < ec.LUNs; i++ {
		cfg.LUNs = append(cfg.LUNs, array.LUNConfig{ID: uint64(i), Size: units.Size(ec.LUNSize),
			Preferred: cfg.Nodes[i%len(cfg.Nodes)].Name, Media: "ram", Group: "dg0"})
	}
	cfg.Cache.Mirror = &ec.Mirror
	cfg.Interlink.Penalty = ec.Penalty
	fbc, sw := ec.FailbackCooldown, ec.StressWindow
	if fbc <= 0 {
		fbc = ec.FailbackWindow
	}
	if sw <= 0 {
		sw = time.Second
	}
	cfg.Ownership = control.Config{Tick: ec.Tick, FailbackWindow: ec.FailbackWindow, Cooldown: ec.Cooldown,
		PlanInterval: ec.PlanInterval, DiscoveryWindow: 10 * ec.Tick, NodeCapacity: ec.NodeCapacity, ShipWindow: ec.ShipWindow,
		FailbackCooldown: fbc, StressWindow: sw}
	if ec.NoCrashHold {
		cfg.Ownership.CrashCount = -1
	}
	if ec.ALUA != "" {
		cfg.ALUA = ec.ALUA
	}
	// The hosts of a stack are declared with their host type, as an
	// administrator does; the quick followers stay undeclared (default).
	for _, hs := range ec.Stacks {
		if hs.Stack != "" && hs.Type != "" {
			cfg.Hosts = append(cfg.Hosts, array.HostConfig{Name: hs.Name, Type: hs.Type, Initiators: []string{labIQN(hs.Name)}})
		}
	}
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
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: level})),
		Control: ec.Control})
	if err != nil {
		return nil, err
	}
	e := &Env{D: d, dir: dir, log: logw, IQN: map[string]string{}}
	if ec.Dir == "" {
		e.dir = dir
	} else {
		e.dir = ""
	}
	for _, l := range d.Array.LUNs {
		e.LUNs = append(e.LUNs, l.ID)
	}
	specs := ec.Stacks
	for i := 0; len(ec.Stacks) == 0 && i < ec.Hosts; i++ {
		specs = append(specs, HostSpec{Name: fmt.Sprintf("h%d", i+1)})
	}
	for i, hs := range specs {
		p := QuickFollower()
		if hs.Stack != "" {
			if p, err = hosts.Lookup(hs.Stack, hs.Opts); err != nil {
				e.Close()
				return nil, err
			}
		}
		iqn := labIQN(hs.Name)
		h, err := hosts.New(ctx, hs.Name, p, pathSpecs(hs.Name, iqn, byte(i+1), d.Portals(), p), e.LUNs)
		if err != nil {
			e.Close()
			return nil, err
		}
		e.Hosts = append(e.Hosts, h)
		e.IQN[hs.Name] = iqn
	}
	return e, nil
}

// labIQN is a lab host's initiator name.
func labIQN(host string) string { return "iqn.2026-11.org.aluad.lab:" + host }

// QuickFollower is the lab's stand-in host for runs about the array
// rather than the host (crash check, transition and mirroring runs): the
// MSDSM behaviour (follows a UA at once) with a 10 ms retry and a 50 ms
// path checker. It is not a real stack; pkg/hosts has those.
func QuickFollower() hosts.Personality {
	p := hosts.WindowsMSDSM()
	p.Name = "quick-follower"
	p.RetryEvery, p.CheckEvery, p.MaxCheckEvery = 10*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	p.NoPathRetry = hosts.QueueForever
	return p
}

// pathSpecs gives a host one path per target port, with its stack's
// connection ping.
func pathSpecs(name, iqn string, hostNo byte, portals []api.PortalInfo, p hosts.Personality) []hosts.PathSpec {
	var out []hosts.PathSpec
	for i, pi := range portals {
		cfg := initiator.Config{Addr: pi.Addr, Target: pi.Target, InitiatorName: iqn,
			ISID: [6]byte{0x80, 0, 0, 0, hostNo, byte(i + 1)}, DialTimeout: time.Second,
			NopInterval: p.NopInterval, NopTimeout: p.NopTimeout}
		out = append(out, hosts.PathSpec{Name: name + ":" + pi.Port, Node: pi.Node, RelID: pi.RelativeID,
			Dial: hosts.SessionDialer(cfg)})
	}
	return out
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
