package tcmu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// Options configure a Frontend.
type Options struct {
	Layout Layout
	// FS is configfs (nil: OSFS). SysClass and DevDir locate the UIO
	// devices (defaults /sys/class/uio and /dev).
	FS       FS
	SysClass string
	DevDir   string
	// Handler is aluad's device server.
	Handler scsi.Handler
	// State is the ALUA state the array gives lun through port to a host
	// it cannot tell apart (the kernel holds one state per device).
	State func(lun uint64, port uint16) alua.AccessState
	// OnEvent receives logins and logouts, learnt from configfs.
	OnEvent func(fabric.Event)
	// OnRTPG credits an RTPG to an initiator when the device it came on is
	// shared by several (the device server reports RTPGs it can pin to one).
	OnRTPG func(n scsi.Nexus, lun uint64, extended bool)
	// OnAnswered receives commands of a declared host that LIO counted
	// on a device and answered itself (never on the ring), as they lapse.
	OnAnswered func(n scsi.Nexus, lun uint64, cmds uint64)
	// Poll is how often the sessions are read (default 250 ms).
	Poll   time.Duration
	Logger *slog.Logger
	// OpenRegion opens a device's shared region (nil: find its UIO
	// device and map it). Tests pass FakeRegion-backed regions.
	OpenRegion func(lun uint64, port uint16) (Region, error)
	// Netlink: listen to the TCMU netlink family (device events are
	// logged; a removed aluad device is an error).
	Netlink bool
}

// Frontend serves aluad's LUNs through LIO: one TCMU device per (LUN,
// port), each with its ring served here.
type Frontend struct {
	opt    Options
	fs     FS
	ports  map[uint16]TPGSpec
	iqnOf  map[uint16]string
	devs   []*device
	nl     *Netlink
	done   chan struct{}
	loops  sync.WaitGroup // ring, poll and ALUA goroutines
	cmds   sync.WaitGroup // commands in flight
	aluaCh chan struct{}
	// pollMu keeps polls of the sessions one at a time: the poll loop,
	// SetPortUp and a test may each start one.
	pollMu sync.Mutex

	mu       sync.Mutex
	sessions map[uint16]map[string]time.Time // port -> initiator -> since
	portDown map[uint16]bool
	dirty    map[uint64]bool // LUNs whose kernel state needs writing
	written  map[devKey]alua.AccessState
	stats    map[pathKey]*pathStat
	aclName  map[string]string          // declared initiator, lower case -> as configured (its ACL)
	viaACL   map[uint16]map[string]bool // port -> sessions under a declared host's ACL
	warned   map[pathKey]bool           // declared hosts seen under a dynamic ACL, logged
	closed   bool
}

type devKey struct {
	lun  uint64
	port uint16
}

type pathKey struct {
	initiator string
	port      uint16
}

type pathStat struct {
	n   uint64
	sum time.Duration
}

// Region is a device's mapped region and its signal: a UIO device, or a
// fake in tests.
type Region interface {
	Bytes() []byte
	// Wait blocks until the kernel queues commands (or Close is called).
	Wait() (uint32, error)
	// Kick tells the kernel the tail moved.
	Kick() error
	Close() error
	String() string
}

type device struct {
	devKey
	uio  Region
	ring *Ring
	cred devCredit // who sent what, when several share the port
}

