// Package daemon wires one running aluad: the array (nodes, ports, LUNs),
// the SCSI device server over it with the array's ALUA view, the front end
// hosts reach it through (the pure-Go iSCSI target or LIO over TCMU), the
// control path (pkg/control) and the management surface (the control
// socket and HTTP API, metrics, audit, saved state). It owns start-up
// order and graceful shutdown (in-flight commands finish, data is
// flushed). The protocols live in their own packages.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/arrayview"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/media"
	"github.com/aluad/aluad/pkg/mgmt"
	"github.com/aluad/aluad/pkg/scsi"
	"github.com/aluad/aluad/pkg/state"
	tcmu "github.com/aluad/aluad/tcmu-handler"
)

// The array's LUNs hold writes a move's stop holds, asking the device
// server whether the task is still live (a signature drift would make the
// device server skip the check silently).
var _ scsi.GuardedBackend = (*array.LUN)(nil)

// Daemon is a running array with its fabric. Its views (status, hosts,
// paths, reports...) are the management surface's (mgmt.View).
type Daemon struct {
	*mgmt.View
	Array *array.Array
	SCSI  *scsi.Server
	// Target is the pure-Go iSCSI target (nil with the TCMU fabric).
	Target *iscsi.Target
	// TCMU is the LIO/TCMU front end (nil with the pure-Go target).
	TCMU *tcmu.Frontend
	// fabric is whichever of the two runs, fabricCfg its section.
	fabric    Fabric
	fabricCfg fabric.Config
	aluaHook  atomic.Pointer[aluaHook]
	// Events is the feed of logins, logouts, RTPGs, I/O intervals and
	// ALUA changes.
	Events  *api.EventLog
	log     *slog.Logger
	clock   clock.Clock
	now     func() time.Time
	control *mgmt.ControlServer
	api     *mgmt.APIServer
	done    chan struct{}
	wg      sync.WaitGroup
	// hostMu orders changes of the declared hosts (hosts.go).
	hostMu sync.Mutex
	// cfg is the configuration it started with (RunningConfig adds what
	// changed live).
	cfg config.Config

	metrics *mgmt.Metrics

	// ctl is the control path: the observers, the ownership core (once
	// started, unless the config turns it off) and the UAs of changes.
	ctl    *control.Path
	mover  func(ids []uint64, to string, cause alua.Cause) (array.Change, error)
	faults func(api.Fault) (bool, error)
	// state saves what survives a restart (nil: no state directory).
	state *state.Store
	// audit records state-changing management calls.
	audit *mgmt.Audit
}

// Options tune the daemon.
type Options struct {
	Logger *slog.Logger
	// NopInterval enables target NOP-In keepalives (0 disables).
	NopInterval time.Duration
	// Control is the path of the control socket (aluad move, luns,
	// events); empty serves none.
	Control string
	// API is the TCP address of the management API, /metrics and the
	// dashboard (empty: none). An address other than loopback needs
	// APIToken, a bearer token every API call must carry then.
	API      string
	APIToken string
	// Profiles serves Go's runtime profiles under /debug/pprof/ on the API.
	Profiles bool
	// StatsInterval is how often io events are emitted (0: 1s; <0: never).
	StatsInterval time.Duration
	// OnEvent receives every event as it is added; it must not block.
	OnEvent func(api.Event)
	// Clock paces the core's ticks, the stats interval, the target's
	// keepalives and the caches' destagers, and stamps events and
	// sessions (nil: the real one). With a fake clock a test's Advance
	// waits for each loop to take its tick: a destager held in a media
	// write holds it, and a keepalive judges the hosts' answers by fake
	// time. Sleep is the array's wait for a simulated latency (nil: a
	// real wait).
	Clock clock.Clock
	Sleep func(time.Duration)
	// EventCapacity is how many events the log keeps (0: 16384).
	EventCapacity int
	// TCMUOptions adjusts the TCMU front end's options before it starts
	// (tests: an in-memory configfs and fake mapped regions).
	TCMUOptions func(*tcmu.Options)
	// WrapStore wraps each LUN's media store (fault injection).
	WrapStore func(lun uint64, s media.Store) media.Store
	// Listen opens the iSCSI target's portals (nil: net.Listen; tests run
	// a daemon on an in-memory network, pkg/memnet, inside a
	// testing/synctest bubble).
	Listen func(network, addr string) (net.Listener, error)
	// Local and Remote run the daemon as one controller of a cluster
	// (pkg/controller): the array serves Local's node only and reaches the
	// others through Remote; the target listens on Local's ports only.
	Local  string
	Remote array.Remote
	// Observed and Mover make the ownership core a cluster's: every
	// observation of the hosts goes to Observed (the elected leader's core
	// gets them; Ctl starts it there), and an operator's move to Mover.
	Observed func(ownership.Event)
	Mover    func(ids []uint64, to string, cause alua.Cause) (array.Change, error)
	// NoCore says why the core does not run here (a controller that does
	// not lead), for the queries that need it.
	NoCore func() error
	// Faults, when set, takes the faults it handles (handled: a
	// controller's interlink, its refusal of a node fault) before the
	// array's own.
	Faults func(api.Fault) (handled bool, err error)
	// StateDir keeps the state that survives a restart (owners, LUN map,
	// report history) and the audit log; empty keeps none.
	StateDir string
}

