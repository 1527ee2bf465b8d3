package qemulab

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/qualify"
)

// ClientSpec is one client guest: its multipath stack and configuration,
// and the host type it is declared to the array with.
type ClientSpec struct {
	Name     string `json:"name"`
	Conf     string `json:"multipath_conf"` // cluster-tests/guest/<Conf>
	HostType string `json:"host_type"`
	// LibISCSI: the guest's disks come from QEMU's libiscsi driver as
	// scsi-block devices (no iSCSI initiator in the guest).
	LibISCSI bool   `json:"libiscsi"`
	Desc     string `json:"desc"`
	// Release is the guest's Debian release ("": DefaultRelease): its
	// kernel, open-iscsi and multipath-tools with their defaults.
	Release string `json:"release,omitempty"`
	// NoMultipath: multipathd is not started; the application uses one
	// path per LUN (node a's first portal) and nothing reads RTPG.
	NoMultipath bool `json:"no_multipath"`
	// Follows: the configuration is expected to run I/O on the owner
	// (failback immediate, or non-owner paths STANDBY). Configurations
	// that are not (failback manual or followover) are measured and
	// their behaviour reported, not judged.
	Follows bool `json:"follows"`
}

// Scenario is a set of clients and the ownership steps run under their I/O.
type Scenario struct {
	Name    string
	Clients []ClientSpec
	// Steps, in order: "move" (a manual move of LUN 0, and the array's
	// own balance move if it makes one), "rebalance" (an operator skew,
	// every LUN onto one node, and the array's balance move that
	// follows), "failover" (every client's links to LUN 0's owner cut at the
	// array), "failback" (the links restored; the array fails back after
	// its stability window), "observe" (no event: the array watches where
	// the clients' I/O arrives for its follow and ship windows; the
	// reports and owners at the end are judged).
	Steps []string
	// Qualify, instead of Steps, runs aluad qualify's built-in schedule
	// of that name against the clients and checks it against the guests'
	// own measurements (qualify.go); QualifyAgree makes the agreement of
	// its stalls and follows with the guests' a check (one guest: with
	// three, a TCG guest goes without the CPU for up to a second and its
	// own counters lag; the agreement is then reported, not judged).
	Qualify      string
	QualifyAgree bool
	// Observe is how long an "observe" step watches (default 80 s, then
	// 5 s more for the forwarded count).
	Observe time.Duration
	// Sample starts each guest's sampler of its disks' completions after
	// fio starts: the logout steps state the stall on LUN 0 from it.
	Sample bool
	// Boot judges the guests' boot: no LUN moves from the array's start
	// until Observe after each guest's last login.
	Boot bool
	// AOAtEnd: each LUN's active path group is checked on its owner at
	// the end of the run, not after set-up (the set-up state is logged):
	// dm-multipath at its defaults (failback manual) keeps the first group
	// it assembled, the non-owner's when those portals answered first,
	// and the array ships such a LUN to where its I/O arrives only after
	// the boot window (Boot forbids moves until then).
	AOAtEnd bool
	// NoMoveFrom: no LUN may move away from this node during the run.
	NoMoveFrom string
}

var (
	cDefaultsDMMP = ClientSpec{Name: "c1", Conf: "multipath-defaults.conf", HostType: "linux-dmmp",
		Desc: "dm-multipath at its defaults; declared Linux DM-MP (non-owner paths STANDBY)", Follows: true}
	cDefaultsANO = ClientSpec{Name: "c2", Conf: "multipath-defaults.conf", HostType: "linux",
		Desc: "dm-multipath at its defaults; declared linux (non-owner paths ANO)"}
	cALUA = ClientSpec{Name: "c3", Conf: "multipath-alua.conf", HostType: "linux",
		Desc: "dm-multipath: prio alua, group_by_prio, failback immediate, queue_if_no_path", Follows: true}
	cFollowover = ClientSpec{Name: "c4", Conf: "multipath-followover.conf", HostType: "linux",
		Desc: "dm-multipath: prio alua, group_by_prio, failback followover, no_path_retry 30, queue-length"}
	cALUADMMP = ClientSpec{Name: "c7", Conf: "multipath-alua.conf", HostType: "linux-dmmp",
		Desc: "as c3 (prio alua, group_by_prio, failback immediate), declared Linux DM-MP (non-owner paths STANDBY)", Follows: true}
	cLibISCSI = ClientSpec{Name: "c5", Conf: "multipath-alua.conf", HostType: "linux", LibISCSI: true,
		Desc: "QEMU libiscsi + scsi-block; guest dm-multipath as c3 (scsi_dh_alua talks RTPG through QEMU)", Follows: true}
)

// cNoMP logs in everywhere but runs no multipath (multipathd not
// running), on a kernel that attaches scsi_dh_alua to every TPGS device
// at scan and reads RTPG on every path (noMPModules).
var cNoMP = ClientSpec{Name: "c6", Conf: "multipath-none.conf", HostType: "linux", NoMultipath: true,
	Desc: "open-iscsi logged in on every portal, no multipath (multipathd not running); scsi_dh_alua attached to every path at scan (RTPG on each): I/O through node a's first path only"}

// noMPModules are c6's boot modules. The kernel attaches a device handler
// at scan only if it is already registered: it does not load one
// (scsi_dh_add_device looks handlers up without request_module). Kernels
// that build scsi_dh_alua in attach it to every TPGS device at scan; the
// Debian guest's kernel has it as a module that, at its defaults without
// multipathd, nothing loads (checked on the bookworm guest: every path
// "detached"). The guest loads it at boot, before its logins, so that it
// attaches at scan as a built-in one does. dm_multipath is what Debian's
// modules-load.d (multipath-tools) loads at boot; multipathd is not run.
var noMPModules = []string{"virtio_net", "virtio_scsi", "sd_mod", "sg", "scsi_dh_alua", "iscsi_tcp", "dm_multipath"}

// ClientByName is the lab's client configuration of that name (c1..c7):
// the Vagrant lab's clients are the same configurations.
func ClientByName(name string) (ClientSpec, bool) {
	for _, c := range []ClientSpec{cDefaultsDMMP, cDefaultsANO, cALUA, cFollowover, cLibISCSI, cNoMP, cALUADMMP} {
		if c.Name == name {
			return c, true
		}
	}
	return ClientSpec{}, false
}

// cLibISCSIShared is c5 in a crowded run: measured, not judged.
var cLibISCSIShared = func() ClientSpec {
	c := cLibISCSI
	c.Follows = false
	c.Desc += "; judged alone (scenario libiscsi)"
	return c
}()