// New checks the options; Start builds LIO's side and serves it.
func New(opt Options) (*Frontend, error) {
	if opt.Handler == nil || opt.State == nil {
		return nil, errors.New("tcmu: a handler and an ALUA state source are required")
	}
	if len(opt.Layout.Targets) == 0 || len(opt.Layout.LUNs) == 0 {
		return nil, errors.New("tcmu: nothing to serve (no targets or no LUNs)")
	}
	if opt.FS == nil {
		opt.FS = OSFS{}
	}
	if opt.SysClass == "" {
		opt.SysClass = "/sys/class/uio"
	}
	if opt.DevDir == "" {
		opt.DevDir = "/dev"
	}
	if opt.Poll <= 0 {
		opt.Poll = 250 * time.Millisecond
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.OnEvent == nil {
		opt.OnEvent = func(fabric.Event) {}
	}
	f := &Frontend{opt: opt, fs: opt.FS, ports: map[uint16]TPGSpec{}, iqnOf: map[uint16]string{},
		done: make(chan struct{}), aluaCh: make(chan struct{}, 1), sessions: map[uint16]map[string]time.Time{},
		portDown: map[uint16]bool{}, dirty: map[uint64]bool{}, written: map[devKey]alua.AccessState{},
		stats: map[pathKey]*pathStat{}, aclName: map[string]string{}, viaACL: map[uint16]map[string]bool{},
		warned: map[pathKey]bool{}}
	for _, ini := range opt.Layout.Initiators {
		f.aclName[strings.ToLower(ini)] = ini
	}
	for _, t := range opt.Layout.Targets {
		for _, p := range t.TPGs {
			if _, dup := f.ports[p.TPGT]; dup {
				return nil, fmt.Errorf("tcmu: TPGT %d used twice", p.TPGT)
			}
			f.ports[p.TPGT], f.iqnOf[p.TPGT] = p, t.IQN
		}
	}
	return f, nil
}

// Start removes what an earlier aluad may have left, builds the LIO
// configuration, opens every device's ring and starts serving. Kernel
// ALUA states are set before the TPGs accept logins.
func (f *Frontend) Start() error {
	l := f.opt.Layout
	if !f.fs.Exists(l.Root) {
		return fmt.Errorf("tcmu: no LIO configfs at %s (load target_core_user and iscsi_target_mod, and mount configfs on /sys/kernel/config)", l.Root)
	}
	if err := l.Remove(f.fs); err != nil {
		f.opt.Logger.Warn("tcmu: clearing an earlier configuration", "err", err)
	}
	if f.opt.Netlink {
		nl, err := OpenNetlink()
		if err != nil {
			f.opt.Logger.Warn("tcmu: netlink events unavailable", "err", err)
		} else {
			f.nl = nl
			f.loops.Add(1)
			go f.netlinkLoop()
		}
	}
	// Devices are created with their TPGs disabled until their rings run
	// and their states are set: create everything, but enable TPGs last.
	if err := l.Create(tpgHold{f.fs}); err != nil {
		_ = l.Remove(f.fs)
		return err
	}
	for _, t := range l.Targets {
		for _, p := range t.TPGs {
			for _, lun := range l.LUNs {
				d, err := f.openDevice(lun.ID, p.TPGT)
				if err != nil {
					f.stopRings()
					_ = l.Remove(f.fs)
					return err
				}
				f.devs = append(f.devs, d)
			}
		}
	}
	for _, d := range f.devs {
		f.loops.Add(1)
		go f.serve(d)
	}
	f.mu.Lock()
	for _, lun := range l.LUNs {
		f.dirty[lun.ID] = true
	}
	f.mu.Unlock()
	f.applyStates()
	for _, t := range l.Targets {
		for _, p := range t.TPGs {
			if err := l.SetPortEnabled(f.fs, t.IQN, p.TPGT, true); err != nil {
				f.Shutdown(context.Background())
				return err
			}
		}
	}
	f.pollSessions() // the sessions are known before Start returns
	f.loops.Add(2)
	go f.pollLoop()
	go f.aluaLoop()
	f.opt.Logger.Info("tcmu: serving", "devices", len(f.devs), "targets", len(l.Targets))
	return nil
}

// tpgHold passes everything through except enabling TPGs.
type tpgHold struct{ FS }

func (h tpgHold) Write(p, v string) error {
	if strings.Contains(p, "/tpgt_") && strings.HasSuffix(p, "/enable") {
		return nil
	}
	return h.FS.Write(p, v)
}

func (f *Frontend) openDevice(lun uint64, port uint16) (*device, error) {
	open := f.opt.OpenRegion
	if open == nil {
		open = f.openUIO
	}
	u, err := open(lun, port)
	if err != nil {
		return nil, err
	}
	r, err := NewRing(u.Bytes())
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	return &device{devKey: devKey{lun, port}, uio: u, ring: r}, nil
}

func (f *Frontend) openUIO(lun uint64, port uint16) (Region, error) {
	name := DeviceName(lun, port)
	var node, uname string
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if node, uname, err = FindUIO(f.opt.SysClass, f.opt.Layout.HBA, name); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	return OpenUIO(f.opt.SysClass, f.opt.DevDir, node, uname)
}

// serve runs one device's ring: wait for the kernel's signal, take what
// it queued, run each command on its own goroutine.
func (f *Frontend) serve(d *device) {
	defer f.loops.Done()
	for {
		cmds, _, err := d.ring.Fetch()
		for _, c := range cmds {
			f.cmds.Add(1)
			go f.exec(d, c)
		}
		if err != nil {
			f.opt.Logger.Error("tcmu: device ring stopped", "device", DeviceName(d.lun, d.port), "err", err)
			return
		}
		if _, err := d.uio.Wait(); err != nil {
			select {
			case <-f.done:
			default:
				f.opt.Logger.Error("tcmu: waiting on the device", "device", d.uio.String(), "err", err)
			}
			return
		}
	}
}

func (f *Frontend) sessionsOn(port uint16) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for ini := range f.sessions[port] {
		out = append(out, ini)
	}
	sort.Strings(out)
	return out
}