// New builds the array and its device server with ALUA, without any
// network: what Start serves, and what scenario tests drive directly.
func New(cfg config.Config, opt Options) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Clock == nil {
		opt.Clock = clock.Real
	}
	now := opt.Clock.Now
	if opt.EventCapacity <= 0 {
		opt.EventCapacity = 16384
	}
	id, fresh, err := state.ArrayID(cfg.Config, opt.StateDir)
	if err != nil {
		return nil, err
	}
	if fresh {
		opt.Logger.Info("new array id: every LUN's WWID derives from it", "array_id", id)
	}
	cfg.ArrayID = id
	arr, err := array.New(cfg.Config, array.Options{Now: now, Clock: opt.Clock, Sleep: opt.Sleep, WrapStore: opt.WrapStore, Logger: opt.Logger,
		Local: opt.Local, Remote: opt.Remote})
	if err != nil {
		return nil, err
	}
	srv := scsi.NewServer()
	srv.SetClock(now)
	for _, p := range arr.Ports {
		srv.AddTargetPort(scsi.TargetPortInfo{RelativeID: p.RelativeID, Name: iscsi.TargetPortName(cfg.NodeTarget(p.Node.Name), p.RelativeID)})
	}
	for _, l := range arr.LUNs {
		_, err := srv.AddLU(scsi.LUConfig{LUN: l.ID, BlockSize: l.BlockSize, PhysicalBlockSize: l.PhysicalBlockSize, Blocks: uint64(l.Size / int64(l.BlockSize)),
			Backend: l, Rotational: l.Media == "hdd",
			Identity: scsi.Identity{Vendor: "ALUAD", Product: "aluad array", Revision: "0001",
				Serial: arr.Serial(l), NAA: arr.NAA(l)}})
		if err != nil {
			arr.Close()
			return nil, err
		}
	}
	d := &Daemon{Array: arr, SCSI: srv, cfg: cfg, fabricCfg: cfg.Fabric, log: opt.Logger, clock: opt.Clock, now: now, done: make(chan struct{}),
		mover: opt.Mover, faults: opt.Faults}
	d.Events = api.NewEventLog(opt.EventCapacity, now, opt.OnEvent)
	d.View = &mgmt.View{Array: arr, SCSI: srv, Now: now, Events: d.Events.Since, Portals: d.Portals, Controller: opt.Local,
		FrontEnd: func() mgmt.FrontEnd {
			if d.fabric == nil {
				return nil
			}
			return d.fabric
		},
		State: func() *api.StateInfo {
			if d.state == nil {
				return nil
			}
			return d.state.Info()
		}}
	d.metrics = mgmt.NewMetrics(d.View)
	d.View.Metrics = d.metrics
	srv.SetALUA(arrayview.View{Arr: arr, Srv: srv, HostBlind: fabricOf(cfg).hostBlind})
	// Saved before the command's GOOD: a restart right after it keeps
	// what the host was told is saved.
	srv.SetOnPersist(func(uint64) { d.SaveState() })
	srv.SetLUNMapper(lunMapper{arr})
	_, tick := cfg.Ownership.Core(cfg.ALUA == "explicit")
	d.ctl = control.New(control.Options{Array: arr, SCSI: srv, Log: opt.Logger, Clock: opt.Clock,
		Observed: opt.Observed, Tick: tick, NoCore: opt.NoCore, Publish: d.Events.Add, OnUA: d.metrics.UnitAttention,
		OnReport: func(ri api.ReportInfo) {
			d.recordReport(ri)
			if ri.Raised {
				d.metrics.ReportRaised(ri.Condition)
			}
		},
		OnChange: func(c array.Change) {
			d.stateDirty()
			if h := d.aluaHook.Load(); h != nil {
				h.fn(c.LUNs)
			}
			d.metrics.Change(c)
			d.log.Info("alua change", "luns", c.LUNs, "from", c.From, "to", c.To, "cause", c.Cause,
				"stop", c.Stop, "failed", c.Failed)
		},
		Metrics: d.metrics,
		FrontEnd: func() control.Stats {
			if d.fabric == nil {
				return nil
			}
			return d.fabric
		}})
	d.View.Control = d.ctl
	return d, nil
}