// Scenarios are the named scenarios.
var Scenarios = map[string]Scenario{
	// smoke: one client, one failback (after the failover it needs); CI.
	"smoke": {Name: "smoke", Clients: []ClientSpec{cALUA}, Steps: []string{"failover", "failback"}},
	// libiscsi: the QEMU libiscsi client alone, a failover and a failback.
	"libiscsi": {Name: "libiscsi", Clients: []ClientSpec{cLibISCSI}, Steps: []string{"failover", "failback"}},
	// hosttype: dm-multipath at its defaults (failback manual) declared
	// linux (ANO): after the failback its I/O stays on the old owner, so
	// the array raises Host Type Incorrect and ships the LUN to where the
	// I/O arrives. hosttype-dmmp: the same guest declared linux-dmmp
	// follows and raises nothing.
	"hosttype":      {Name: "hosttype", Clients: []ClientSpec{cDefaultsANO}, Steps: []string{"failover", "failback", "observe"}},
	"hosttype-dmmp": {Name: "hosttype-dmmp", Clients: []ClientSpec{cDefaultsDMMP}, Steps: []string{"failover", "failback", "observe"}},
	// nomp: a guest whose multipathd is stopped scans every path and uses
	// node a's: Multipath Not Discovering Paths for node b; a dm-multipath
	// guest that reads RTPG on every path raises none.
	// The no-multipath guest's scsi_dh_alua reads RTPG on every path at
	// scan, as on a Debian host: that is not multipath discovery. No LUN
	// may leave node a, where it sends its I/O.
	"nomp": {Name: "nomp", Clients: []ClientSpec{cNoMP, cALUA}, Steps: []string{"observe"}, Observe: 90 * time.Second,
		NoMoveFrom: "a"},
	// mnd-dmmp: dm-multipath at its defaults (declared linux-dmmp) and with
	// prio alua (linux) raise nothing (no Multipath Not Discovering Paths,
	// no Host Type Incorrect) and move nothing (Boot's check); on the TCMU
	// fabric too.
	"mnd-dmmp": {Name: "mnd-dmmp", Clients: []ClientSpec{cDefaultsDMMP, cALUA}, Steps: []string{"observe"}, Observe: 90 * time.Second,
		Boot: true},
	// logout-owner: a linux-dmmp guest under fio is logged out of LUN 0's
	// owner's two portals one after the other by its admin (iscsiadm -u),
	// then logged back in: no I/O error, LUN 0's I/O goes on (its longest
	// gap stated), and what the array did is recorded.
	"logout-owner": {Name: "logout-owner", Clients: []ClientSpec{cDefaultsDMMP}, Steps: []string{"logout-owner", "login-owner"},
		Sample: true, AOAtEnd: true},
	// boot: a linux-dmmp guest boots and logs in to every portal
	// (iscsiadm -m node -L all): no LUN moves during its logins nor in the
	// 90 s after them.
	"boot": {Name: "boot", Clients: []ClientSpec{cDefaultsDMMP}, Steps: []string{"observe"}, Observe: 90 * time.Second, Boot: true, AOAtEnd: true},
	// powerloss: LUN 0's owner loses power (silent on the wire) and
	// comes back: the guest's stall is its NOP-Out timeout plus
	// fast_io_fail, then the array's takeover; no application error.
	"powerloss": {Name: "powerloss", Clients: []ClientSpec{cALUA}, Steps: []string{"power-loss", "restart"}},
	// personality: the schedule the emulated linux-dmmp personality runs in
	// pkg/lab's "personality" scenario (two planned moves, a power loss,
	// the restart and its failback), with the same stack declared linux
	// (ANO) and linux-dmmp (STANDBY): their follow times side by side.
	"personality": {Name: "personality", Clients: []ClientSpec{cALUA, cALUADMMP},
		Steps: []string{"move", "move", "power-loss", "restart"}},
	// full: every client configuration, every kind of move. The libiscsi
	// client is measured but judged only alone ("libiscsi"): with five
	// TCG guests on two cores its multipathd checker starves (it logs
	// "path checkers took longer than 99 seconds").
	// qualify: aluad qualify's quick schedule against dm-multipath declared
	// linux (failback immediate) and linux-dmmp, and failback followover:
	// its array-side figures against the guests' own, its verdicts
	// against multipath -ll.
	"qualify": {Name: "qualify", Clients: []ClientSpec{cALUA, cALUADMMP, cFollowover}, Qualify: "quick"},
	// qualify-linux, qualify-dmmp: one guest each (dm-multipath with
	// failback immediate declared linux; the same declared linux-dmmp), so
	// that the guest's own counters are read on time: with three TCG
	// guests on two cores a guest goes without the CPU for up to a second.
	"qualify-linux": {Name: "qualify-linux", Clients: []ClientSpec{cALUA}, Qualify: "quick", QualifyAgree: true},
	"qualify-dmmp":  {Name: "qualify-dmmp", Clients: []ClientSpec{cALUADMMP}, Qualify: "quick", QualifyAgree: true},
	"full": {Name: "full", Clients: []ClientSpec{cDefaultsDMMP, cDefaultsANO, cALUA, cFollowover, cLibISCSIShared},
		Steps: []string{"move", "rebalance", "failover", "failback"}},
}

// Options tell Run where things are.
type Options struct {
	Scenario Scenario
	Root     string // the repository (cluster-tests/ is under it)
	Out      string // results directory
	LUNs     int    // default 2
	// Follow is how long hosts get to switch after a change (default 40 s).
	Follow time.Duration
	// TCMU runs the nodes in a storage guest: LIO's iSCSI target over
	// aluad's TCMU devices (aluad serve --fabric tcmu), instead of aluad's
	// own target on the host.
	TCMU bool
	Log  func(string, ...any)
}

// ClientResult is what one client did.
type ClientResult struct {
	Spec ClientSpec `json:"spec"`
	IQN  string     `json:"iqn"`
	// Stack: the guest's release, kernel, multipath-tools and open-iscsi
	// versions, as the guest reports them.
	Stack     string        `json:"stack"`
	Booted    time.Duration `json:"boot_ns"`
	SetUp     time.Duration `json:"setup_ns"`
	Maps      int           `json:"maps"`
	Paths     int           `json:"paths"`
	AOOnOwner bool          `json:"ao_on_owner"`
	Before    string        `json:"multipath_ll_before"`
	After     string        `json:"multipath_ll_after"`
	RTPG      string        `json:"sg_rtpg"`
	Inquiry   string        `json:"sg_inq_vpd83"`
	FioIOs    uint64        `json:"fio_ios"`
	FioErrors int           `json:"fio_errors"`
	// KernelPathErrors: kernel log lines of I/O errors on a path (sdX):
	// dm-multipath retried those on another path. KernelDMErrors: on the
	// multipath device itself: the application saw them.
	KernelPathErrors int `json:"kernel_path_errors"`
	// ClockOffset is the guest's clock minus the lab's (qualify scenario),
	// ClockRTT the round trip it was measured with.
	ClockOffset    time.Duration `json:"clock_offset_ns,omitempty"`
	ClockRTT       time.Duration `json:"clock_rtt_ns,omitempty"`
	KernelDMErrors int           `json:"kernel_dm_errors"`
	// DHState: each path's device handler (no-multipath client).
	DHState  string   `json:"dh_state,omitempty"`
	Problems []string `json:"problems,omitempty"`

	vm    *VM
	disks map[string]DiskPath // dev -> portal, LUN
	maps  []MPath
	// fioDone: per LUN, when fio completed each of its I/Os (the lab's
	// clock; Sample scenarios).
	fioDone map[uint64][]time.Time
	// bootPace: how much slower than on a quiet machine it booted (>= 1):
	// the set-up's commands get that much longer.
	bootPace float64
}

