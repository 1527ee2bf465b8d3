package vagrantlab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/cluster-tests/qemulab"
)

// Options configure a smoke run.
type Options struct {
	Dir     string // the Vagrantfile's directory
	Out     string // where results.json and results.md go
	Ready   time.Duration
	Follow  time.Duration // how long a step may take to be followed
	Restart time.Duration // how long a controller VM may take to boot and get its LUNs back
	// Failback: with a client that does not follow, how long after every
	// client reaches the restarted controller again its LUN's owner is
	// watched (past the core's failback window) before it is read.
	Failback time.Duration
	Settle   time.Duration
	Destroy  bool // vagrant destroy -f at the end, and check nothing is left
	Log      func(format string, args ...any)
}

// Client is one client VM of the smoke.
type Client struct {
	Name, Initiator string
	// Follows: its configuration is expected to run its I/O on a LUN's
	// owner after a move (qemulab's client of the same name); the others
	// are measured and reported, not judged.
	Follows   bool
	Offset    time.Duration     // its clock minus the host's
	Maps      []string          // multipath -ll of each map, for the record
	Devs      map[uint64]string // LUN -> dm device
	ready     map[string]int    // node -> active paths up (ready or ghost), the fewest of any map
	FioErrors int
	FioIOs    uint64
	done      map[uint64][]time.Time
}

// StepResult is one step's figures for one client and LUN.
type StepResult struct {
	Step     string  `json:"step"`
	Client   string  `json:"client"`
	LUN      uint64  `json:"lun"`
	From     string  `json:"from,omitempty"`
	To       string  `json:"to,omitempty"`
	FollowMS float64 `json:"follow_ms,omitempty"` // -1: never
	Judged   bool    `json:"judged,omitempty"`    // a follow required of this client
	Already  bool    `json:"already,omitempty"`   // its I/O was at the new owner before the step
	StallMS  float64 `json:"stall_ms"`
}

// Result is a whole smoke run.
type Result struct {
	Start      time.Time           `json:"start"`
	Steps      []StepResult        `json:"steps"`
	FioErrors  map[string]int      `json:"fio_errors"`
	FioIOs     map[string]uint64   `json:"fio_ios"`
	Multipath  map[string][]string `json:"multipath"`
	Resolution time.Duration       `json:"poll_resolution_ns"`
	Fence      []string            `json:"fence"` // what the witness's fence agent logged, as checked
	Notes      []string            `json:"notes,omitempty"`
	Leftovers  []string            `json:"leftovers,omitempty"`
	Failures   []string            `json:"failures,omitempty"`
	DurationS  float64             `json:"duration_s"`
}

type step struct {
	name       string
	lun        uint64
	from, to   string
	start, end time.Time
	followed   map[string]Follow
	endOwner   string // the LUN's owner at the step's end, as the controllers said
	// unjudged: no client is expected to follow (the array withholds the
	// move by its own rule); the follows are measured, not judged.
	unjudged bool
}