// Start builds everything from cfg and starts listening.
func Start(cfg config.Config, opt Options) (*Daemon, error) {
	// Validated here too: the front end and the services read the
	// defaults it fills (the LIO layout's configfs root, for one).
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, err := New(cfg, opt)
	if err != nil {
		return nil, err
	}
	if opt.StateDir != "" {
		if err := d.openState(opt.StateDir); err != nil {
			d.Array.Close()
			return nil, err
		}
	}
	if d.audit, err = mgmt.OpenAudit(opt.StateDir, d.log, d.now); err != nil {
		d.Array.Close()
		return nil, err
	}
	if err := fabricOf(cfg).start(d, cfg, opt); err != nil {
		d.audit.Close()
		d.Array.Close()
		return nil, err
	}
	if err := d.startServices(cfg, opt); err != nil {
		return nil, err
	}
	return d, nil
}

// startISCSI serves the array on the pure-Go iSCSI target.
func (d *Daemon) startISCSI(cfg config.Config, opt Options) error {
	var portals, listed []fabric.Portal
	for _, p := range d.Array.Ports {
		fp := fabric.Portal{Addr: p.Addr, TPGT: p.RelativeID, RelativeID: p.RelativeID, Node: p.Node.Name, Name: p.Name}
		if p.Node.Remote() {
			listed = append(listed, fp) // another controller process serves it
			continue
		}
		portals = append(portals, fp)
	}
	tc := iscsi.Config{Name: cfg.Target, Alias: "aluad", Portals: portals, Listed: listed,
		Logger: opt.Logger, NopInterval: opt.NopInterval, NopTimeout: 2 * opt.NopInterval, Clock: d.clock, OnEvent: d.ctl.Fabric,
		Auth: chapPolicy(cfg.Config, d.Array.HostConfigs), Authorize: func(ini string, _ bool) bool { return d.Array.LUNMap().Admit(ini) },
		Listen: opt.Listen}
	cfg.Limits.Apply(&tc)
	tgt, err := iscsi.NewTarget(tc, d.SCSI)
	if err != nil {
		return err
	}
	if err := tgt.Listen(); err != nil {
		return err
	}
	d.Target, d.fabric = tgt, iscsiFabric{tgt}
	return nil
}