// StepResult is one step: the changes the array made and how each client
// followed each changed LUN.
type StepResult struct {
	Name    string    `json:"name"`
	Start   time.Time `json:"start"`
	Changes []string  `json:"changes"`
	Follows []Follow  `json:"follows"`
	Err     string    `json:"error,omitempty"`
	// MultipathLL is each client's `multipath -ll` at the end of the step.
	MultipathLL map[string]string `json:"multipath_ll"`
	// Observe steps: the reports raised at the end (condition, host,
	// cause), the LUNs' owners, and the commands forwarded between nodes
	// over the last 5 s (I/O that arrived at a non-owner).
	Reports   []string          `json:"reports,omitempty"`
	Owners    map[uint64]string `json:"owners,omitempty"`
	Forwarded uint64            `json:"forwarded_last_5s,omitempty"`
	// Portal steps (logout-owner, login-owner): when the step ended, the
	// reports raised during it, I/O error lines the guest's kernel logged
	// during it, whether fio was still running at its end, and notes.
	End       time.Time `json:"end,omitempty"`
	Raised    []string  `json:"raised,omitempty"`
	IOErrLogs []string  `json:"io_error_lines,omitempty"`
	FioAlive  bool      `json:"fio_alive,omitempty"`
	Notes     []string  `json:"notes,omitempty"`
}

// Check is one pass/fail condition of the run.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Results of a run.
type Results struct {
	Scenario string          `json:"scenario"`
	Started  time.Time       `json:"started"`
	Elapsed  time.Duration   `json:"elapsed_ns"`
	ImageMS  int64           `json:"image_ms"`
	Clients  []*ClientResult `json:"clients"`
	Steps    []*StepResult   `json:"steps"`
	Checks   []Check         `json:"checks"`
	Pass     bool            `json:"pass"`
	// Polling: how often the array's counters were actually read.
	Polling PollStats `json:"polling"`
	// Qualify: the qualify scenario's figures against the guests' own;
	// Topology each client's multipathd topology after each of its steps.
	Qualify  []QualifyAgreement        `json:"qualify,omitempty"`
	Topology map[string]map[int]string `json:"topology,omitempty"`
	// Pace: the guests' bring-up time over a quiet machine's (>= 1), and
	// the waits derived from it.
	Pace  float64           `json:"pace"`
	Waits map[string]string `json:"waits,omitempty"`
}

func (r *Results) check(name string, ok bool, format string, a ...any) {
	r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, a...)})
}

// nodeOfPortal maps a portal address to its node name.
func nodeOfPortal(portal string) string {
	for node, name := range []string{"a", "b"} {
		for f := range Fabrics {
			if strings.HasPrefix(portal, PortAddr(node, f)+":") {
				return name
			}
		}
	}
	return ""
}

// lab is a run in progress.
type lab struct {
	opt Options
	net *Net
	arr *Array
	w   *Watcher
	res *Results
	dir string
	img Image // DefaultRelease's: the storage guest's
	// imgs and initrds: each client release's image and initrd.
	imgs    map[string]Image
	initrds map[string]string
	// down is the node a power-loss step took down (restart brings it back).
	down string
	// qrep is aluad qualify's report (qualify scenario), mpll each
	// client's `multipath -ll` after each of its steps.
	qrep *qualify.Report
	mpll map[string]map[int]string
	// pace is how much slower than on a quiet machine the guests came up
	// (>= 1): the waits that depend on the guests' own timers scale by it.
	pace float64
	// views: each guest's sampler record (Sample scenarios), read at the end.
	views map[string]*guestView
	// loggedOut is the node a logout-owner step logged the guests out of.
	loggedOut string
	// ioStart: when fio was running on every client.
	ioStart time.Time
}

// Run runs a scenario and writes its results to opt.Out.
func Run(ctx context.Context, opt Options) (*Results, error) {
	if opt.LUNs == 0 {
		opt.LUNs = 2
	}
	if opt.Follow == 0 {
		opt.Follow = 40 * time.Second
	}
	if opt.Log == nil {
		opt.Log = func(string, ...any) {}
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, err
	}
	l := &lab{opt: opt, dir: opt.Out, res: &Results{Scenario: opt.Scenario.Name, Started: time.Now()}}
	defer l.close()
	if err := l.prepare(ctx); err != nil {
		return nil, err
	}
	err := l.run(ctx)
	l.res.Elapsed = time.Since(l.res.Started)
	if l.w != nil {
		l.res.Polling = l.w.Stats()
		_ = l.w.WriteEvents(filepath.Join(opt.Out, "events.jsonl"))
		_ = l.w.WriteTraffic(filepath.Join(opt.Out, "traffic.jsonl"))
	}
	l.res.Pass = err == nil
	for _, c := range l.res.Checks {
		l.res.Pass = l.res.Pass && c.OK
	}
	if werr := l.res.Write(opt.Out); werr != nil && err == nil {
		err = werr
	}
	return l.res, err
}

func (l *lab) close() {
	if l.w != nil {
		l.w.Close()
	}
	for _, c := range l.res.Clients {
		if c.vm != nil {
			c.vm.Kill()
		}
	}
	if l.arr != nil {
		l.arr.Stop()
	}
	if l.net != nil {
		l.net.Close()
	}
}

