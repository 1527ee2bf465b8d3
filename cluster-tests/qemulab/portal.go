package qemulab

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// The logout-owner scenario: the guest's admin logs it out of LUN 0's
// owner's portals one after the other under fio (iscsiadm -m node -p
// PORTAL -u), as when taking a controller's links out of service from the
// host side, then logs it back in (-l). Each step is judged on the guest:
// no I/O error reached fio, no I/O error line in its kernel log, and fio
// kept completing I/O on LUN 0 (the longest gap between its completions,
// from fio's own completion log, is stated); and what the array did is
// recorded (its moves, the reports it raised, LUN 0's owner after).

// startSamplers measures each guest's clock offset and starts its sampler
// of completed I/O per block device (10 ms).
func (l *lab) startSamplers(ctx context.Context) error {
	for _, c := range l.res.Clients {
		off, rtt, err := c.vm.ClockOffset(ctx, 20)
		if err != nil {
			return err
		}
		c.ClockOffset, c.ClockRTT = off, rtt
		if err := c.vm.StartSampler(ctx, guestSamples, 10*time.Millisecond); err != nil {
			return err
		}
		l.opt.Log("%s: guest clock offset %v (round trip %v); sampler on", c.Spec.Name, off.Round(time.Microsecond), rtt.Round(time.Microsecond))
	}
	return nil
}

const (
	ioErrGrep  = "dmesg | grep 'I/O error' || true"
	fioErrGrep = "grep -i error /tmp/fio.log || true"
	fioLatLog  = "/tmp/fio-lun"
)

