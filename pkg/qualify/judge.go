package qualify

import (
	"fmt"
	"io"
	"maps"
	"os"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/aluad/aluad/pkg/alua"
)

// TypeLimits are what a host of one type must do. Zero durations take
// the defaults' values.
type TypeLimits struct {
	// Follow: the host is expected to move its I/O to the new owner after
	// a planned move, within PlannedFollow.
	Follow        bool          `yaml:"follow" json:"follow"`
	PlannedFollow time.Duration `yaml:"planned_follow" json:"planned_follow_ns"`
	// PlannedStall: the longest gap in its I/O through a planned move.
	PlannedStall time.Duration `yaml:"planned_stall" json:"planned_stall_ns"`
	// FailoverStall: through a controller failure, until its I/O runs on
	// the survivor.
	FailoverStall time.Duration `yaml:"failover_stall" json:"failover_stall_ns"`
	// PortStall: through a target port going down or up.
	PortStall time.Duration `yaml:"port_stall" json:"port_stall_ns"`
	// RTPG: it reads REPORT TARGET PORT GROUPS after each unit attention
	// 2A/06 (an ALUA-aware multipath driver does).
	RTPG bool `yaml:"rtpg" json:"rtpg"`
}

// Limits are the limits by host type ("*" for any type not listed).
type Limits map[string]TypeLimits

// DefaultLimits are the limits a storage engineer would hold a host to:
// every ALUA-aware type follows a planned move within 5 s with no gap
// over 2 s, rides through a controller failure or a port fault within
// 30 s, and reads RTPG after each unit attention; a legacy (non-ALUA)
// host is held to the stalls only.
func DefaultLimits() Limits {
	aware := TypeLimits{Follow: true, PlannedFollow: 5 * time.Second, PlannedStall: 2 * time.Second,
		FailoverStall: 30 * time.Second, PortStall: 30 * time.Second, RTPG: true}
	legacy := aware
	legacy.Follow, legacy.RTPG = false, false
	return Limits{"*": aware, alua.HostLegacy: legacy}
}

// For returns the limits of a host type.
func (l Limits) For(typ string) TypeLimits {
	if t, ok := l[typ]; ok {
		return t
	}
	return l["*"]
}

// LoadLimits reads a limits file over the defaults:
//
//	types:
//	  linux:
//	    planned_follow: 10s
//	  "*":
//	    failover_stall: 20s
//
// A type's keys left out keep the default type's values.
func LoadLimits(path string) (Limits, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseLimits(f)
}

// ParseLimits reads limits (see LoadLimits).
func ParseLimits(r io.Reader) (Limits, error) {
	var doc struct {
		Types map[string]yaml.Node `yaml:"types"`
	}
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return nil, fmt.Errorf("limits: %w", err)
	}
	out := DefaultLimits()
	names := sortedHosts(doc.Types)
	// "*" first: the other types start from it.
	sort.SliceStable(names, func(i, j int) bool { return names[i] == "*" && names[j] != "*" })
	for _, name := range names {
		if _, known := alua.HostTypes[name]; !known && name != "*" {
			return nil, fmt.Errorf("limits: unknown host type %q", name)
		}
		t := out.For(name)
		node := doc.Types[name]
		if err := node.Decode(&t); err != nil {
			return nil, fmt.Errorf("limits: %s: %w", name, err)
		}
		var keys map[string]any
		_ = node.Decode(&keys)
		for k := range keys {
			switch k {
			case "follow", "planned_follow", "planned_stall", "failover_stall", "port_stall", "rtpg":
			default:
				return nil, fmt.Errorf("limits: %s: unknown key %q", name, k)
			}
		}
		for _, d := range []time.Duration{t.PlannedFollow, t.PlannedStall, t.FailoverStall, t.PortStall} {
			if d <= 0 {
				return nil, fmt.Errorf("limits: %s: durations must be positive", name)
			}
		}
		out[name] = t
	}
	return maps.Clone(out), nil
}

// failure is a failed check of one host in one step.
type failure struct{ check, observed, advice string }

func linuxType(t string) bool { return strings.HasPrefix(t, "linux") || t == alua.HostDefault }

func discoveryFailure(node, state string) failure {
	switch state {
	case "", "none":
		return failure{"paths", fmt.Sprintf("no session to node %s", node),
			fmt.Sprintf("the host is not logged in to node %s's ports: log in to every portal (open-iscsi: iscsiadm -m discovery, then -m node --login), or a controller failure leaves it without a path", node)}
	case "protocol-only":
		return failure{"paths", fmt.Sprintf("logged in to node %s but no RTPG or I/O on its paths", node),
			fmt.Sprintf("no RTPG on paths to node %s: multipath is not discovering them (blacklisted, a different WWID, or multipathd not running); a failover to %s would find no path", node, node)}
	case "lost":
		return failure{"paths", fmt.Sprintf("reached node %s before, not now", node), "a path to " + node + " failed and did not come back: check the host's sessions to its portals"}
	}
	return failure{"paths", fmt.Sprintf("node %s: %s", node, state), "check the host's paths to " + node}
}