// prepare builds the images (DefaultRelease's and each client's
// release's), the agent, an initrd per image, and aluad.
func (l *lab) prepare(ctx context.Context) error {
	t := time.Now()
	agent := filepath.Join(l.dir, "aluad-agent")
	if err := goBuild(ctx, l.opt.Root, agent, "./cluster-tests/agent", "CGO_ENABLED=0"); err != nil {
		return err
	}
	l.imgs, l.initrds = map[string]Image{}, map[string]string{}
	for _, r := range l.releases() {
		img, err := BuildImage(ctx, filepath.Join(l.opt.Root, "cluster-tests"), "client", r, l.opt.Log)
		if err != nil {
			return err
		}
		l.opt.Log("%s image ready in %v: %s", r, time.Since(t).Round(time.Second), img.Dir)
		l.imgs[r] = img
		l.initrds[r] = filepath.Join(l.dir, "initrd-"+r+".gz")
		if err := BuildInitrd(img, agent, "/bin/busybox", l.initrds[r]); err != nil {
			return err
		}
	}
	l.img = l.imgs[DefaultRelease]
	l.res.ImageMS = time.Since(t).Milliseconds()
	// Static: the TCMU lab runs it in the storage guest.
	return goBuild(ctx, l.opt.Root, filepath.Join(l.dir, "aluad"), "./cmd/aluad", "CGO_ENABLED=0")
}

// releases: DefaultRelease (the storage guest's), then each client's.
func (l *lab) releases() []string {
	rs := []string{DefaultRelease}
	for _, c := range l.opt.Scenario.Clients {
		if r := c.release(); !slices.Contains(rs, r) {
			rs = append(rs, r)
		}
	}
	return rs
}

func (c ClientSpec) release() string { return cmp.Or(c.Release, DefaultRelease) }

