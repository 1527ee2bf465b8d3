package qualify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// Options shape a run.
type Options struct {
	Source   Source
	Schedule *Schedule
	// Hosts are the hosts to wait for and qualify; empty: every host
	// declared on the array, or every logged-in host when none is.
	Hosts []string
	// Wait is how long to wait for them to be connected and doing I/O
	// (5 min when zero).
	Wait   time.Duration
	Limits Limits
	// Progress gets a bar redrawn in place (TTY) or a line per step.
	Progress io.Writer
	TTY      bool
	// Poll is how often the trace and the feed are read (200 ms).
	Poll time.Duration
	// AfterStep, if set, is called after each step ends and before the
	// next begins (a lab snapshots its hosts' own view there).
	AfterStep func(Step)
}

// baseline is how much I/O before the first step tells which LUNs each
// host uses.
const baseline = 5 * time.Second

type planned struct {
	event string
	name  string
	class string
	run   func(ctx context.Context, st *Step) error
	// cause is the cause of the ownership changes the step makes ("":
	// none expected).
	cause string
}

type runner struct {
	o      Options
	src    Source
	col    *collector
	rep    *Report
	nodes  []string
	ports  map[string][]string // node -> port names
	portID map[string]uint16   // port name -> relative target port id
	pref   map[uint64]string
	owner  map[uint64]string
	owner0 map[uint64]string // at t0
	t0     time.Time
	luns   []uint64
	active map[string][]uint64
	prog   *progress
	// downPorts and downNodes are what the run has taken down and not yet
	// brought back (undo restores them after an error).
	downPorts map[string]bool
	downNodes map[string]bool
	undoWait  time.Duration // how long undo lets a restarted node fail back
	// offset is the array's clock minus ours.
	offset time.Duration
	// start is each port's sessions per host once the hosts are ready.
	start map[string]map[string]int
}

// Run qualifies the hosts: it waits for them, runs the schedule's events
// and returns the report (also when a step failed: a step's error ends
// the run with what was measured so far, and the error).
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Source == nil || o.Schedule == nil {
		return nil, errors.New("qualify: a source and a schedule are needed")
	}
	if o.Wait <= 0 {
		o.Wait = 5 * time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Limits == nil {
		o.Limits = DefaultLimits()
	}
	r := &runner{o: o, src: o.Source, ports: map[string][]string{}, pref: map[uint64]string{}, owner: map[uint64]string{},
		downPorts: map[string]bool{}, downNodes: map[string]bool{}, undoWait: 10 * time.Second}
	st, err := r.src.Status()
	if err != nil {
		return nil, fmt.Errorf("qualify: the array's status: %w", err)
	}
	if st.Controller != "" {
		return nil, fmt.Errorf("qualify: this API is controller %s's, one process of an array of controllers as processes: "+
			"it sees only its own node's ports and faults; qualify needs the embedded array (aluad serve), whose API covers every node", st.Controller)
	}
	// Times are the array's: its trace and feed are stamped by its clock.
	r.offset = clockOffset(r.src)
	r.rep = &Report{Schedule: o.Schedule.Name, Target: st.Target, ALUA: st.ALUA, Start: r.now()}
	r.portID = map[string]uint16{}
	for _, n := range st.Nodes {
		r.nodes = append(r.nodes, n.Name)
		for _, p := range n.Ports {
			r.ports[n.Name] = append(r.ports[n.Name], p.Name)
			r.portID[p.Name] = p.RelativeID
		}
	}
	r.rep.Nodes = r.nodes
	if len(r.nodes) < 2 {
		return nil, errors.New("qualify: the array has fewer than two nodes: nothing to move")
	}
	if err := r.readLUNs(); err != nil {
		return nil, err
	}
	if r.col, err = startCollector(r.src, o.Poll); err != nil {
		return nil, err
	}
	if err := r.readLUNs(); err != nil {
		r.col.close()
		return nil, err
	}
	// The owners now, and the feed's changes from now on, give each LUN's
	// owner at any time of the run.
	r.owner0, r.t0 = maps.Clone(r.owner), r.now()
	defer r.col.close()
	hostTypes, err := r.waitHosts(ctx)
	if err != nil {
		return nil, err
	}
	r.start = map[string]map[string]int{}
	for _, n := range r.nodes {
		for _, p := range r.ports[n] {
			if r.start[p], err = r.portSessions(p); err != nil {
				return nil, fmt.Errorf("qualify: the array's paths: %w", err)
			}
		}
	}
	plan, err := r.plan()
	if err != nil {
		return nil, err
	}
	r.prog = newProgress(o.Progress, o.TTY, len(plan)+1)
	defer r.prog.stop()
	// Step 0: what the hosts reach at the start.
	disc := Step{Index: 0, Event: "discovery", Name: "paths at the start", Class: ClassDiscovery, Start: r.now().Add(-baseline)}
	disc.End = r.now()
	r.rep.Steps = append(r.rep.Steps, disc)
	var runErr error
	done := 0
	for i, p := range plan {
		r.prog.set(i+1, p.name)
		s := Step{Index: i + 1, Event: p.event, Name: p.name, Class: p.class, Cause: p.cause, Start: r.now()}
		err := p.run(ctx, &s)
		s.End = r.now()
		r.rep.Steps = append(r.rep.Steps, s)
		if o.AfterStep != nil {
			o.AfterStep(s)
		}
		done++
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		if err != nil {
			runErr = fmt.Errorf("step %d (%s): %w", s.Index, s.Name, err)
			break
		}
	}
	for _, p := range plan[done:] {
		r.rep.NotRun = append(r.rep.NotRun, p.name)
	}
	if runErr != nil {
		r.rep.Error = runErr.Error()
		r.undo()
	}
	r.prog.set(len(plan)+1, "analysing")
	r.col.sync(context.Background())
	r.rep.End = r.now()
	r.analyse(hostTypes)
	return r.rep, runErr
}