func isRTPG(cdb []byte) bool {
	return len(cdb) >= 2 && cdb[0] == scsi.OpMaintenanceIn && cdb[1]&0x1f == scsi.SAReportTPG
}

// exec runs one command through aluad's device server and answers it.
func (f *Frontend) exec(d *device, c *Cmd) {
	defer f.cmds.Done()
	start := time.Now()
	var rsp Response
	n := f.nexus(d)
	if c.Err != nil {
		f.opt.Logger.Warn("tcmu: bad ring entry", "device", DeviceName(d.lun, d.port), "err", c.Err)
		rsp = Response{Status: byte(scsi.StatusCheckCondition), Sense: scsi.BuildSense(scsi.Sense(scsi.ReasonHardwareError), false)}
	} else {
		cdb := append([]byte(nil), c.CDB...)
		cmd := &scsi.Command{Nexus: n, LUN: d.lun, CDB: cdb, DataInLen: int(c.DataLen())}
		if scsi.DataOut(cdb[0]) {
			cmd.Data = c.DataOut()
		}
		r := f.opt.Handler.Execute(cmd)
		rsp = Response{Status: byte(r.Status), Sense: r.Sense}
		if r.Data != nil && !scsi.DataOut(cdb[0]) {
			rsp.Data = r.Data
		}
		if isRTPG(cdb) && n.InitiatorName == "" && r.Status == scsi.StatusGood && f.opt.OnRTPG != nil {
			for _, ini := range f.sessionsOn(d.port) {
				f.opt.OnRTPG(scsi.Nexus{InitiatorName: ini, TargetPort: d.port}, d.lun, len(cdb) > 1 && cdb[1]>>5 == 1)
			}
		}
	}
	if c.Respond(rsp) {
		if err := d.uio.Kick(); err != nil {
			f.opt.Logger.Warn("tcmu: kick", "device", d.uio.String(), "err", err)
		}
	}
	if n.InitiatorName != "" {
		f.mu.Lock()
		k := pathKey{n.InitiatorName, d.port}
		s := f.stats[k]
		if s == nil {
			s = &pathStat{}
			f.stats[k] = s
		}
		s.n++
		s.sum += time.Since(start)
		f.mu.Unlock()
	}
}

// pollLoop reads every port's sessions and reports logins and logouts.
func (f *Frontend) pollLoop() {
	defer f.loops.Done()
	t := time.NewTicker(f.opt.Poll)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-t.C:
		}
		f.pollSessions()
	}
}

func (f *Frontend) pollSessions() {
	f.pollMu.Lock()
	defer f.pollMu.Unlock()
	var events []fabric.Event
	type newACL struct {
		port uint16
		ini  string
	}
	var fresh []newACL
	for port, p := range f.ports {
		names, err := f.opt.Layout.Sessions(f.fs, f.iqnOf[port], port)
		if err != nil {
			continue
		}
		for _, ini := range names {
			k := pathKey{strings.ToLower(ini), port}
			if _, ok := f.aclName[k.initiator]; ok && !f.warned[k] {
				f.warned[k] = true
				f.opt.Logger.Warn("tcmu: a declared host logged in under a dynamic ACL: its name differs from the configured one (LIO matches names byte for byte); its commands are told apart from other hosts' only while it is alone on the port",
					"initiator", ini, "configured", f.aclName[k.initiator], "port", p.Port)
			}
		}
		viaACL := map[string]bool{}
		for _, ini := range f.declaredSessions(port) {
			viaACL[ini] = true
			names = append(names, ini)
		}
		now := time.Now()
		cur := map[string]bool{}
		for _, ini := range names {
			cur[strings.ToLower(ini)] = true
		}
		f.mu.Lock()
		prev := f.sessions[port]
		if prev == nil {
			prev = map[string]time.Time{}
			f.sessions[port] = prev
		}
		portal := fabric.Portal{Addr: p.Portal, TPGT: port, RelativeID: port, Name: p.Port}
		for ini := range cur {
			if _, ok := prev[ini]; !ok {
				prev[ini] = now
				events = append(events, fabric.Event{Kind: "login", Nexus: scsi.Nexus{InitiatorName: ini, TargetPort: port}, Portal: portal})
				if viaACL[ini] {
					fresh = append(fresh, newACL{port, ini})
				}
			}
		}
		f.viaACL[port] = viaACL
		for ini := range prev {
			if !cur[ini] {
				delete(prev, ini)
				delete(f.stats, pathKey{ini, port})
				reason := "session ended"
				if f.portDown[port] {
					reason = "port down"
				}
				events = append(events, fabric.Event{Kind: "logout", Nexus: scsi.Nexus{InitiatorName: ini, TargetPort: port}, Portal: portal, Reason: reason})
			}
		}
		f.mu.Unlock()
	}
	for _, e := range events {
		f.opt.Logger.Info("tcmu: "+e.Kind, "initiator", e.Nexus.InitiatorName, "port", e.Portal.Name, "reason", e.Reason)
		f.opt.OnEvent(e)
	}
	for _, s := range fresh {
		f.baseline(s.port, s.ini)
	}
	for _, a := range f.lapse() {
		if f.opt.OnAnswered != nil {
			f.opt.OnAnswered(a.n, a.lun, a.cmds)
		}
	}
}