// startServices starts the control socket, the API, the ownership core
// and the stats loop once a fabric runs.
func (d *Daemon) startServices(cfg config.Config, opt Options) error {
	var err error
	closeFabric := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.fabric.Shutdown(ctx)
		d.audit.Close()
		d.Array.Close()
	}
	if opt.Control != "" {
		if d.control, err = mgmt.ListenControl(opt.Control, mgmt.Handler(d, d.audit)); err != nil {
			closeFabric()
			return err
		}
	}
	if opt.API != "" {
		h := mgmt.Handler(d, d.audit)
		if opt.Profiles {
			h = mgmt.WithProfiles(h)
		}
		if d.api, err = mgmt.ListenAPI(opt.API, opt.APIToken, h); err != nil {
			if d.control != nil {
				d.control.Close()
			}
			closeFabric()
			return err
		}
	}
	if !cfg.Ownership.Off {
		var decls []ownership.Event
		if d.state != nil {
			for n, c := range d.state.Capacities() {
				decls = append(decls, ownership.NodeDecl{Node: n, Capacity: c})
			}
		}
		if err := d.ctl.Start(cfg.Ownership, decls...); err != nil {
			d.Stop(0)
			return err
		}
	}
	if d.state != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.state.Run(d.done, d.Snapshot)
		}()
		d.stateDirty()
	}
	switch {
	case opt.Observed != nil:
		// A cluster's controller: its intervals feed the leader's core, at
		// the core's tick, whether or not it emits statistics.
		_, tick := cfg.Ownership.Core(cfg.ALUA == "explicit")
		d.wg.Add(1)
		go d.statsLoop(tick)
	case opt.StatsInterval >= 0 && !d.ctl.Running(): // the core emits them on its ticks
		iv := opt.StatsInterval
		if iv == 0 {
			iv = time.Second
		}
		d.wg.Add(1)
		go d.statsLoop(iv)
	}
	return nil
}

func (d *Daemon) statsLoop(iv time.Duration) {
	defer d.wg.Done()
	t := d.clock.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-d.done:
			return
		case <-t.C():
			d.ctl.FoldStats()
		}
	}
}

// Portals lists the bound portals in port order.
func (d *Daemon) Portals() []api.PortalInfo {
	var addrs []string
	if d.fabric != nil {
		addrs = d.fabric.Addrs()
	}
	out := make([]api.PortalInfo, 0, len(d.Array.Ports))
	i := 0 // the fabric's addresses are the local ports', in order
	for _, p := range d.Array.Ports {
		addr := p.Addr
		if !p.Node.Remote() {
			if i < len(addrs) {
				addr = addrs[i]
			}
			i++
		}
		out = append(out, api.PortalInfo{Node: p.Node.Name, Port: p.Name, Addr: addr,
			Target:     d.fabricCfg.NodeTarget(d.Array.Config().Target, p.Node.Name),
			RelativeID: p.RelativeID})
	}
	return out
}

// Stop lets in-flight commands finish (up to grace), closes every
// connection, and flushes and closes the media.
func (d *Daemon) Stop(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	select {
	case <-d.done:
		return nil // already stopped
	default:
	}
	// The core takes no more work once Stop has begun: halted before
	// Done closes, so no caller that saw Done reaches a running core.
	d.ctl.Halt()
	close(d.done)
	if d.control != nil {
		d.control.Close()
	}
	if d.api != nil {
		d.api.Close()
	}
	d.wg.Wait()
	d.ctl.Close()
	var terr error
	if d.fabric != nil {
		terr = d.fabric.Shutdown(ctx)
	}
	if err := d.SaveState(); err != nil {
		d.log.Error("the state could not be saved at shutdown", "err", err)
	}
	d.audit.Close()
	if err := d.Array.Close(); err != nil {
		return fmt.Errorf("flushing media: %w", err)
	}
	if terr != nil {
		d.log.Warn("some commands were still running at shutdown", "err", terr)
	}
	return nil
}

// EmitIOStats folds this interval's I/O now (the core's ticks and the
// stats interval do it by themselves).
func (d *Daemon) EmitIOStats() { d.ctl.FoldStats() }