func goBuild(ctx context.Context, root, out, pkg string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func (l *lab) run(ctx context.Context) error {
	sc := l.opt.Scenario
	var err error
	nodes := 2
	if l.opt.TCMU {
		nodes = 0 // the port addresses are the storage guest's
	}
	if l.net, err = NewNet(nodes); err != nil {
		return err
	}
	if l.opt.TCMU {
		if err := l.net.AddHostAddrs(); err != nil {
			return err
		}
	}
	var hosts []HostDecl
	for _, c := range sc.Clients {
		cr := &ClientResult{Spec: c, IQN: "iqn.2026-11.org.example:" + c.Name}
		l.res.Clients = append(l.res.Clients, cr)
		hosts = append(hosts, HostDecl{Name: c.Name, Type: c.HostType, IQN: cr.IQN})
	}
	spec := ArraySpec{LUNs: l.opt.LUNs, Hosts: hosts, Capacity: 1e6, FailbackWindow: 5 * time.Second}
	if l.opt.TCMU {
		t := time.Now()
		l.arr, err = StartStorage(ctx, l.net, l.img, filepath.Join(l.dir, "aluad-agent"), "/bin/busybox", filepath.Join(l.dir, "aluad"), l.dir, spec)
		if err == nil {
			l.opt.Log("storage guest up, aluad serving through LIO/TCMU, in %v", time.Since(t).Round(100*time.Millisecond))
		}
	} else {
		l.arr, err = StartArray(ctx, l.net, filepath.Join(l.dir, "aluad"), l.dir, spec)
	}
	if err != nil {
		return err
	}
	l.w = Watch(l.arr.Client, l.arr.ClockOffset)
	if l.opt.TCMU {
		l.opt.Log("storage guest clock offset %v (times from aluad are moved onto the lab's clock)", l.arr.ClockOffset)
	}

	// Boot and set up every client at once.
	var wg sync.WaitGroup
	errs := make([]error, len(l.res.Clients))
	for i, c := range l.res.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.bringUp(ctx, i, c)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	l.setPace()
	for _, c := range l.res.Clients {
		if c.Spec.NoMultipath {
			l.res.check(c.Spec.Name+": every LUN on every path (4 disks per LUN)", len(c.disks) == 4*l.opt.LUNs,
				"%d disks", len(c.disks))
			attached := 0
			for _, line := range strings.Split(c.DHState, "\n") {
				if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "sd") && f[1] == "alua" {
					attached++
				}
			}
			l.res.check(c.Spec.Name+": scsi_dh_alua attached to every path at scan", attached == len(c.disks) && attached > 0,
				"%d of %d paths: %s", attached, len(c.disks), strings.Join(strings.Fields(c.DHState), " "))
			continue
		}
		l.res.check(c.Spec.Name+": one multipath device per LUN, 4 paths each", c.Maps == l.opt.LUNs && c.Paths == 4*l.opt.LUNs,
			"%d maps, %d paths", c.Maps, c.Paths)
		switch {
		case c.Spec.Follows && sc.AOAtEnd:
			l.opt.Log("%s at set-up (checked at the end): %s", c.Spec.Name, strings.Join(c.Problems, "; "))
		case c.Spec.Follows:
			l.res.check(c.Spec.Name+": the active path group is on the owner", c.AOOnOwner, "%s", strings.Join(c.Problems, "; "))
		}
	}

	for _, c := range l.res.Clients {
		if err := l.startFio(ctx, c); err != nil {
			return err
		}
	}
	if sc.Sample {
		if err := l.startSamplers(ctx); err != nil {
			return err
		}
	}
	l.ioStart = time.Now()
	l.opt.Log("fio running on every client; letting it settle")
	if !sleepCtx(ctx, 10*time.Second) {
		return ctx.Err()
	}
	var stepErr error
	if sc.Qualify != "" {
		stepErr = l.qualifyRun(ctx)
	}
	for _, name := range sc.Steps {
		st, err := l.step(ctx, name)
		l.res.Steps = append(l.res.Steps, st)
		if err != nil {
			st.Err = err.Error()
			stepErr = fmt.Errorf("step %s: %w", name, err)
			break
		}
	}
	views := map[string]*guestView{}
	for _, c := range l.res.Clients {
		if err := l.finish(ctx, c); err != nil && stepErr == nil {
			stepErr = err
		}
		if sc.Qualify != "" || sc.Sample {
			v, err := l.collectGuest(ctx, c)
			if err != nil && stepErr == nil {
				stepErr = err
			}
			views[c.Spec.Name] = v
		}
		l.res.check(c.Spec.Name+": zero I/O errors at the application (fio)", c.FioErrors == 0 && c.KernelDMErrors == 0 && c.FioIOs > 0,
			"%d I/Os, %d fio errors, %d errors on the multipath device, %d path errors retried by dm-multipath",
			c.FioIOs, c.FioErrors, c.KernelDMErrors, c.KernelPathErrors)
	}
	l.views = views
	l.judge()
	if sc.Qualify != "" {
		l.judgeQualify(views)
	}
	return stepErr
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// bringUp boots client i, logs it in and checks its multipath view.
func (l *lab) bringUp(ctx context.Context, i int, c *ClientResult) error {
	spec := VMSpec{Name: c.Spec.Name, Index: i, InitiatorName: c.IQN}
	if c.Spec.NoMultipath {
		spec.Modules = noMPModules
	}
	var urls []string
	if c.Spec.LibISCSI {
		for lun := 0; lun < l.opt.LUNs; lun++ {
			for node := 0; node < 2; node++ {
				for f := range Fabrics {
					urls = append(urls, fmt.Sprintf("iscsi://%s/%s/%d", PortAddr(node, f), Target, lun))
				}
			}
		}
		spec.ISCSIDrives = urls
	}
	vm, err := StartVM(ctx, l.net, l.imgs[c.Spec.release()], l.initrds[c.Spec.release()], l.dir, spec)
	if err != nil {
		return err
	}
	c.vm, c.Booted = vm, vm.Booted
	// The set-up's deadlines grow with how slowly the guest booted.
	bp := max(1, vm.Booted.Seconds()/nominalBoot(len(l.res.Clients)).Seconds())
	c.bootPace = bp
	l.opt.Log("%s booted in %v", c.Spec.Name, vm.Booted.Round(100*time.Millisecond))
	if out, err := vm.Sh(ctx, scaleDur(30*time.Second, bp), stackCommand); err == nil {
		c.Stack = strings.TrimSpace(out)
		l.opt.Log("%s runs %s", c.Spec.Name, c.Stack)
	}
	t := time.Now()
	for _, f := range []string{"setup-client.sh", c.Spec.Conf} {
		b, err := os.ReadFile(filepath.Join(l.opt.Root, "cluster-tests", "guest", f))
		if err != nil {
			return err
		}
		if err := vm.Write(ctx, "/run/lab/"+f, b); err != nil {
			return err
		}
	}
	portal := PortAddr(0, 0)
	if c.Spec.LibISCSI {
		portal = ""
	}
	if out, err := vm.Sh(ctx, scaleDur(3*time.Minute, bp), fmt.Sprintf("sh /run/lab/setup-client.sh /run/lab/%s %s %s", c.Spec.Conf, c.IQN, portal)); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	// Wait for dm-multipath to assemble every LUN from all four paths.
	deadline := time.Now().Add(scaleDur(2*time.Minute, bp))
	for !c.Spec.NoMultipath {
		out, err := vm.Sh(ctx, scaleDur(30*time.Second, bp), "multipath -ll")
		maps, perr := ParseMultipathLL(out)
		if err == nil && perr == nil {
			n := 0
			for _, m := range maps {
				n += len(m.Paths())
			}
			c.Maps, c.Paths, c.maps, c.Before = len(maps), n, maps, out
			if len(maps) == l.opt.LUNs && n == 4*l.opt.LUNs {
				break
			}
		}
		if time.Now().After(deadline) {
			l.opt.Log("%s: multipath did not assemble %d LUNs x 4 paths: %v %v\n%s", c.Spec.Name, l.opt.LUNs, err, perr, out)
			break
		}
		if !sleepCtx(ctx, 2*time.Second) {
			return ctx.Err()
		}
	}
	c.SetUp = time.Since(t)
	if err := l.mapDisks(ctx, c, urls); err != nil {
		return err
	}
	if c.Spec.NoMultipath {
		c.DHState, _ = vm.Sh(ctx, scaleDur(30*time.Second, bp), "for d in /sys/block/sd*; do echo $(basename $d) $(cat $d/device/dh_state); done; lsmod | grep -E '^(scsi_dh|dm_)' || true")
		l.opt.Log("%s set up in %v: %d disks, no multipath; device handlers: %s", c.Spec.Name, c.SetUp.Round(100*time.Millisecond), len(c.disks),
			strings.Join(strings.Fields(c.DHState), " "))
		return nil
	}
	l.checkAO(c)
	if len(c.maps) > 0 && len(c.maps[0].Paths()) > 0 {
		dev := "/dev/" + c.maps[0].Paths()[0].Dev
		c.RTPG, _ = vm.Sh(ctx, scaleDur(30*time.Second, bp), "sg_rtpg -d "+dev+"; sg_rtpg -e -d "+dev)
		c.Inquiry, _ = vm.Sh(ctx, scaleDur(30*time.Second, bp), "sg_inq "+dev+"; sg_inq -p 0x83 "+dev)
	}
	l.opt.Log("%s set up in %v: %d maps, %d paths", c.Spec.Name, c.SetUp.Round(100*time.Millisecond), c.Maps, c.Paths)
	return nil
}

// stackCommand prints the guest's release, kernel and the versions of
// its multipath and iSCSI packages.
const stackCommand = `echo "Debian $(cat /etc/debian_version), kernel $(uname -r), multipath-tools $(dpkg-query -W -f '${Version}' multipath-tools), open-iscsi $(dpkg-query -W -f '${Version}' open-iscsi)"`

// mapDisks learns, for every SCSI disk of the guest, its portal and LUN.
func (l *lab) mapDisks(ctx context.Context, c *ClientResult, urls []string) error {
	c.disks = map[string]DiskPath{}
	if !c.Spec.LibISCSI {
		// Many processes per disk: seconds in a loaded TCG guest.
		out, err := c.vm.Sh(ctx, scaleDur(30*time.Second, c.bootPace), DiskScript)
		if err != nil {
			return err
		}
		ds, err := ParseDisks(out)
		if err != nil {
			return err
		}
		for _, d := range ds {
			c.disks[d.Dev] = d
		}
		return nil
	}
	out, err := c.vm.Sh(ctx, scaleDur(30*time.Second, c.bootPace), scsiBlockScript)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var dev string
		var h, ch, id, lun int
		if _, err := fmt.Sscanf(line, "%s %d:%d:%d:%d", &dev, &h, &ch, &id, &lun); err != nil || id >= len(urls) {
			continue
		}
		// iscsi://portal/target/lun
		parts := strings.Split(strings.TrimPrefix(urls[id], "iscsi://"), "/")
		var l uint64
		fmt.Sscan(parts[2], &l)
		c.disks[dev] = DiskPath{Dev: dev, Portal: parts[0] + ":3260", LUN: l}
	}
	return nil
}

// lunOf returns the LUN a map leads to.
func (c *ClientResult) lunOf(m MPath) (uint64, bool) {
	for _, p := range m.Paths() {
		if d, ok := c.disks[p.Dev]; ok {
			return d.LUN, true
		}
	}
	return 0, false
}

// checkAO checks that every map's active group runs on the LUN's owner.
func (l *lab) checkAO(c *ClientResult) {
	luns, err := l.arr.Client.LUNs()
	if err != nil {
		c.Problems = append(c.Problems, err.Error())
		return
	}
	owner := map[uint64]string{}
	for _, x := range luns {
		owner[x.ID] = x.Owner
	}
	c.AOOnOwner = len(c.maps) > 0
	for _, m := range c.maps {
		lun, ok := c.lunOf(m)
		g := m.ActiveGroup()
		if !ok || g == nil {
			c.AOOnOwner = false
			c.Problems = append(c.Problems, m.Name+": no LUN or no active group")
			continue
		}
		for _, p := range g.Paths {
			if n := nodeOfPortal(c.disks[p.Dev].Portal); n != owner[lun] {
				c.AOOnOwner = false
				c.Problems = append(c.Problems, fmt.Sprintf("LUN %d: active group path %s is on node %q, owner %s", lun, p.Dev, n, owner[lun]))
			}
		}
	}
	if c.AOOnOwner {
		c.Problems = append(c.Problems, "every LUN's active group is on its owner")
	}
}