// Run runs the smoke.
func Run(ctx context.Context, o Options) (*Result, error) {
	logf := o.Log
	res := &Result{Start: time.Now(), FioErrors: map[string]int{}, FioIOs: map[string]uint64{}, Multipath: map[string][]string{}}
	m, err := OpenMachines(ctx, o.Dir)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	tok, err := os.ReadFile(filepath.Join(o.Dir, ".vagrant", "aluad", "api-token"))
	if err != nil {
		return nil, fmt.Errorf("the controllers' API token (made by the Vagrantfile): %w", err)
	}
	var ctrls []Controller
	var clients []*Client
	for _, n := range m.Names {
		switch {
		case strings.HasPrefix(n, "ctrl-"):
			ctrls = append(ctrls, Controller{Machine: n, Node: strings.TrimPrefix(n, "ctrl-"),
				Base: "http://" + m.Hosts[n] + ":8080", Token: strings.TrimSpace(string(tok))})
		case len(n) > 1 && n[0] == 'c' && n[1] >= '0' && n[1] <= '9':
			spec, ok := qemulab.ClientByName(n)
			if !ok {
				return nil, fmt.Errorf("client %s: no such client configuration (c1..c7, cluster-tests/qemulab)", n)
			}
			clients = append(clients, &Client{Name: n, Initiator: "iqn.2026-11.org.example:" + n, Devs: map[uint64]string{}, Follows: spec.Follows})
		}
	}
	if len(ctrls) != 2 || len(clients) == 0 {
		return nil, fmt.Errorf("want ctrl-a, ctrl-b and clients in vagrant ssh-config, have %v", m.Names)
	}
	byNode := map[string]Controller{}
	for _, c := range ctrls {
		byNode[c.Node] = c
	}

	logf("waiting for every client's multipath maps (one per LUN, paths to both controllers)")
	if err := waitMaps(ctx, m, clients, o.Ready, logf); err != nil {
		return nil, err
	}
	for _, c := range clients {
		res.Multipath[c.Name] = c.Maps
		if c.Offset, err = m.Clock(ctx, c.Name); err != nil {
			return nil, err
		}
	}
	down := "" // the controller powered off: not asked (a call to it waits out its timeout)
	owner := func(lun uint64) (string, error) {
		var last error
		for _, c := range upFirstB(ctrls, down) {
			ls, err := c.Client().LUNs()
			if err != nil {
				last = err
				continue
			}
			for _, l := range ls {
				if l.ID == lun && !l.Moving {
					return l.Owner, nil
				}
			}
		}
		return "", fmt.Errorf("LUN %d's owner: %v", lun, last)
	}
	first, err := owner(0)
	if err != nil {
		return nil, err
	}
	// A ctrl-a the array already holds unstable (earlier runs' power
	// losses within its crash window) gets no failback: the run would not
	// test one, and its power loss would restart the window.
	if why, _ := unstableReport(ctrls, "", "a"); why != "" {
		return nil, fmt.Errorf("the array holds node a unstable (%s): its failback would not be tested. "+
			"Clear the report (aluad report clear --condition node-unstable --node a), or run on a fresh vagrant up", why)
	}
	logf("fio on %d clients", len(clients))
	for _, c := range clients {
		var jobs []string
		for lun, dev := range c.Devs {
			jobs = append(jobs, fmt.Sprintf("--name=lun%d --filename=/dev/%s --write_lat_log=/tmp/fio-lun%d --log_unix_epoch=1", lun, dev, lun))
		}
		sort.Strings(jobs)
		if _, err := m.Sh(ctx, time.Minute, c.Name, "rm -f /tmp/fio-lun*; "+qemulab.FioCommand(jobs)); err != nil {
			return nil, err
		}
	}
	w := Watch(ctrls, 100*time.Millisecond)
	defer w.Close()
	sleep(ctx, o.Settle)

	var steps []*step
	luns := sortedLUNs(clients)
	wait := func(st *step, limit time.Duration, cond func() bool) {
		deadline := st.start.Add(limit)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			now := time.Now()
			all := cond == nil || cond()
			for _, c := range clients {
				f := w.Follow(c.Initiator, st.lun, st.from, st.to, st.start, now, 2*time.Second)
				if f.Switched.IsZero() && c.Follows && !st.unjudged {
					all = false // a client not judged is measured while the judged ones are waited for
				}
				st.followed[c.Name] = f
			}
			if all {
				break
			}
			sleep(ctx, 500*time.Millisecond)
		}
		sleep(ctx, o.Settle)
		st.end = time.Now()
		// The verdict reads each controller's I/O up to the step's end: a
		// poll asked after it, from every controller that is not off.
		for deadline := st.end.Add(5 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
			fresh := true
			for _, c := range ctrls {
				fresh = fresh && (c.Node == down || w.AnsweredSince(c.Node, st.end))
			}
			if fresh {
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
		if ow, err := owner(st.lun); err != nil {
			st.endOwner = err.Error()
		} else {
			st.endOwner = ow
		}
		for _, c := range clients {
			st.followed[c.Name] = w.Follow(c.Initiator, st.lun, st.from, st.to, st.start, st.end, 2*time.Second)
		}
	}
	ownerIs := func(lun uint64, node string) func() bool {
		return func() bool { o, err := owner(lun); return err == nil && o == node }
	}
	move := func(lun uint64, from, to string) (*step, error) {
		st := &step{name: fmt.Sprintf("move LUN %d to %s", lun, to), lun: lun, from: from, to: to, start: time.Now(), followed: map[string]Follow{}}
		logf("%s", st.name)
		if _, err := byNode["a"].Client().Move(lun, to); err != nil {
			if _, err2 := byNode["b"].Client().Move(lun, to); err2 != nil {
				return nil, fmt.Errorf("%s: %v; %v", st.name, err, err2)
			}
		}
		wait(st, o.Follow, ownerIs(lun, to))
		return st, nil
	}
	if first != "a" {
		// An earlier run's end (a failback withheld): the run starts from
		// the preferred layout, set by the operator's move and followed
		// before the first step (not a step of the run).
		logf("LUN 0 is on node %s: it goes to its preferred owner a before the run", first)
		st, err := move(0, first, "a")
		if err != nil {
			return nil, err
		}
		if ow, err := owner(0); err != nil || ow != "a" {
			return nil, fmt.Errorf("LUN 0 is not on a %v after its move there (%s %v)", o.Follow, ow, errOrNil(err))
		}
		for _, c := range clients {
			if c.Follows && st.followed[c.Name].Switched.IsZero() {
				// Its first step would find it "already there".
				res.Failures = append(res.Failures, fmt.Sprintf("%s: the move of LUN 0 back to a before the run: its I/O never ran on a alone", c.Name))
			}
		}
	}
	from := "a"
	for _, to := range []string{"b", "a"} {
		st, err := move(0, from, to)
		if err != nil {
			return nil, err
		}
		steps, from = append(steps, st), to
	}
	dom, err := m.Domain("ctrl-a")
	if err != nil {
		return nil, err
	}
	lost, err := bootID(ctx, m, "ctrl-a")
	if err != nil {
		return nil, err
	}
	st := &step{name: "ctrl-a power loss", lun: 0, from: "a", to: "b", start: time.Now(), followed: map[string]Follow{}}
	logf("%s (virsh destroy; boot %s)", st.name, lost)
	if _, err := Virsh(ctx, "destroy", dom); err != nil {
		return nil, err
	}
	down = "a"
	w.Down("a")
	wait(st, o.Follow, ownerIs(0, "b"))
	steps = append(steps, st)
	// The survivor took LUN 0 only after the witness cut the lost boot
	// from the LUN files (the witness's own log, not the controllers').
	fenced := fmt.Sprintf("fenced node a (10.77.3.10, boot %s)", lost)
	if err := witnessSaid(ctx, m, fenced); err != nil {
		res.Failures = append(res.Failures, err.Error())
	} else {
		res.Fence = append(res.Fence, fenced)
	}
	st = &step{name: "ctrl-a starts", lun: 0, from: "b", to: "a", start: time.Now(), followed: map[string]Follow{}}
	// The array fails a LUN back only where every user's I/O would
	// follow (docs/ownership.md): with a client whose configuration does
	// not follow (c4: failback followover), LUN 0 stays on b, and the step
	// ends once every client reaches ctrl-a again.
	var stays []string
	for _, c := range clients {
		if !c.Follows {
			stays = append(stays, c.Name)
		}
	}
	st.unjudged = len(stays) > 0
	if st.unjudged {
		logf("%s (virsh start; %s does not follow: the array is expected to keep LUN 0 on b)", st.name, strings.Join(stays, ", "))
	} else {
		logf("%s (virsh start; it fails LUN 0 back once its hosts reach it again)", st.name)
	}
	if _, err := Virsh(ctx, "start", dom); err != nil {
		return nil, err
	}
	down = ""
	// A node that failed crash_count times within the crash window
	// (earlier smoke runs on the same vagrant up count) is unstable: the
	// array withholds its failback by design (docs/ownership.md). The
	// failback is then not tested: the step ends once the hosts reach a
	// again, and says why.
	unstable, unstableErr := "", error(nil)
	withheld := func() bool {
		if unstable == "" {
			unstable, unstableErr = unstableReport(ctrls, down, "a")
		}
		if unstable != "" {
			st.unjudged = true
		}
		return unstable != ""
	}
	if st.unjudged {
		wait(st, o.Restart, func() bool { withheld(); return reachAgain(ctx, m, clients, "a") })
		if !reachAgain(ctx, m, clients, "a") {
			res.Failures = append(res.Failures, fmt.Sprintf("ctrl-a starts: not every client had two ready paths to it again within %v", o.Restart))
		}
		// The core's failback window runs from when the hosts reach a
		// again: past it (and failback_after), LUN 0's owner says what
		// the array decided. Failed back after all, the clients that
		// follow are judged as for any failback.
		for deadline := time.Now().Add(o.Failback); !withheld() && time.Now().Before(deadline) && !ownerIs(0, "a")(); {
			sleep(ctx, 2*time.Second)
		}
		if unstable == "" {
			ow, err := owner(0)
			if ow == "a" {
				st.unjudged = false
				wait(st, time.Since(st.start)+o.Follow, nil)
			}
			why := fmt.Sprintf("kept on b: the array makes no failback that would leave the I/O of %s forwarded, once it has seen it not follow", strings.Join(stays, ", "))
			if ow == "a" {
				why = fmt.Sprintf("failed back: the array had not seen %s not follow yet; the clients that follow were judged", strings.Join(stays, ", "))
			}
			res.Notes = append(res.Notes, fmt.Sprintf("ctrl-a starts: LUN 0's owner %v after every client reached a again: %s %s(%s)",
				o.Failback, ow, errOrNil(err), why))
		}
	} else {
		// Unstable, the array makes no failback: the step still waits for
		// the hosts to reach a again (the boot, unfence and paths are
		// checked), not for the failback.
		wait(st, o.Restart, func() bool {
			if withheld() {
				return reachAgain(ctx, m, clients, "a")
			}
			return ownerIs(0, "a")()
		})
		if unstable != "" && !reachAgain(ctx, m, clients, "a") {
			res.Failures = append(res.Failures, fmt.Sprintf("ctrl-a starts: not every client had two ready paths to it again within %v", o.Restart))
		}
	}
	if unstable != "" {
		why := fmt.Sprintf("ctrl-a starts: the failback was not tested: the array raised node-unstable for a (%s) and withholds its failback by design; "+
			"earlier smoke runs' power losses count (3 within 30 min): clear the report (aluad report clear --condition node-unstable --node a) or run on a fresh vagrant up", unstable)
		if len(stays) > 0 {
			// With a client that does not follow, LUN 0 staying on b is an
			// outcome the step accepts anyway.
			res.Notes = append(res.Notes, why)
		} else {
			res.Failures = append(res.Failures, why)
		}
	} else if unstableErr != nil {
		res.Notes = append(res.Notes, "ctrl-a starts: the reports could not be read: "+unstableErr.Error())
	}
	steps = append(steps, st)
	// Its new boot was let in again; the fenced one stays out.
	boot, err := bootID(ctx, m, "ctrl-a")
	switch {
	case err != nil:
		res.Failures = append(res.Failures, "ctrl-a after its start: "+err.Error())
	case boot == lost:
		res.Failures = append(res.Failures, "ctrl-a runs the boot that was fenced: virsh start did not boot it")
	default:
		unfenced := fmt.Sprintf("unfenced node a (10.77.3.10, boot %s)", boot)
		if err := witnessSaid(ctx, m, unfenced); err != nil {
			res.Failures = append(res.Failures, err.Error())
		} else {
			res.Fence = append(res.Fence, unfenced)
		}
	}
	res.Resolution = w.Resolution()

	logf("stopping fio")
	for _, c := range clients {
		out, err := m.Sh(ctx, 2*time.Minute, c.Name, qemulab.FioStop)
		if err != nil {
			return nil, err
		}
		fr, err := qemulab.ParseFio(out)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		for _, j := range fr.Jobs {
			c.FioIOs += j.Read.IOs + j.Write.IOs
			if j.Error != 0 {
				c.FioErrors++
			}
		}
		res.FioErrors[c.Name], res.FioIOs[c.Name] = c.FioErrors, c.FioIOs
		c.done = map[uint64][]time.Time{}
		for lun := range c.Devs {
			out, err := m.Sh(ctx, 2*time.Minute, c.Name, fmt.Sprintf("cat /tmp/fio-lun%d_clat.*.log | cut -d, -f1", lun))
			if err != nil {
				return nil, err
			}
			c.done[lun] = parseTimes(out, c.Offset)
		}
		if c.FioErrors > 0 {
			res.Failures = append(res.Failures, fmt.Sprintf("%s: fio stopped %d jobs on an I/O error", c.Name, c.FioErrors))
		}
	}
	for _, st := range steps {
		for _, c := range clients {
			for _, lun := range luns {
				gap, _ := qemulab.LongestGap(c.done[lun], st.start, st.end)
				r := StepResult{Step: st.name, Client: c.Name, LUN: lun, StallMS: ms(gap)}
				if lun == st.lun {
					r.From, r.To, r.Judged = st.from, st.to, c.Follows && !st.unjudged
					if f := st.followed[c.Name]; f.Switched.IsZero() {
						r.FollowMS = -1
						if r.Judged {
							res.Failures = append(res.Failures, fmt.Sprintf("%s: %s: its I/O to LUN %d never ran on node %s alone (%s; owner at the end %s)", c.Name, st.name, lun, st.to, f.Evidence(st.from, st.to, st.start, st.end), st.endOwner))
						}
					} else if f.Already {
						r.Already = true
					} else {
						r.FollowMS = ms(f.Switched.Sub(st.start))
					}
				}
				res.Steps = append(res.Steps, r)
			}
		}
	}
	if o.Destroy {
		left, err := destroy(ctx, m, logf)
		if err != nil {
			return nil, err
		}
		res.Leftovers = left
		for _, l := range left {
			res.Failures = append(res.Failures, "left behind after vagrant destroy: "+l)
		}
	}
	res.DurationS = time.Since(res.Start).Seconds()
	return res, res.write(o.Out)
}

// upFirstB are the controllers to ask, but the one powered off (down),
// b first: a is the one the smoke power-cycles.
func upFirstB(ctrls []Controller, down string) []Controller {
	var out []Controller
	for i := range ctrls {
		if c := ctrls[len(ctrls)-1-i]; c.Node != down {
			out = append(out, c)
		}
	}
	return out
}

// unstableReport is the cause of the node-unstable report for node,
// as the first controller (but down) that answers GET /v1/reports says
// ("" if none); the error is the last controller's if none answered (in
// cluster mode only the leader answers).
func unstableReport(ctrls []Controller, down, node string) (string, error) {
	var last error = fmt.Errorf("no controller to ask")
	for _, c := range upFirstB(ctrls, down) {
		rs, err := c.Client().Reports()
		if err != nil {
			last = err
			continue
		}
		for _, r := range rs {
			if r.Condition == "node-unstable" && r.Node == node {
				return r.Cause, nil
			}
		}
		return "", nil
	}
	return "", last
}

// reachAgain: every client has two ready paths to node in every map.
func reachAgain(ctx context.Context, m *Machines, clients []*Client, node string) bool {
	for _, c := range clients {
		if why, err := c.readMaps(ctx, m); err != nil || why != "" || c.ready[node] < 2 {
			return false
		}
	}
	return true
}

func errOrNil(err error) string {
	if err != nil {
		return "(" + err.Error() + ") "
	}
	return ""
}

// bootID is a machine's kernel boot id: what the fence agent fences.
func bootID(ctx context.Context, m *Machines, name string) (string, error) {
	out, err := m.Sh(ctx, time.Minute, name, "cat /proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(out), err
}

// witnessSaid checks that the fence agent on the witness logged line.
func witnessSaid(ctx context.Context, m *Machines, line string) error {
	out, err := m.Sh(ctx, time.Minute, "witness", "journalctl -t aluad-fence -o cat --no-pager")
	if err != nil {
		return fmt.Errorf("the witness's fence log: %w", err)
	}
	if !strings.Contains(out, line) {
		return fmt.Errorf("the witness's fence agent never logged %q; it logged: %s", line, lastLines(out, 5))
	}
	return nil
}

func waitMaps(ctx context.Context, m *Machines, clients []*Client, limit time.Duration, logf func(string, ...any)) error {
	deadline := time.Now().Add(limit)
	for _, c := range clients {
		for {
			why, err := c.readMaps(ctx, m)
			if err == nil && why == "" {
				break
			}
			if err != nil {
				why = err.Error()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not ready after %v: %s", c.Name, limit, why)
			}
			logf("  %s: %s", c.Name, why)
			sleep(ctx, 5*time.Second)
		}
	}
	return nil
}

// readMaps reads a client's multipath maps and its disks' portals; why
// says what is missing ("" when every LUN has one map with two paths to
// each controller).
func (c *Client) readMaps(ctx context.Context, m *Machines) (string, error) {
	out, err := m.Sh(ctx, time.Minute, c.Name, "multipath -ll; echo ==; "+qemulab.DiskScript)
	if err != nil {
		return "", err
	}
	ll, disks, _ := strings.Cut(out, "==\n")
	maps, err := qemulab.ParseMultipathLL(ll)
	if err != nil {
		return "", err
	}
	ds, err := qemulab.ParseDisks(disks)
	if err != nil {
		return "", err
	}
	byDev := map[string]qemulab.DiskPath{}
	for _, d := range ds {
		byDev[d.Dev] = d
	}
	devs, minReady := map[uint64]string{}, map[string]int{}
	first := true
	for _, mp := range maps {
		if !strings.Contains(mp.Vendor, "ALUAD") {
			continue
		}
		nodes, ready := map[string]int{}, map[string]int{}
		var lun uint64
		for _, p := range mp.Paths() {
			d, ok := byDev[p.Dev]
			if !ok {
				continue
			}
			lun = d.LUN
			nodes[nodeOf(d.Portal)]++
			if p.DMState == "active" && (p.Check == "ready" || p.Check == "ghost") { // ghost: STANDBY, up
				ready[nodeOf(d.Portal)]++
			}
		}
		for _, n := range []string{"a", "b"} {
			if first || ready[n] < minReady[n] {
				minReady[n] = ready[n]
			}
		}
		first = false
		if nodes["a"] < 2 || nodes["b"] < 2 {
			return fmt.Sprintf("map %s has paths %v by node, want 2 to each", mp.Name, nodes), nil
		}
		if _, dup := devs[lun]; dup {
			return fmt.Sprintf("two maps for LUN %d", lun), nil
		}
		devs[lun] = mp.DM
	}
	if len(devs) < 2 {
		return fmt.Sprintf("%d ALUAD maps, want 2", len(devs)), nil
	}
	c.Devs, c.ready = devs, minReady
	c.Maps = strings.Split(strings.TrimSpace(ll), "\n")
	return "", nil
}

// nodeOf names the node of a lab portal: 10.77.F.10 is a's, .20 b's.
func nodeOf(portal string) string {
	host, _, _ := strings.Cut(portal, ":")
	switch {
	case strings.HasSuffix(host, ".10"):
		return "a"
	case strings.HasSuffix(host, ".20"):
		return "b"
	}
	return "?"
}

func parseTimes(out string, offset time.Duration) []time.Time {
	var ts []time.Time
	for _, f := range strings.Fields(out) {
		if v, err := strconv.ParseInt(f, 10, 64); err == nil {
			ts = append(ts, time.UnixMilli(v).Add(-offset))
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	return ts
}

func sortedLUNs(cs []*Client) []uint64 {
	set := map[uint64]bool{}
	for _, c := range cs {
		for l := range c.Devs {
			set[l] = true
		}
	}
	var out []uint64
	for l := range set {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func destroy(ctx context.Context, m *Machines, logf func(string, ...any)) ([]string, error) {
	var prefix string
	if dom, err := m.Domain("ctrl-a"); err == nil {
		if name, err := Virsh(ctx, "domname", dom); err == nil {
			prefix = strings.TrimSuffix(strings.TrimSpace(name), "ctrl-a")
		}
	}
	if prefix == "" {
		return nil, fmt.Errorf("cannot tell the lab's domain names")
	}
	logf("vagrant destroy -f")
	t0 := time.Now()
	if out, err := runIn(ctx, m.Dir, 10*time.Minute, "vagrant", "destroy", "-f"); err != nil {
		return nil, fmt.Errorf("vagrant destroy: %w: %s", err, lastLines(out, 10))
	}
	logf("  destroyed in %v", time.Since(t0).Round(time.Second))
	list := func(args ...string) ([]string, error) {
		out, err := Virsh(ctx, args...)
		return strings.Fields(out), err
	}
	doms, err := list("list", "--all", "--name")
	if err != nil {
		return nil, err
	}
	nets, err := list("net-list", "--all", "--name")
	if err != nil {
		return nil, err
	}
	var vols []string
	pools, err := list("pool-list", "--all", "--name")
	if err != nil {
		return nil, err
	}
	for _, p := range pools {
		out, err := Virsh(ctx, "vol-list", p)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(out, "\n")[2:] {
			if f := strings.Fields(line); len(f) > 0 {
				vols = append(vols, f[0])
			}
		}
	}
	return Leftovers(doms, nets, vols, prefix), nil
}

func (r *Result) write(dir string) error {
	if dir == "" {
		return nil
	}
	return qemulab.WriteResults(dir, r, r.Markdown())
}

// Markdown is the smoke's table.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| step | client | LUN | follow | stall |\n|---|---|---|---|---|\n")
	for _, s := range r.Steps {
		f := "-"
		switch {
		case s.FollowMS < 0 && s.Judged:
			f = "never"
		case s.FollowMS < 0:
			f = "never (not judged)"
		case s.Already:
			f = "already there"
		case s.From != "":
			f = fmt.Sprintf("%.0f ms", s.FollowMS)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %.0f ms |\n", s.Step, s.Client, s.LUN, f, s.StallMS)
	}
	var names []string
	for n := range r.FioErrors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\n%s: fio %d I/Os, %d errors", n, r.FioIOs[n], r.FioErrors[n])
	}
	for _, f := range r.Fence {
		fmt.Fprintf(&b, "\nwitness: %s", f)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n%s", n)
	}
	fmt.Fprintf(&b, "\n\npoll resolution: %v; %.0f s in all\n", r.Resolution.Round(time.Millisecond), r.DurationS)
	if len(r.Failures) == 0 {
		b.WriteString("\nPASS\n")
	} else {
		b.WriteString("\nFAIL\n")
		for _, f := range r.Failures {
			b.WriteString("- " + f + "\n")
		}
	}
	return b.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