func (r *runner) readLUNs() error {
	ls, err := r.src.LUNs()
	if err != nil {
		return fmt.Errorf("qualify: the array's LUNs: %w", err)
	}
	r.luns = r.luns[:0]
	for _, l := range ls {
		r.luns = append(r.luns, l.ID)
		r.pref[l.ID], r.owner[l.ID] = l.Preferred, l.Owner
	}
	return nil
}

// waitHosts waits until every expected host has a session and completed
// I/O in the last two seconds; it returns their types and sets the active
// LUNs from the baseline that follows.
func (r *runner) waitHosts(ctx context.Context) (map[string]HostReport, error) {
	deadline := time.Now().Add(r.o.Wait)
	var missing []string
	for {
		hs, err := r.src.Hosts()
		if err != nil {
			return nil, fmt.Errorf("qualify: the array's hosts: %w", err)
		}
		want := r.o.Hosts
		if len(want) == 0 {
			for _, h := range hs {
				if h.Declared {
					want = append(want, h.Name)
				}
			}
		}
		if len(want) == 0 {
			for _, h := range hs {
				if h.Sessions > 0 {
					want = append(want, h.Name)
				}
			}
		}
		recent := r.col.activity(r.now().Add(-2*time.Second), r.now().Add(time.Second))
		missing = missing[:0]
		got := map[string]HostReport{}
		for _, name := range want {
			i := slices.IndexFunc(hs, func(h api.HostInfo) bool { return h.Name == name })
			switch {
			case i < 0:
				missing = append(missing, name+": not known to the array (declare it, or log it in)")
			case hs[i].Sessions == 0:
				missing = append(missing, name+": no session")
			case len(recent[name]) == 0:
				missing = append(missing, name+": logged in, no I/O completed in the last 2 s")
			default:
				got[name] = HostReport{Name: name, Type: hs[i].Type, Nodes: hs[i].Nodes}
			}
		}
		if len(want) > 0 && len(missing) == 0 && r.now().Sub(r.rep.Start) >= baseline {
			r.active = r.col.activity(r.now().Add(-baseline), r.now().Add(time.Second))
			for name, h := range got {
				h.LUNs = r.active[name]
				got[name] = h
			}
			for k := range r.active {
				if _, ok := got[k]; !ok {
					delete(r.active, k) // I/O from a host not being qualified
				}
			}
			return got, nil
		}
		if time.Now().After(deadline) {
			if len(want) == 0 {
				return nil, fmt.Errorf("qualify: no host logged in within %v", r.o.Wait)
			}
			return nil, fmt.Errorf("qualify: hosts not ready within %v: %s", r.o.Wait, strings.Join(missing, "; "))
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Step classes.
const (
	ClassDiscovery = "discovery"
	ClassPlanned   = "planned"
	ClassFailure   = "failure"
	ClassPort      = "port"
	ClassRestart   = "restart"
)

func (r *runner) other(node string) []string {
	var out []string
	for _, n := range r.nodes {
		if n != node {
			out = append(out, n)
		}
	}
	return out
}

func (r *runner) hasNode(n string) bool { return slices.Contains(r.nodes, n) }

// plan turns the schedule into steps.
func (r *runner) plan() ([]planned, error) {
	var out []planned
	for _, ev := range r.o.Schedule.Events {
		bad := func(format string, a ...any) error {
			return fmt.Errorf("qualify: schedule line %d: %s", ev.Line, fmt.Sprintf(format, a...))
		}
		switch ev.Kind {
		case EvMove:
			luns, err := r.pickLUNs(ev.Args["luns"])
			if err != nil {
				return nil, bad("%v", err)
			}
			for _, l := range luns {
				home := r.owner[l]
				for _, n := range r.other(home) {
					out = append(out, r.moveStep(ev.Kind, l, n), r.moveStep(ev.Kind, l, home))
				}
			}
		case EvRebalance:
			onto := ev.Args["node"]
			if onto == "" {
				onto = r.nodes[0]
			}
			if !r.hasNode(onto) {
				return nil, bad("no node %q", onto)
			}
			out = append(out, planned{ev.Kind, "skew: every LUN onto " + onto, ClassPlanned, r.skew(onto), "manual"},
				planned{ev.Kind, "rebalance by the array", ClassPlanned, r.rebalance, "balance"},
				planned{ev.Kind, "restore: every LUN to its preferred owner", ClassPlanned, r.restore, "manual"})
		case EvPort:
			ports, err := r.pickPorts(ev.Args["ports"])
			if err != nil {
				return nil, bad("%v", err)
			}
			for _, p := range ports {
				out = append(out, planned{ev.Kind, "port " + p + " down", ClassPort, r.portDown(p), ""},
					planned{ev.Kind, "port " + p + " up", ClassPort, r.portUp(p), ""})
			}
		case EvFail:
			n, kind := ev.Args["node"], ev.Args["kind"]
			if kind == "" {
				kind = api.FaultPowerLoss
			}
			if !r.hasNode(n) {
				return nil, bad("no node %q", n)
			}
			down := ev.duration("down", 10*time.Second)
			out = append(out, planned{ev.Kind, "node " + n + " " + kind + " (failover)", ClassFailure, r.fail(n, kind, down), "failover"},
				planned{ev.Kind, "node " + n + " restart (failback)", ClassPlanned, r.restartFailback(n), "failback"})
		case EvUpgrade:
			down := ev.duration("down", 10*time.Second)
			nodes := r.nodes
			if v := ev.Args["nodes"]; v != "" && v != "all" {
				nodes = strings.Split(v, ",")
				for _, n := range nodes {
					if !r.hasNode(n) {
						return nil, bad("no node %q", n)
					}
				}
			}
			for _, n := range nodes {
				out = append(out, planned{ev.Kind, "upgrade " + n + ": drain", ClassPlanned, r.drain(n), "manual"},
					planned{ev.Kind, "upgrade " + n + ": restart", ClassRestart, r.upgradeRestart(n, down), ""},
					planned{ev.Kind, "upgrade " + n + ": failback", ClassPlanned, r.redistribute(n), "manual"})
			}
		}
	}
	return out, nil
}

func (r *runner) pickLUNs(v string) ([]uint64, error) {
	switch v {
	case "", "all":
		return append([]uint64(nil), r.luns...), nil
	case "first":
		var out []uint64
		for _, n := range r.nodes {
			for _, l := range r.luns {
				if r.owner[l] == n {
					out = append(out, l)
					break
				}
			}
		}
		return out, nil
	}
	var out []uint64
	for _, x := range strings.Split(v, ",") {
		l, _ := strconv.ParseUint(x, 10, 64)
		if _, ok := r.owner[l]; !ok {
			return nil, fmt.Errorf("the array has no LUN %d", l)
		}
		out = append(out, l)
	}
	return out, nil
}

func (r *runner) pickPorts(v string) ([]string, error) {
	var all []string
	for _, n := range r.nodes {
		all = append(all, r.ports[n]...)
	}
	switch v {
	case "", "first":
		if len(all) == 0 {
			return nil, errors.New("the array has no ports")
		}
		return all[:1], nil
	case "all":
		return all, nil
	}
	out := strings.Split(v, ",")
	for _, p := range out {
		if !slices.Contains(all, p) {
			return nil, fmt.Errorf("no port %q (%s)", p, strings.Join(all, ", "))
		}
	}
	return out, nil
}

func (r *runner) mark(st *Step, format string, a ...any) {
	st.Marks = append(st.Marks, Mark{Time: r.now(), Label: fmt.Sprintf(format, a...)})
}

func (r *runner) settle(ctx context.Context) error {
	if !sleepCtx(ctx, r.o.Schedule.Settle) {
		return ctx.Err()
	}
	return nil
}

// move moves one LUN as an operator and notes a refusal on the step.
func (r *runner) move(st *Step, l uint64, to string) {
	r.mark(st, "move LUN %d to %s", l, to)
	if _, err := r.src.Move(l, to); err != nil {
		st.Note = strings.TrimSpace(st.Note + fmt.Sprintf(" LUN %d to %s refused: %v.", l, to, err))
	}
}

func (r *runner) moveStep(event string, l uint64, to string) planned {
	return planned{event: event, name: fmt.Sprintf("move LUN %d to %s", l, to), class: ClassPlanned, cause: "manual", run: func(ctx context.Context, st *Step) error {
		r.move(st, l, to)
		if !r.waitOwners(ctx, r.o.Schedule.Follow, func(o map[uint64]string) bool { return o[l] == to }) {
			st.Note = strings.TrimSpace(st.Note + fmt.Sprintf(" LUN %d not on %s after %v.", l, to, r.o.Schedule.Follow))
		}
		r.waitFollow(ctx, st)
		return r.settle(ctx)
	}}
}

func (r *runner) skew(onto string) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		if err := r.readLUNs(); err != nil {
			return err
		}
		for _, l := range r.luns {
			if r.owner[l] != onto {
				r.move(st, l, onto)
			}
		}
		r.waitFollow(ctx, st)
		return r.settle(ctx)
	}
}

func (r *runner) rebalance(ctx context.Context, st *Step) error {
	r.mark(st, "rebalance")
	rep, err := r.src.Rebalance()
	if err != nil {
		st.Note = "the array refused to rebalance: " + err.Error()
		return r.settle(ctx)
	}
	if rep.Moves == 0 {
		st.Note = "the array made no balance move"
		if rep.Reason != "" {
			st.Note += ": " + rep.Reason
		}
		return r.settle(ctx)
	}
	want := map[uint64]string{}
	for _, b := range rep.Batches {
		for _, l := range b.LUNs {
			want[l] = b.To
		}
	}
	st.Note = fmt.Sprintf("the array planned %d balance move(s)", rep.Moves)
	r.waitOwners(ctx, r.o.Schedule.Follow, func(o map[uint64]string) bool {
		for l, to := range want {
			if o[l] != to {
				return false
			}
		}
		return true
	})
	r.waitFollow(ctx, st)
	return r.settle(ctx)
}

func (r *runner) restore(ctx context.Context, st *Step) error {
	if err := r.readLUNs(); err != nil {
		return err
	}
	for _, l := range r.luns {
		if r.owner[l] != r.pref[l] {
			r.move(st, l, r.pref[l])
		}
	}
	r.waitFollow(ctx, st)
	return r.settle(ctx)
}

// sessions counts each host's sessions through each port (/v1/paths
// through Hosts' sessions is too coarse).
func (r *runner) portSessions(port string) (map[string]int, error) {
	ps, err := r.paths()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range ps {
		// A path that ended by a fault is listed too ("failed"); an
		// array from before had no state: every row was a session.
		if p.Port == port && (p.State == "up" || p.State == "") {
			out[p.Host]++
		}
	}
	return out, nil
}

func (r *runner) paths() ([]api.PathInfo, error) {
	if p, ok := r.src.(interface {
		Paths() ([]api.PathInfo, error)
	}); ok {
		return p.Paths()
	}
	return nil, errors.New("the source does not list paths")
}

func (r *runner) portDown(port string) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		st.Port = port
		r.mark(st, "port %s down", port)
		r.downPorts[port] = true
		if _, err := r.src.Inject(api.Fault{Kind: api.FaultPortDown, Port: port}); err != nil {
			return err
		}
		r.waitResumed(ctx, st.Start, r.o.Schedule.Follow)
		return r.settle(ctx)
	}
}