// startFio starts 4 KiB random I/O (70% reads, QD 2, 100 IOPS) on every
// multipath device of a client, until finish stops it.
func (l *lab) startFio(ctx context.Context, c *ClientResult) error {
	var jobs []string
	for _, m := range c.maps {
		lun, _ := c.lunOf(m)
		job := fmt.Sprintf("--name=lun%d --filename=/dev/%s", lun, m.DM)
		if l.opt.Scenario.Sample {
			// Every completion fio counted as done (an error ends the job),
			// stamped with the guest's clock (ms).
			job += fmt.Sprintf(" --write_lat_log=%s%d --log_unix_epoch=1", fioLatLog, lun)
		}
		jobs = append(jobs, job)
	}
	if c.Spec.NoMultipath { // one disk per LUN: the path through node a's first portal
		devs := make([]string, 0, len(c.disks))
		for dev := range c.disks {
			devs = append(devs, dev)
		}
		sort.Strings(devs)
		for _, dev := range devs {
			if d := c.disks[dev]; d.Portal == PortAddr(0, 0)+":3260" {
				jobs = append(jobs, fmt.Sprintf("--name=lun%d --filename=/dev/%s", d.LUN, dev))
			}
		}
	}
	_, err := c.vm.Sh(ctx, l.scaled(30*time.Second), FioCommand(jobs))
	return err
}

// FioCommand starts the lab's client I/O in the background, one job per
// device ("--name=lun0 --filename=/dev/dm-0 ..."): 4 KiB random I/O, 70%
// reads, QD 2, 100 IOPS, until FioStop.
func FioCommand(jobs []string) string {
	return "fio --output-format=json --output=/tmp/fio.json --ioengine=libaio --direct=1 --rw=randrw --rwmixread=70 " +
		"--bs=4k --iodepth=2 --rate_iops=70,30 --time_based --runtime=3600 " + strings.Join(jobs, " ") +
		" >/tmp/fio.log 2>&1 & echo $! >/tmp/fio.pid"
}

// FioStop stops FioCommand's fio (SIGINT: it writes its results) and
// prints its JSON results.
const FioStop = `p=$(cat /tmp/fio.pid); kill -INT $p; while kill -0 $p 2>/dev/null; do sleep 0.2; done; cat /tmp/fio.json`

// ParseFio reads FioStop's output.
func ParseFio(out string) (FioResult, error) {
	var fr FioResult
	i := strings.Index(out, "{")
	if i < 0 {
		return fr, fmt.Errorf("fio printed no JSON results")
	}
	if err := json.Unmarshal([]byte(out[i:]), &fr); err != nil {
		return fr, fmt.Errorf("fio's JSON results: %w", err)
	}
	return fr, nil
}

// finish stops fio and collects errors and the final multipath view.
func (l *lab) finish(ctx context.Context, c *ClientResult) error {
	out, err := c.vm.Sh(ctx, l.scaled(2*time.Minute), FioStop)
	if err != nil {
		return err
	}
	fr, err := ParseFio(out)
	if err != nil {
		log, _ := c.vm.Sh(ctx, 10*time.Second, "tail -20 /tmp/fio.log")
		return fmt.Errorf("%s: fio printed no JSON results: %s", c.Spec.Name, log)
	}
	for _, j := range fr.Jobs {
		c.FioIOs += j.Read.IOs + j.Write.IOs
		if j.Error != 0 {
			c.FioErrors++
		}
	}
	if l.opt.Scenario.Sample {
		if err := l.readFioDone(ctx, c); err != nil {
			return err
		}
	}
	// A count the guest did not answer in time is not zero: it fails the
	// zero-errors check (-1) instead of passing it.
	count := func(pattern string) int {
		out, err := c.vm.Sh(ctx, l.scaled(30*time.Second), "dmesg | grep -c '"+pattern+"' || true")
		n := -1
		if err == nil {
			if _, err := fmt.Sscan(strings.TrimSpace(out), &n); err != nil {
				n = -1
			}
		}
		return n
	}
	c.KernelDMErrors = count("I/O error, dev dm-")
	c.KernelPathErrors = count("I/O error, dev sd")
	c.After, _ = c.vm.Sh(ctx, l.scaled(30*time.Second), "multipath -ll")
	if l.opt.Scenario.AOAtEnd && c.Spec.Follows {
		maps, err := ParseMultipathLL(c.After)
		if err != nil {
			maps = nil
		}
		c.maps, c.Problems = maps, nil
		l.checkAO(c)
		l.res.check(c.Spec.Name+": the active path group is on the owner at the end", c.AOOnOwner, "%s", strings.Join(c.Problems, "; "))
	}
	for name, cmd := range map[string]string{"dmesg": "dmesg", "multipathd": "cat /var/log/aluad-lab/multipathd.log"} {
		if out, err := c.vm.Sh(ctx, 30*time.Second, cmd); err == nil {
			_ = os.WriteFile(filepath.Join(l.dir, c.Spec.Name+"."+name+".log"), []byte(out), 0o644)
		}
	}
	return nil
}