// readFioDone reads fio's completion logs (after fio has stopped: it
// writes them on exit).
func (l *lab) readFioDone(ctx context.Context, c *ClientResult) error {
	c.fioDone = map[uint64][]time.Time{}
	for _, m := range c.maps {
		lun, ok := c.lunOf(m)
		if !ok {
			continue
		}
		out, err := c.vm.Sh(ctx, l.scaled(2*time.Minute), fmt.Sprintf("cat %s%d_clat.*.log | cut -d, -f1", fioLatLog, lun))
		if err != nil {
			return fmt.Errorf("%s: fio's completion log of LUN %d: %w", c.Spec.Name, lun, err)
		}
		var ts []time.Time
		for _, f := range strings.Fields(out) {
			if ms, err := strconv.ParseInt(f, 10, 64); err == nil {
				ts = append(ts, time.UnixMilli(ms).Add(-c.ClockOffset))
			}
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		c.fioDone[lun] = ts
	}
	return nil
}

// LongestGap is the longest time in [from, to] without a completion in
// ts (sorted), and the last completion before to.
func LongestGap(ts []time.Time, from, to time.Time) (time.Duration, time.Time) {
	prev, last := from, time.Time{}
	var gap time.Duration
	for _, t := range ts {
		if t.Before(from) {
			continue
		}
		if t.After(to) {
			break
		}
		gap = max(gap, t.Sub(prev))
		prev, last = t, t
	}
	return max(gap, to.Sub(prev)), last
}

// portalStep logs every client out of (logout-owner) or back in to
// (login-owner) both portals of LUN 0's owner at the start of the
// logout, one portal after the other, then watches for the follow window.
func (l *lab) portalStep(ctx context.Context, st *StepResult, name string) error {
	node := l.loggedOut
	if name == "logout-owner" {
		luns, err := l.arr.Client.LUNs()
		if err != nil {
			return err
		}
		node = luns[0].Owner
	}
	if node == "" {
		return fmt.Errorf("%s needs a logout-owner step before it", name)
	}
	ni := strings.Index("ab", node)
	op := map[string]string{"logout-owner": "-u", "login-owner": "-l"}[name]
	before, fioBefore := map[string]int{}, map[string]int{}
	for _, c := range l.res.Clients {
		out, _ := c.vm.Sh(ctx, l.scaled(30*time.Second), ioErrGrep)
		before[c.Spec.Name] = countLines(out)
		out, _ = c.vm.Sh(ctx, l.scaled(30*time.Second), fioErrGrep)
		fioBefore[c.Spec.Name] = countLines(out)
	}
	for f := range Fabrics {
		if f > 0 {
			// One after the other: dm-multipath has dealt with the first.
			if !sleepCtx(ctx, l.scaled(10*time.Second)) {
				return ctx.Err()
			}
		}
		portal := PortAddr(ni, f) + ":3260"
		for _, c := range l.res.Clients {
			t := time.Now()
			out, err := c.vm.Sh(ctx, l.scaled(2*time.Minute), fmt.Sprintf("iscsiadm -m node -p %s %s", portal, op))
			note := fmt.Sprintf("+%v %s: iscsiadm -m node -p %s %s (%v)", t.Sub(st.Start).Round(100*time.Millisecond), c.Spec.Name,
				portal, op, time.Since(t).Round(10*time.Millisecond))
			if err != nil {
				note += ": " + err.Error()
			}
			st.Notes = append(st.Notes, note)
			l.opt.Log("  %s %s", note, strings.TrimSpace(out))
		}
	}
	if name == "logout-owner" {
		l.loggedOut = node
	} else {
		l.loggedOut = ""
	}
	if !sleepCtx(ctx, l.scaled(l.opt.Follow)) {
		return ctx.Err()
	}
	st.End = time.Now()
	for _, e := range l.w.Changes(st.Start) {
		st.Changes = append(st.Changes, fmt.Sprintf("+%v LUNs %v %s -> %s (%s; I/O held %v)", e.Time.Sub(st.Start).Round(100*time.Millisecond),
			e.Change.LUNs, e.Change.From, e.Change.To, e.Change.Cause, e.Change.Stop.Round(time.Microsecond)))
	}
	for _, e := range l.w.Events("report", st.Start) {
		if r := e.Report; r != nil {
			verb := "cleared"
			if r.Raised {
				verb = "raised"
			}
			st.Raised = append(st.Raised, fmt.Sprintf("+%v %s %s host %s node %s LUN %d: %s", e.Time.Sub(st.Start).Round(100*time.Millisecond),
				verb, r.Condition, r.Host, r.Node, r.LUN, r.Cause))
		}
	}
	rs, err := l.arr.Client.Reports()
	if err != nil {
		return err
	}
	for _, r := range rs {
		st.Reports = append(st.Reports, fmt.Sprintf("%s %s %s: %s", r.Condition, r.Host, r.Node, r.Cause))
	}
	luns, err := l.arr.Client.LUNs()
	if err != nil {
		return err
	}
	st.Owners = map[uint64]string{}
	for _, x := range luns {
		st.Owners[x.ID] = x.Owner
	}
	st.MultipathLL = map[string]string{}
	st.FioAlive = true
	for _, c := range l.res.Clients {
		out, _ := c.vm.Sh(ctx, l.scaled(30*time.Second), ioErrGrep)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if n := before[c.Spec.Name]; n < countLines(out) {
			for _, s := range lines[n:] {
				st.IOErrLogs = append(st.IOErrLogs, c.Spec.Name+": "+s)
			}
		}
		// fio stops a job at its first I/O error (and logs it); the other
		// job goes on, so the log is what tells.
		if _, err := c.vm.Sh(ctx, l.scaled(30*time.Second), "kill -0 $(cat /tmp/fio.pid)"); err != nil {
			st.FioAlive = false
			st.Notes = append(st.Notes, c.Spec.Name+": fio has exited")
		}
		if log, _ := c.vm.Sh(ctx, l.scaled(30*time.Second), fioErrGrep); countLines(log) > fioBefore[c.Spec.Name] {
			st.FioAlive = false
			lines := strings.Split(strings.TrimRight(log, "\n"), "\n")[fioBefore[c.Spec.Name]:]
			st.Notes = append(st.Notes, c.Spec.Name+": fio logged during the step: "+firstN(lines, 4))
		}
		if out, err := c.vm.Sh(ctx, l.scaled(30*time.Second), "multipathd show topology || multipath -ll"); err == nil {
			st.MultipathLL[c.Spec.Name] = out
		}
	}
	l.opt.Log("  owners %v; moves %v; reports raised or cleared %v; %d I/O error lines; fio running %v",
		st.Owners, st.Changes, st.Raised, len(st.IOErrLogs), st.FioAlive)
	return nil
}

func countLines(s string) int {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return 0
	}
	return strings.Count(s, "\n") + 1
}

// judgePortal: no I/O error reached fio or the kernel log during the
// step, and LUN 0's I/O went on (its longest gap stated).
func (l *lab) judgePortal(st *StepResult) {
	l.res.check(st.Name+": fio running with no error at the end of the step", st.FioAlive, "%s",
		strings.Join(st.Notes, "; "))
	l.res.check(st.Name+": no I/O error line in the guest's kernel log during the step", len(st.IOErrLogs) == 0,
		"%d lines: %s", len(st.IOErrLogs), firstN(st.IOErrLogs, 6))
	for _, c := range l.res.Clients {
		ts, ok := c.fioDone[0]
		if !ok || st.End.IsZero() {
			l.res.check(c.Spec.Name+": "+st.Name+": LUN 0's I/O continues", false, "no fio completion log for LUN 0")
			continue
		}
		gap, last := LongestGap(ts, st.Start, st.End)
		lastS := "none in the step"
		if !last.IsZero() {
			lastS = st.End.Sub(last).Round(time.Millisecond).String() + " before the step's end"
		}
		// The dm device's own counters (which count failed I/O and udev's
		// probes too) for comparison.
		dmGap := "-"
		if v := l.views[c.Spec.Name]; v != nil && c.dmOf(0) != "" {
			dmGap = v.guestStall(c.dmOf(0), st.Start, st.End).String() + " ms"
		}
		l.res.check(c.Spec.Name+": "+st.Name+": LUN 0's I/O continues (fio completed I/O on it in the step's last 5 s)",
			!last.IsZero() && last.After(st.End.Add(-5*time.Second)),
			"stall: longest gap in fio's completions on LUN 0 during the step %v (the multipath device's counters: %s); last completion %s; "+
				"array: LUN 0 owner after %s; moves: %s; reports raised/cleared: %s",
			gap.Round(time.Millisecond), dmGap, lastS, st.Owners[0], orNone(st.Changes), orNone(st.Raised))
	}
}