func (r *runner) portUp(port string) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		st.Port = port
		r.mark(st, "port %s up", port)
		if _, err := r.src.Inject(api.Fault{Kind: api.FaultPortUp, Port: port}); err != nil {
			return err
		}
		delete(r.downPorts, port)
		if !r.waitRelogin(ctx, []string{port}, r.o.Schedule.Follow) {
			st.Note = fmt.Sprintf("not every host logged back in to %s within %v", port, r.o.Schedule.Follow)
		}
		return r.settle(ctx)
	}
}

// waitRelogin waits until each host that had sessions through ports at
// the start has as many again.
func (r *runner) waitRelogin(ctx context.Context, ports []string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		ok := true
		for _, port := range ports {
			now, err := r.portSessions(port)
			if err != nil {
				return false
			}
			want := r.start[port]
			for h, n := range want {
				if _, q := r.active[h]; q && now[h] < n {
					ok = false
				}
			}
		}
		if ok {
			return true
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

func (r *runner) fail(node, kind string, down time.Duration) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		st.Node = node
		r.mark(st, "node %s %s", node, kind)
		r.downNodes[node] = true
		if _, err := r.src.Inject(api.Fault{Kind: kind, Node: node}); err != nil {
			return err
		}
		r.waitOwners(ctx, r.o.Schedule.Follow, func(o map[uint64]string) bool {
			for _, l := range r.luns {
				if o[l] == node {
					return false
				}
			}
			return true
		})
		r.waitResumed(ctx, st.Start, r.o.Schedule.Follow)
		if rest := down - r.now().Sub(st.Start); rest > 0 && !sleepCtx(ctx, rest) {
			return ctx.Err()
		}
		return r.settle(ctx)
	}
}