// ALUAChanged tells the front end that the array changed the ALUA states
// of luns: their devices' kernel states are rewritten (at once, by the
// ALUA goroutine), which makes LIO queue 2A/06 on their I_T nexuses.
func (f *Frontend) ALUAChanged(luns []uint64) {
	f.mu.Lock()
	for _, l := range luns {
		f.dirty[l] = true
	}
	f.mu.Unlock()
	select {
	case f.aluaCh <- struct{}{}:
	default:
	}
}

func (f *Frontend) aluaLoop() {
	defer f.loops.Done()
	for {
		select {
		case <-f.done:
			return
		case <-f.aluaCh:
			f.applyStates()
		}
	}
}

// accessRank orders states from most to least accessible: the new
// owner's devices become active before the old owner's stop being so,
// so no path is refused by LIO while aluad would serve it.
func accessRank(s alua.AccessState) int {
	switch s {
	case alua.ActiveOptimized:
		return 0
	case alua.ActiveNonOptimized:
		return 1
	case alua.Transitioning:
		return 2
	case alua.Standby:
		return 3
	default:
		return 4
	}
}

func (f *Frontend) applyStates() {
	f.mu.Lock()
	var luns []uint64
	for l := range f.dirty {
		luns = append(luns, l)
	}
	clear(f.dirty)
	f.mu.Unlock()
	type w struct {
		k devKey
		s alua.AccessState
	}
	var ws []w
	for _, lun := range luns {
		for port := range f.ports {
			k := devKey{lun, port}
			s := f.opt.State(lun, port)
			f.mu.Lock()
			old, ok := f.written[k]
			f.mu.Unlock()
			if !ok || old != s {
				ws = append(ws, w{k, s})
			}
		}
	}
	sort.SliceStable(ws, func(i, j int) bool { return accessRank(ws[i].s) < accessRank(ws[j].s) })
	for _, x := range ws {
		if err := f.opt.Layout.SetState(f.fs, x.k.lun, x.k.port, byte(x.s)); err != nil {
			f.opt.Logger.Error("tcmu: kernel ALUA state", "device", DeviceName(x.k.lun, x.k.port), "state", x.s, "err", err)
			continue
		}
		f.mu.Lock()
		f.written[x.k] = x.s
		f.mu.Unlock()
	}
}

// KernelStates returns the kernel ALUA state last written per device.
func (f *Frontend) KernelStates() map[string]alua.AccessState {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]alua.AccessState{}
	for k, s := range f.written {
		out[DeviceName(k.lun, k.port)] = s
	}
	return out
}

// ErrNoPathFaults: LIO has no switch for one initiator's path to one TPG
// short of ACL changes, which demo-mode logins would undo.
var ErrNoPathFaults = errors.New("the tcmu fabric cannot cut one initiator's path (LIO has no per-initiator switch on a TPG); use port-down")

// SetPortUp disables or enables a port's TPG: disabled, LIO ends its
// sessions and refuses logins on it.
func (f *Frontend) SetPortUp(port uint16, up bool) {
	iqn, ok := f.iqnOf[port]
	if !ok {
		return
	}
	f.mu.Lock()
	f.portDown[port] = !up
	f.mu.Unlock()
	if err := f.opt.Layout.SetPortEnabled(f.fs, iqn, port, up); err != nil {
		f.opt.Logger.Error("tcmu: port state", "port", port, "up", up, "err", err)
	}
	f.pollSessions()
}