// judgeMoves: the boot check (no LUN moves from the array's start until
// Observe after each guest's last login) and NoMoveFrom.
func (l *lab) judgeMoves() {
	sc := l.opt.Scenario
	start := l.res.Started
	if sc.Boot {
		var last time.Time
		var logins []string
		for _, c := range l.res.Clients {
			t, n := l.w.LastLogin(c.IQN, "", start)
			logins = append(logins, fmt.Sprintf("%s: %d logins, the last +%v", c.Spec.Name, n, t.Sub(start).Round(100*time.Millisecond)))
			if n == 0 {
				last = time.Time{}
				break
			}
			last = maxT(last, t)
		}
		obs := cmp0(sc.Observe, 80*time.Second)
		var moves []string
		if !last.IsZero() {
			for _, e := range l.w.Moves(start) {
				if !e.Time.After(last.Add(obs)) {
					moves = append(moves, describeMoves([]api.Event{e}, start))
				}
			}
		}
		covered := !last.IsZero() && time.Now().After(last.Add(obs))
		l.res.check(fmt.Sprintf("no LUN moves during the guests' logins nor in the %v after them", obs), covered && len(moves) == 0,
			"%s; moves: %s; observed until +%v", strings.Join(logins, "; "), orNone(moves), time.Since(start).Round(time.Second))
	}
	if sc.NoMoveFrom != "" {
		var moves []string
		for _, e := range l.w.Moves(start) {
			if e.Change.From == sc.NoMoveFrom {
				moves = append(moves, describeMoves([]api.Event{e}, start))
			}
		}
		l.res.check(fmt.Sprintf("no LUN moved away from node %s during the run (%v)", sc.NoMoveFrom, time.Since(start).Round(time.Second)),
			len(moves) == 0, "moves away: %s; every move: %s", orNone(moves), describeMoves(l.w.Moves(start), start))
	}
}

// judgeMNDTime: Multipath Not Discovering Paths was raised for c on node
// by the last of: a discovery window after c's last login there; the
// silence window after the last command c sent there before the raise (a
// guest without multipath reads every disk it attaches, udev's blkid,
// for as long as its scan lasts: minutes on a loaded machine, and the
// array may take that for a multipath stack until the node has been
// silent that long); a discovery window after the start of its I/O
// through the other node (the array drops a scan's evidence only while
// the host uses another node); plus the 3-tick debounce and three
// seconds for the array's tick and the feed's polling under load.
func (l *lab) judgeMNDTime(c *ClientResult, node string) {
	login, n := l.w.LastLogin(c.IQN, node, l.res.Started)
	raised := l.w.Raised(conditionMND, c.Spec.Name, node, l.res.Started)
	slack := 300*time.Millisecond + 3*time.Second // the debounce; the array's tick and the feed's polling on a loaded machine
	cmd := l.w.LastCommand(c.IQN, node, l.res.Started, raised)
	// A scan that made the array take the guest for multipath is judged
	// over after the silence window (a minute without a command there).
	due := login.Add(discoveryWindow)
	for _, t := range []time.Time{cmd.Add(silenceWindow), l.ioStart.Add(discoveryWindow)} {
		if t.After(due) {
			due = t
		}
	}
	due = due.Add(slack)
	ok := n > 0 && !raised.IsZero() && !raised.After(due)
	at := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return "+" + t.Sub(l.res.Started).Round(100*time.Millisecond).String()
	}
	detail := fmt.Sprintf("%d logins on node %s, the last %s; its last command there %s; I/O on every client from %s",
		n, node, at(login), at(cmd), at(l.ioStart))
	if raised.IsZero() {
		detail += "; never raised"
	} else {
		detail += fmt.Sprintf("; raised %s, due by %s (a discovery window after the login or the I/O's start, "+
			"the silence window after the last command, %v slack)", at(raised), at(due), slack)
	}
	l.res.check(fmt.Sprintf("%s: Multipath Not Discovering Paths raised for node %s within the discovery window", c.Spec.Name, node), ok, "%s", detail)
}

func firstN(s []string, n int) string {
	if len(s) > n {
		return strings.Join(s[:n], " | ") + " | ... (" + strconv.Itoa(len(s)-n) + " more)"
	}
	return strings.Join(s, " | ")
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "; ")
}

func cmp0(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// conditionMND is the report condition Multipath Not Discovering Paths as
// the array's API names it (the lab reads the array through its API, not
// the ownership core).
const conditionMND = "multipath-not-discovering-paths"