func (r *runner) restartFailback(node string) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		st.Node = node
		r.mark(st, "node %s restart", node)
		if _, err := r.src.Inject(api.Fault{Kind: api.FaultRestart, Node: node}); err != nil {
			return err
		}
		delete(r.downNodes, node)
		// The hosts log back in, their multipath reinstates the paths, and
		// the array waits its failback window: twice the follow time.
		if !r.waitOwners(ctx, 2*r.o.Schedule.Follow, func(o map[uint64]string) bool {
			for _, l := range r.luns {
				if r.pref[l] == node && o[l] != node {
					return false
				}
			}
			return true
		}) {
			st.Note = fmt.Sprintf("the array did not fail every LUN back to %s within %v (it fails back once every host using them reaches %s again)",
				node, 2*r.o.Schedule.Follow, node)
		}
		r.waitFollow(ctx, st)
		return r.settle(ctx)
	}
}

func (r *runner) drain(node string) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		st.Node = node
		if err := r.readLUNs(); err != nil {
			return err
		}
		others := r.other(node)
		i := 0
		for _, l := range r.luns {
			if r.owner[l] == node {
				r.move(st, l, others[i%len(others)])
				i++
			}
		}
		r.waitOwners(ctx, r.o.Schedule.Follow, func(o map[uint64]string) bool {
			for _, l := range r.luns {
				if o[l] == node {
					return false
				}
			}
			return true
		})
		r.waitFollow(ctx, st)
		return r.settle(ctx)
	}
}