func fmtMs(v float64) string {
	switch {
	case v < 0:
		return "never"
	case v >= 10000:
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func summary(m map[string]int) string {
	keys := sortedHosts(m)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s x%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func hold(st Step, l uint64) float64 {
	var h float64
	for _, c := range st.Changes {
		for _, x := range c.LUNs {
			if x == l {
				h = c.HoldMs
			}
		}
	}
	return h
}

// judge sets res's verdict and failures for the step by the limits.
func judge(res *Result, st Step, lim TypeLimits, hadPort int) {
	if len(res.LUNs) == 0 {
		res.Verdict = "n/a"
		return
	}
	res.Verdict = "pass"
	fail := func(check, observed, advice string) {
		res.fails = append(res.fails, failure{check, observed, advice})
	}
	switch st.Class {
	case ClassPlanned:
		for _, lr := range res.LUNs {
			if !lr.Moved || !lim.Follow {
				continue
			}
			f := *lr.FollowMs
			then := ""
			if lr.Then != "" {
				then = " (the array then moved it again: " + lr.Then + ")"
			}
			switch {
			case f < 0 && !lr.UA:
				fail("follow", fmt.Sprintf("LUN %d moved %s -> %s; the host's I/O never all reached %s and it was given no 2A/06%s", lr.LUN, lr.From, lr.To, lr.To, then),
					"the host sent no command to the LUN on a path that would carry the unit attention: its I/O stopped, or only its paths to the new owner were used")
			case f < 0 && !lr.RTPG:
				fail("follow", fmt.Sprintf("LUN %d moved %s -> %s; I/O still arrived at %s at the end, and no RTPG after the 2A/06%s", lr.LUN, lr.From, lr.To, lr.From, then),
					"the host never read RTPG after the unit attention, so it cannot learn the new owner: the ALUA device handler is not attached (Linux: scsi_dh_alua, `multipath -ll` should show hwhandler='1 alua' and prio alua), or multipath uses a fixed priority")
			case f < 0:
				fail("follow", fmt.Sprintf("LUN %d moved %s -> %s; it read RTPG after the 2A/06 but its I/O still arrived at %s at the end%s", lr.LUN, lr.From, lr.To, lr.From, then),
					"the host sees the new states and keeps the path group in use: dm-multipath's failback manual, or failback followover (followover never follows a planned move). Set failback immediate, or declare the host as the Linux DM-MP type (linux-dmmp: the old owner's paths turn STANDBY, so it must leave them)")
			case f > ms(lim.PlannedFollow):
				adv := fmt.Sprintf("it follows %s after the unit attention: its path selector re-reads ALUA states only at its path checker's interval; shorten that interval", fmtMs(f-deref(lr.UAMs)))
				if linuxType(res.Type) && res.Type != alua.HostLinuxDMMP {
					adv = "follows only at multipathd's priority check, not at the unit attention: declare the host as the Linux DM-MP type (linux-dmmp: Standby hand-off), or set failback immediate and a shorter polling_interval"
				}
				fail("follow time", fmt.Sprintf("LUN %d: all I/O on %s %s after the move (limit %s)", lr.LUN, lr.To, fmtMs(f), fmtMs(ms(lim.PlannedFollow))), adv)
			}
		}
		if res.StallMs > ms(lim.PlannedStall) {
			lr := worstStall(res)
			fail("stall", fmt.Sprintf("LUN %d: no command completed for %s (limit %s; the array held I/O %.1f ms)%s", lr.LUN, fmtMs(lr.StallMs),
				fmtMs(ms(lim.PlannedStall)), hold(st, lr.LUN), checksNote(lr.Checks)),
				"a planned move holds I/O for milliseconds; a longer gap is the host's: its retry interval for 04/0A (transitioning) or 02/04/0B (standby), or a path it stopped using without another ready (Linux: dm-multipath's queue while its priority check runs)")
		}
		if tm := resets(res.TMFs); tm != "" {
			fail("task management", fmt.Sprintf("%s during a planned move", tm),
				"the host's SCSI command timeout fired while the array moved the LUN: raise the device timeout (Linux: /sys/block/sdX/device/timeout, udev rule), or find why its commands waited that long")
		}
		if res.Drops > 0 {
			fail("session", fmt.Sprintf("%s during a planned move", plural(res.Drops, "session drop")),
				"a planned move never closes a session: the host's NOP-Out or replacement timeout is shorter than its commands waited (open-iscsi: node.conn[0].timeo.noop_out_timeout)")
		}
		if lim.RTPG && res.RTPG == "no" && !hasFailure(res, "follow") {
			fail("rtpg", "no RTPG after a 2A/06 (asymmetric access state changed)",
				"an ALUA host reads REPORT TARGET PORT GROUPS when told the states changed: attach the ALUA device handler (Linux: scsi_dh_alua)")
		}
	case ClassFailure:
		if res.StallMs > ms(lim.FailoverStall) {
			adv := "the host's path failure detection decides this: shorten it"
			switch {
			case linuxType(res.Type):
				adv = "the host waited that long before retrying on the surviving controller: lower open-iscsi's noop_out_interval/noop_out_timeout and replacement_timeout, and dm-multipath's fast_io_fail_tmo"
			case res.Type == alua.HostWindows:
				adv = "lower MPIO's PathVerificationPeriod and the iSCSI initiator's LinkDownTime"
			case res.Type == alua.HostVMware:
				adv = "lower the iSCSI adapter's NoopOutInterval/NoopOutTimeout and RecoveryTimeout"
			}
			fail("failover stall", fmt.Sprintf("no command completed for %s after the controller failed (limit %s)", fmtMs(res.StallMs), fmtMs(ms(lim.FailoverStall))), adv)
		}
		for _, lr := range res.LUNs {
			if lr.Moved && *lr.FollowMs < 0 {
				fail("failover", fmt.Sprintf("LUN %d: I/O never ran on %s after the failover", lr.LUN, lr.To),
					fmt.Sprintf("no path to %s carried I/O: check that the host discovered its paths to %s (the discovery step)", lr.To, lr.To))
			}
		}
	case ClassPort:
		if res.StallMs > ms(lim.PortStall) {
			fail("port stall", fmt.Sprintf("no command completed for %s (limit %s)", fmtMs(res.StallMs), fmtMs(ms(lim.PortStall))),
				"the host's other path to the same controller should take over: check it has one, and its path failure detection (NOP-Out, fast_io_fail_tmo)")
		}
		if strings.HasSuffix(st.Name, " up") && hadPort > 0 && res.LoginsHere == 0 {
			fail("relogin", fmt.Sprintf("no login to port %s after it came back", st.Port),
				"the host did not log back in to a port that returned: open-iscsi retries a lost session until replacement_timeout and then gives up; check node.session.reopen_max / the initiator's login retries")
		}
	case ClassRestart:
		if hadPort > 0 && res.LoginsHere == 0 {
			fail("relogin", fmt.Sprintf("no login to node %s after its restart", st.Node),
				"the host did not log back in to the restarted controller: without those paths the next failover has nowhere to go")
		}
		if res.StallMs > ms(lim.PlannedStall) {
			lr := worstStall(res)
			fail("stall", fmt.Sprintf("LUN %d: no command completed for %s while a drained controller restarted (limit %s)", lr.LUN, fmtMs(lr.StallMs), fmtMs(ms(lim.PlannedStall))),
				"after a drain, no I/O should need the restarting controller: the host's I/O still used its paths")
		}
	}
	if len(res.fails) > 0 {
		res.Verdict = "fail"
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

func worstStall(res *Result) LUNResult {
	w := res.LUNs[0]
	for _, lr := range res.LUNs {
		if lr.StallMs > w.StallMs {
			w = lr
		}
	}
	return w
}

func checksNote(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	return "; CHECK CONDITIONs " + summary(m)
}

// resets summarises the aborts and resets (empty: none).
func resets(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	return "task management " + summary(m)
}

func hasFailure(res *Result, check string) bool {
	for _, f := range res.fails {
		if f.check == check {
			return true
		}
	}
	return false
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// hostAdvice adds what only the whole run shows: a host that never follows
// a planned move but does follow a failback is dm-multipath's failback
// followover.
func (r *runner) hostAdvice(hosts map[string]HostReport) {
	for name := range hosts {
		plannedMiss, failbackFollow := false, false
		for _, res := range r.rep.Results {
			if res.Host != name {
				continue
			}
			st := r.rep.Steps[res.Step]
			isFailback := strings.Contains(st.Name, "(failback)")
			for _, lr := range res.LUNs {
				if !lr.Moved || lr.FollowMs == nil {
					continue
				}
				if isFailback && *lr.FollowMs >= 0 {
					failbackFollow = true
				}
				if !isFailback && st.Class == ClassPlanned && *lr.FollowMs < 0 && lr.RTPG {
					plannedMiss = true
				}
			}
		}
		if !plannedMiss || !failbackFollow {
			continue
		}
		for i := range r.rep.Results {
			res := &r.rep.Results[i]
			if res.Host != name {
				continue
			}
			for j := range res.fails {
				if res.fails[j].check == "follow" {
					res.fails[j].advice = "failback followover never follows a planned move: the host followed the failback (a path group that came back) but no planned move. Set failback immediate, or declare the host as linux-dmmp (Standby hand-off)"
				}
			}
		}
	}
}