// ErrNoWireModes: LIO's TPG switch ends sessions one way only.
var ErrNoWireModes = errors.New("the tcmu fabric can only disable a port's TPG (LIO closes its sessions); " +
	"a silent or reset port needs the lab network (drop the node's addresses)")

// Supports says whether SetPortMode can put a port in m.
func (f *Frontend) Supports(m fabric.PortMode) error {
	if m == fabric.PortUp || m == fabric.PortDown {
		return nil
	}
	return ErrNoWireModes
}

// SetPortMode supports PortUp and PortDown (the TPG switch).
func (f *Frontend) SetPortMode(port uint16, m fabric.PortMode) error {
	switch m {
	case fabric.PortUp, fabric.PortDown:
		f.SetPortUp(port, m == fabric.PortUp)
		return nil
	}
	return ErrNoWireModes
}

// PortUp reports whether a port's TPG is enabled.
func (f *Frontend) PortUp(port uint16) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.iqnOf[port]
	return ok && !f.portDown[port]
}

// SetPathUp is not available on this fabric.
func (f *Frontend) SetPathUp(string, uint16, bool) error { return ErrNoPathFaults }

// SetPathDelay is not available on this fabric.
func (f *Frontend) SetPathDelay(string, uint16, time.Duration) error {
	return errors.New("the tcmu fabric cannot delay one path (LIO carries the iSCSI traffic)")
}

// ClearPathFaults has nothing to clear: this fabric has no path faults.
func (f *Frontend) ClearPathFaults() {}

// PathStats reports every session with the commands credited to it and
// the time they took from ring to answer (credited only while the
// session is alone on its port).
func (f *Frontend) PathStats() []fabric.PathStat {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fabric.PathStat
	for port, s := range f.sessions {
		for ini, since := range s {
			ps := fabric.PathStat{Nexus: scsi.Nexus{InitiatorName: ini, TargetPort: port}, Since: since}
			if st := f.stats[pathKey{ini, port}]; st != nil {
				ps.Exchanges, ps.Exchange = st.n, st.sum
			}
			out = append(out, ps)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Nexus.TargetPort != out[j].Nexus.TargetPort {
			return out[i].Nexus.TargetPort < out[j].Nexus.TargetPort
		}
		return out[i].Nexus.InitiatorName < out[j].Nexus.InitiatorName
	})
	return out
}

// Addrs lists the portals, in port order.
func (f *Frontend) Addrs() []string {
	var ports []int
	for p := range f.ports {
		ports = append(ports, int(p))
	}
	sort.Ints(ports)
	var out []string
	for _, p := range ports {
		out = append(out, f.ports[uint16(p)].Portal)
	}
	return out
}

func (f *Frontend) netlinkLoop() {
	defer f.loops.Done()
	for {
		evs, err := f.nl.Receive()
		if err != nil {
			select {
			case <-f.done:
				return
			default:
			}
			if errors.Is(err, errTimeout) {
				continue
			}
			f.opt.Logger.Warn("tcmu: netlink", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for _, e := range evs {
			if _, _, ok := ParseDeviceName(e.Name()); !ok {
				continue // tcmu-runner's, or anyone else's
			}
			switch e.Cmd {
			case CmdRemovedDevice:
				f.mu.Lock()
				closed := f.closed
				f.mu.Unlock()
				if !closed {
					f.opt.Logger.Error("tcmu: an aluad device was removed from under it", "device", e.Device)
				}
			default:
				f.opt.Logger.Debug("tcmu: netlink event", "cmd", e.Cmd, "device", e.Device, "minor", e.Minor)
			}
		}
	}
}

func (f *Frontend) stopRings() {
	for _, d := range f.devs {
		_ = d.uio.Close()
	}
}

// Shutdown disables the TPGs (LIO ends the sessions once their commands,
// which the rings still serve, are answered), stops the rings and
// removes the configuration.
func (f *Frontend) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	l := f.opt.Layout
	for _, t := range l.Targets {
		for _, p := range t.TPGs {
			_ = l.SetPortEnabled(f.fs, t.IQN, p.TPGT, false)
		}
	}
	close(f.done)
	waited := make(chan struct{})
	go func() { f.cmds.Wait(); close(waited) }()
	var err error
	select {
	case <-waited:
	case <-ctx.Done():
		err = fmt.Errorf("tcmu: commands still running at shutdown: %w", ctx.Err())
	}
	f.stopRings()
	if f.nl != nil {
		_ = f.nl.Close()
	}
	f.loops.Wait()
	if rerr := l.Remove(f.fs); rerr != nil && err == nil {
		err = rerr
	}
	return err
}