func (r *runner) upgradeRestart(node string, down time.Duration) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		st.Node = node
		r.mark(st, "node %s stops (firmware upgrade)", node)
		r.downNodes[node] = true
		if _, err := r.src.Inject(api.Fault{Kind: api.FaultCrash, Node: node}); err != nil {
			return err
		}
		if !sleepCtx(ctx, down) {
			return ctx.Err()
		}
		r.mark(st, "node %s restart", node)
		if _, err := r.src.Inject(api.Fault{Kind: api.FaultRestart, Node: node}); err != nil {
			return err
		}
		delete(r.downNodes, node)
		if !r.waitRelogin(ctx, r.ports[node], r.o.Schedule.Follow) {
			st.Note = fmt.Sprintf("not every host logged back in to %s's ports within %v", node, r.o.Schedule.Follow)
		}
		return r.settle(ctx)
	}
}

func (r *runner) redistribute(node string) func(context.Context, *Step) error {
	return func(ctx context.Context, st *Step) error {
		st.Node = node
		if err := r.readLUNs(); err != nil {
			return err
		}
		for _, l := range r.luns {
			if r.pref[l] == node && r.owner[l] != node {
				r.move(st, l, node)
			}
		}
		r.waitOwners(ctx, r.o.Schedule.Follow, func(o map[uint64]string) bool {
			for _, l := range r.luns {
				if r.pref[l] == node && o[l] != node {
					return false
				}
			}
			return true
		})
		r.waitFollow(ctx, st)
		if err := r.settle(ctx); err != nil {
			return err
		}
		if node == r.nodes[len(r.nodes)-1] || st.Event == EvUpgrade {
			r.checkPreferred(st)
		}
		return nil
	}
}