// step runs one ownership step under I/O and times how each client followed.
func (l *lab) step(ctx context.Context, name string) (*StepResult, error) {
	st := &StepResult{Name: name, Start: time.Now()}
	cl := l.arr.Client
	luns, err := cl.LUNs()
	if err != nil {
		return st, err
	}
	owner0 := luns[0].Owner
	other := map[string]string{"a": "b", "b": "a"}
	var want func(api.Event) bool
	wait := 30 * time.Second
	// returning: the node whose paths come back (failback, restart): the
	// wait for the array's failback is derived from when the guests are
	// back on it (failbackDeadline).
	returning := ""
	l.opt.Log("step %s", name)
	switch name {
	case "move":
		if _, err := cl.Move(0, other[owner0]); err != nil {
			return st, err
		}
		want = func(e api.Event) bool { return e.Change.Cause == "manual" }
	case "rebalance":
		if err := l.calibrate(ctx); err != nil {
			return st, err
		}
		// The skew: every LUN onto LUN 0's owner.
		st.Start = time.Now()
		for _, x := range luns {
			if x.Owner != owner0 {
				if _, err := cl.Move(x.ID, owner0); err != nil {
					return st, err
				}
			}
		}
		want = func(e api.Event) bool { return e.Change.Cause != "manual" }
		wait = 60 * time.Second
	case "failover":
		if l.opt.TCMU {
			// LIO has no per-initiator switch: every client's links to the
			// owner are cut by taking the owner's ports (TPGs) down.
			for f := range Fabrics {
				if _, err := cl.Inject(api.Fault{Kind: api.FaultPortDown, Port: fmt.Sprintf("%s%d", owner0, f)}); err != nil {
					return st, err
				}
			}
			want = func(e api.Event) bool { return e.Change.Cause == "failover" }
			break
		}
		for _, c := range l.res.Clients {
			for f := range Fabrics {
				if _, err := cl.Inject(api.Fault{Kind: api.FaultPathDown, Port: fmt.Sprintf("%s%d", owner0, f), Initiator: c.IQN}); err != nil {
					return st, err
				}
			}
		}
		want = func(e api.Event) bool { return e.Change.Cause == "failover" }
	case "failback":
		if _, err := cl.Inject(api.Fault{Kind: api.FaultClear}); err != nil {
			return st, err
		}
		want = func(e api.Event) bool { return e.Change.Cause == "failback" }
		wait = 90 * time.Second
		returning = other[owner0]
	case "power-loss":
		// LUN 0's owner loses power: its ports go silent, so the guests
		// learn of it only when their NOP-Out pings time out.
		if l.opt.TCMU {
			return st, errors.New("power-loss needs the pure-Go target (LIO has only the TPG switch)")
		}
		if _, err := cl.Inject(api.Fault{Kind: api.FaultPowerLoss, Node: owner0}); err != nil {
			return st, err
		}
		l.down = owner0
		want = func(e api.Event) bool { return e.Change.Cause == "failover" }
	case "restart":
		if l.down == "" {
			return st, errors.New("restart needs a power-loss step before it")
		}
		if _, err := cl.Inject(api.Fault{Kind: api.FaultRestart, Node: l.down}); err != nil {
			return st, err
		}
		returning = l.down
		l.down = ""
		want = func(e api.Event) bool { return e.Change.Cause == "failback" }
		wait = 90 * time.Second
	case "observe":
		return st, l.observe(ctx, st)
	case "logout-owner", "login-owner":
		return st, l.portalStep(ctx, st, name)
	default:
		return st, fmt.Errorf("unknown step %q", name)
	}
	// Wait for the change the step is about.
	deadline := st.Start.Add(wait)
	var seen bool
	for !seen {
		for _, e := range l.w.Changes(st.Start) {
			seen = seen || want(e)
		}
		if seen {
			break
		}
		if returning != "" {
			deadline = maxT(deadline, l.failbackDeadline(st.Start, returning, wait))
		}
		if time.Now().After(deadline) {
			err := fmt.Errorf("no %s move within %v", name, time.Since(st.Start).Round(time.Second))
			if returning != "" {
				err = fmt.Errorf("%w: %s", err, l.evidence(st.Start, returning))
			}
			return st, err
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return st, ctx.Err()
		}
	}
	if returning != "" {
		// How long after the guests were back the array failed back.
		st.Notes = append(st.Notes, l.evidence(st.Start, returning))
	}
	// Then give every client time to follow every change. QEMU's libiscsi
	// driver reconnects under a guest and holds its I/O, so such a guest
	// notices a lost path only at its SCSI command timeout (30 s) and
	// error handling: give a failover longer.
	window := l.scaled(l.opt.Follow)
	for _, c := range l.res.Clients {
		if c.Spec.LibISCSI && name == "failover" {
			window = max(window, 90*time.Second)
		}
	}
	until := time.Now().Add(window)
	for {
		done := true
		now := time.Now()
		st.Follows = st.Follows[:0]
		st.Changes = st.Changes[:0]
		for _, e := range l.w.Changes(st.Start) {
			st.Changes = append(st.Changes, fmt.Sprintf("+%v LUNs %v %s -> %s (%s; I/O held %v)", e.Time.Sub(st.Start).Round(100*time.Millisecond),
				e.Change.LUNs, e.Change.From, e.Change.To, e.Change.Cause, e.Change.Stop.Round(time.Microsecond)))
			if e.Change.To == "" || e.Change.From == "" {
				continue // a node going down or up moves no LUN: nothing to follow
			}
			for _, lun := range e.Change.LUNs {
				for _, c := range l.res.Clients {
					f := l.w.follow(c.IQN, lun, e, now)
					f.Host = c.Spec.Name
					st.Follows = append(st.Follows, f)
					done = done && f.Done()
				}
			}
		}
		if done || now.After(until) {
			break
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return st, ctx.Err()
		}
	}
	// Every client's view after the step, all at once: `multipath -ll`
	// runs the path checkers and takes seconds in a busy TCG guest.
	st.MultipathLL = map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range l.res.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := c.vm.Sh(ctx, l.scaled(20*time.Second), "multipath -ll"); err == nil {
				mu.Lock()
				st.MultipathLL[c.Spec.Name] = out
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range st.Follows {
		if f.Done() {
			ua := "UA not seen by aluad (LIO queues it)"
			if !f.UA.IsZero() {
				ua = fmt.Sprintf("UA +%v", f.UA.Sub(f.Moved).Round(time.Millisecond))
			}
			l.opt.Log("  %s LUN %d %s->%s (%s): %s, switched +%v", f.Host, f.LUN, f.From, f.To, f.Cause,
				ua, f.MoveToSwitch().Round(time.Millisecond))
		} else {
			l.opt.Log("  %s LUN %d %s->%s (%s): not on the new owner within %v", f.Host, f.LUN, f.From, f.To, f.Cause, window)
		}
	}
	return st, nil
}

// observe lets the array watch the clients' I/O past its follow window
// (30 s) and ship window (60 s), then records the reports, the owners and
// the I/O forwarded between nodes over the last 5 s.
func (l *lab) observe(ctx context.Context, st *StepResult) error {
	obs := cmp.Or(l.opt.Scenario.Observe, 80*time.Second)
	until := time.Now().Add(obs)
	if l.opt.Scenario.Boot {
		// At least Observe after every guest's last login (its boot).
		for _, c := range l.res.Clients {
			if t, _ := l.w.LastLogin(c.IQN, "", l.res.Started); !t.IsZero() {
				until = maxT(until, t.Add(obs))
			}
		}
	}
	if !sleepCtx(ctx, time.Until(until)) {
		return ctx.Err()
	}
	cl := l.arr.Client
	forwarded := func() (uint64, error) {
		luns, err := cl.LUNs()
		var n uint64
		for _, x := range luns {
			for _, nd := range x.Nodes {
				n += nd.Forwarded
			}
		}
		return n, err
	}
	a, err := forwarded()
	if err != nil {
		return err
	}
	if !sleepCtx(ctx, 5*time.Second) {
		return ctx.Err()
	}
	b, err := forwarded()
	if err != nil {
		return err
	}
	st.Forwarded = b - a
	rs, err := cl.Reports()
	if err != nil {
		return err
	}
	for _, r := range rs {
		st.Reports = append(st.Reports, fmt.Sprintf("%s %s %s: %s", r.Condition, r.Host, r.Node, r.Cause))
	}
	luns, err := cl.LUNs()
	if err != nil {
		return err
	}
	st.Owners = map[uint64]string{}
	for _, x := range luns {
		st.Owners[x.ID] = x.Owner
	}
	l.opt.Log("  owners %v, %d commands forwarded in the last 5 s, reports: %v", st.Owners, st.Forwarded, st.Reports)
	return nil
}

// calibrate sets the nodes' capacity from the clients' measured load so
// that all LUNs on one node run it at about 90% and a balanced placement
// at about 45%: the array's own ROI check then decides the rebalance.
func (l *lab) calibrate(ctx context.Context) error {
	total := func() (uint64, error) {
		ios, err := l.arr.Client.IO()
		var n uint64
		for _, p := range ios {
			n += p.Media
		}
		return n, err
	}
	a, err := total()
	if err != nil {
		return err
	}
	t := time.Now()
	if !sleepCtx(ctx, 5*time.Second) {
		return ctx.Err()
	}
	b, err := total()
	if err != nil {
		return err
	}
	iops := float64(b-a) / time.Since(t).Seconds()
	work := iops * 0.1 * (1 + 4096.0/65536) // per 100 ms tick, 4 KiB commands
	capacity := max(work*1.1, 1)
	l.opt.Log("  load %.0f IOPS: node capacity %.1f units per tick", iops, capacity)
	for _, n := range []string{"a", "b"} {
		if err := l.arr.Client.SetCapacity(n, capacity); err != nil {
			return err
		}
	}
	return nil
}

// judge adds the checks on the steps.
func (l *lab) judge() {
	for _, st := range l.res.Steps {
		if st.Err != "" {
			continue
		}
		if st.Name == "observe" {
			l.judgeObserve(st)
		}
		if st.Name == "logout-owner" || st.Name == "login-owner" {
			l.judgePortal(st)
		}
		for _, f := range st.Follows {
			c := l.client(f.Host)
			if c == nil || f.Cause == "manual" && st.Name == "rebalance" {
				continue // the skew is the operator's; the balance move is judged
			}
			// A host declared Linux DM-MP must run I/O on the new owner
			// within 1 s of a planned move (a failover waits for the
			// host to find its path gone: its own timers).
			planned := f.Cause == "manual" || f.Cause == "failback" || f.Cause == "balance" || f.Cause == "shipping"
			if c.Spec.HostType == "linux-dmmp" && planned {
				l.res.check(fmt.Sprintf("%s: %s (%s) of LUN %d: I/O on the new owner within 1 s", f.Host, st.Name, f.Cause, f.LUN),
					f.Done() && f.MoveToSwitch() <= time.Second, "%s", describe(f))
			} else if c.Spec.Follows {
				l.res.check(fmt.Sprintf("%s: %s (%s) of LUN %d followed", f.Host, st.Name, f.Cause, f.LUN), f.Done(), "%s", describe(f))
			}
		}
	}
	l.judgeMoves()
	sort.SliceStable(l.res.Checks, func(i, j int) bool { return l.res.Checks[i].Name < l.res.Checks[j].Name })
}

// judgeObserve: a client at multipathd's defaults declared linux (ANO)
// raises Host Type Incorrect and its LUNs end where its I/O arrives;
// any other raises no Host Type Incorrect. Either way, at the end, no
// I/O is forwarded between nodes.
func (l *lab) judgeObserve(st *StepResult) {
	for _, c := range l.res.Clients {
		hti := false
		mnd := map[string]bool{}
		for _, r := range st.Reports {
			if strings.HasPrefix(r, "host-type-incorrect "+c.Spec.Name+" ") {
				hti = true
			}
			for _, n := range []string{"a", "b"} {
				if strings.HasPrefix(r, "multipath-not-discovering-paths "+c.Spec.Name+" "+n+":") {
					mnd[n] = true
				}
			}
		}
		if c.Spec.NoMultipath {
			l.res.check(c.Spec.Name+": Multipath Not Discovering Paths raised for node b, not a", mnd["b"] && !mnd["a"], "%v", st.Reports)
			l.judgeMNDTime(c, "b")
			// Its scsi_dh_alua reads RTPG on every path: its type (linux,
			// ANO) is right for a host that uses one path.
			l.res.check(c.Spec.Name+": no Host Type Incorrect", !hti, "%v", st.Reports)
			continue
		}
		l.res.check(c.Spec.Name+": no Multipath Not Discovering Paths", !mnd["a"] && !mnd["b"], "%v", st.Reports)
		if c.Spec.Conf == "multipath-defaults.conf" && c.Spec.HostType == "linux" {
			l.res.check(c.Spec.Name+": Host Type Incorrect raised (it does not follow moves)", hti, "%v", st.Reports)
		} else {
			l.res.check(c.Spec.Name+": no Host Type Incorrect", !hti, "%v", st.Reports)
		}
	}
	for _, c := range l.res.Clients {
		if c.Spec.NoMultipath {
			// Its I/O arrives at a; another client's may arrive at the
			// LUN's owner, b, and until that one's following has been
			// judged neither LUN may leave where an unjudged user's I/O
			// arrives (docs/ownership.md): forwarding is a figure here.
			st.Notes = append(st.Notes, fmt.Sprintf("%d commands forwarded in the last 5 s; owners %v (not judged: "+
				"a LUN leaves no node where the I/O of a user that cannot follow, or is not judged yet, arrives)",
				st.Forwarded, st.Owners))
			return
		}
	}
	l.res.check("the LUNs end where the I/O arrives (nothing forwarded in the last 5 s)", st.Forwarded == 0,
		"%d commands forwarded; owners %v", st.Forwarded, st.Owners)
}

func (l *lab) client(name string) *ClientResult {
	for _, c := range l.res.Clients {
		if c.Spec.Name == name {
			return c
		}
	}
	return nil
}

func describe(f Follow) string {
	if f.Already {
		return "already sending I/O to the new owner before the move"
	}
	if !f.Done() {
		return "still on the old owner at the end of the window"
	}
	s := fmt.Sprintf("switched %v after the move", f.MoveToSwitch().Round(time.Millisecond))
	if !f.UA.IsZero() {
		s += fmt.Sprintf(", %v after its UA", f.UAToSwitch().Round(time.Millisecond))
	}
	return s
}