// checkPreferred records whether every LUN is on its preferred owner.
func (r *runner) checkPreferred(st *Step) {
	if err := r.readLUNs(); err != nil {
		return
	}
	var off []string
	for _, l := range r.luns {
		if r.owner[l] != r.pref[l] {
			off = append(off, fmt.Sprintf("LUN %d on %s (preferred %s)", l, r.owner[l], r.pref[l]))
		}
	}
	name := fmt.Sprintf("after step %d (%s) every LUN is on its preferred owner", st.Index, st.Name)
	detail := "all " + strconv.Itoa(len(r.luns)) + " LUNs"
	if len(off) > 0 {
		detail = strings.Join(off, ", ")
	}
	r.rep.Array = append(r.rep.Array, Check{Name: name, OK: len(off) == 0, Detail: detail})
}

// waitOwners polls the LUNs' owners until ok or the limit.
func (r *runner) waitOwners(ctx context.Context, limit time.Duration, ok func(map[uint64]string) bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if err := r.readLUNs(); err == nil && ok(r.owner) {
			return true
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 50*time.Millisecond) {
			return false
		}
	}
}

// waitResumed waits until every host's I/O to each LUN it uses completed
// again after since.
func (r *runner) waitResumed(ctx context.Context, since time.Time, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		ok := true
		for h, luns := range r.active {
			for _, l := range luns {
				if !r.col.goodSince(h, l, since.Add(100*time.Millisecond)) {
					ok = false
				}
			}
		}
		if ok {
			return true
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

// waitFollow waits, up to the schedule's follow time, until every host's
// I/O to every LUN it uses arrives at the LUN's owner.
func (r *runner) waitFollow(ctx context.Context, st *Step) {
	deadline := time.Now().Add(r.o.Schedule.Follow)
	for {
		if r.following(r.now().Add(-time.Second)) {
			return
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// following: since t, every active host's I/O to each LUN arrived at its
// owner only, and some arrived.
func (r *runner) following(t time.Time) bool {
	ns := t.UnixNano()
	for h, luns := range r.active {
		for _, l := range luns {
			seen := false
			for _, s := range r.col.series(h, l) {
				if s.arrived == 0 || s.lastArr < ns {
					continue
				}
				if s.node != r.owner[l] {
					return false
				}
				seen = true
			}
			if !seen {
				return false
			}
		}
	}
	return true
}

// sortedHosts returns the names of a host map in order.
func sortedHosts[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r *runner) now() time.Time { return time.Now().Add(r.offset) }

// clockOffset estimates the array's clock minus ours from its status's
// time, over the quickest of five round trips (0 if it gives none).
func clockOffset(src Source) time.Duration {
	best := time.Duration(-1)
	var off time.Duration
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		st, err := src.Status()
		rtt := time.Since(t0)
		if err != nil || st.Time.IsZero() {
			continue
		}
		if best < 0 || rtt < best {
			best, off = rtt, st.Time.Sub(t0.Add(rtt/2))
		}
	}
	return off
}

// undo brings back what a run that ended early had taken down: its ports,
// its nodes, and the LUNs to the owners they had at the start.
func (r *runner) undo() {
	for _, p := range sortedHosts(r.downPorts) {
		_, err := r.src.Inject(api.Fault{Kind: api.FaultPortUp, Port: p})
		r.rep.Restored = append(r.rep.Restored, fmt.Sprintf("port %s up: %s", p, errText(err)))
	}
	for _, n := range sortedHosts(r.downNodes) {
		_, err := r.src.Inject(api.Fault{Kind: api.FaultRestart, Node: n})
		r.rep.Restored = append(r.rep.Restored, fmt.Sprintf("node %s restarted: %s", n, errText(err)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A restarted node's LUNs may fail back by themselves first.
	r.waitOwners(ctx, r.undoWait, func(o map[uint64]string) bool { return maps.Equal(o, r.owner0) })
	if err := r.readLUNs(); err != nil {
		return
	}
	for _, l := range r.luns {
		if to := r.owner0[l]; to != "" && r.owner[l] != to {
			_, err := r.src.Move(l, to)
			r.rep.Restored = append(r.rep.Restored, fmt.Sprintf("LUN %d moved back to %s: %s", l, to, errText(err)))
		}
	}
}

func errText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "done"
}
