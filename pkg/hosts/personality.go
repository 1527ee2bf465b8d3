package hosts

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/alua"
)

// Grouping is how a personality chooses the paths a LUN's I/O may use.
type Grouping int

const (
	// GroupByPrio: paths grouped by their ALUA priority (AO 50, ANO 10,
	// STANDBY 1, else 0, as multipath-tools' prio alua), I/O on the group
	// in use until it has no usable path or the priorities change.
	GroupByPrio Grouping = iota
	// AOSubset: the active/optimized paths; the non-optimized ones only
	// when no AO path is usable (MSDSM Round Robin with Subset, NMP RR).
	AOSubset
	// MostRecentlyUsed: the path in use while it is usable and
	// active/optimized, else an AO path (NMP MRU with follow-over).
	MostRecentlyUsed
	// AllPaths: every usable path, ALUA states ignored.
	AllPaths
)

// Failback is when a GroupByPrio host returns to a better path group.
type Failback int

const (
	// FailbackImmediate: as soon as a higher priority group is seen.
	FailbackImmediate Failback = iota
	// FailbackFollowover: only when a path of the better group comes back
	// up (reinstated), not on a priority change alone.
	FailbackFollowover
	// FailbackManual: never while the group in use has a usable path.
	FailbackManual
)

// QueueForever is NoPathRetry's queue_if_no_path.
const QueueForever = -1

// Personality is the behaviour of one host multipath stack.
type Personality struct {
	// Name is the stack's name: for the stacks the array has a host type
	// for, that type's name (alua.HostTypes), which HostType repeats.
	Name string
	// HostType is the host type an administrator declares on the array
	// for the stack: linux-dmmp (STANDBY on the old owner, so dm-multipath
	// leaves it at once), windows, vmware; default for the stacks that
	// have none of their own (explicit-alua, naive: a host that ignores
	// ALUA but is declared as one that follows it).
	HostType string
	Grouping Grouping
	Selector string
	// SwitchEvery, when positive, keeps a path for this many commands
	// before the selector is asked again (NMP RR iops=1000).
	SwitchEvery int
	// ReadsRTPG: the stack reads REPORT TARGET PORT GROUPS at attach and
	// on the unit attentions in RTPGOn (ASC<<8 | ASCQ).
	ReadsRTPG bool
	RTPGOn    []uint16
	// RetryEvery is the wait before a command that got 04/0A is retried.
	RetryEvery time.Duration
	// TransitionTimeout: 04/0A is retried only until RTPG byte 5's
	// implicit transition time (60 s when 0) has passed; then the group
	// is taken as STANDBY and the path fails (scsi_dh_alua).
	TransitionTimeout bool
	// OtherGroup: 04/0A and 04/0C are retried on another group (MSDSM).
	OtherGroup bool
	// CheckEvery is the path checker's interval; a path whose state is
	// unchanged is checked less often, up to MaxCheckEvery.
	CheckEvery, MaxCheckEvery time.Duration
	// PrioAtCheck: the group in use follows ALUA state changes only when
	// the checker re-reads a path's priority (multipathd), not on the UA.
	PrioAtCheck bool
	Failback    Failback
	// NoPathRetry: with no usable path, commands queue for this many
	// checker intervals, then fail; QueueForever queues until a path
	// returns (queue_if_no_path).
	NoPathRetry int
	// Explicit: the host moves ownership with SET TARGET PORT GROUPS.
	Explicit bool
	// FastIOFail: a command that meets a transport error (the connection
	// is gone) is held this long before the path fails and it is retried
	// on another, as an iSCSI session's recovery timeout holds it; 0
	// fails the path at once. Real dm-multipath sets the timeout to its
	// fast_io_fail_tmo, 5 s: the QEMU lab measured 5.1-5.8 s from a cut
	// to I/O on the other node. Off by default: the emulated path is not
	// logged in again while the command is held, as open-iscsi does, so
	// a short flap would outlast itself.
	FastIOFail time.Duration
	// NopInterval and NopTimeout are the iSCSI initiator's connection
	// ping (open-iscsi noop_out_interval/noop_out_timeout, ESXi
	// NoopOutInterval/NoopOutTimeout): how a host learns that a target
	// went silent (a power loss or a pulled cable). Zero: no ping.
	NopInterval, NopTimeout time.Duration
	// CmdTimeout: a command with no answer this long fails its path
	// (the disk timeout); zero waits for ever.
	CmdTimeout time.Duration
	// TMFTimeout is how long each task management function that ends a
	// timed-out command may take before the error handling escalates
	// (ABORT TASK, LOGICAL UNIT RESET, then the session is dropped);
	// zero is DefaultTMFTimeout, open-iscsi's abort_timeout.
	TMFTimeout time.Duration
}

// DefaultTMFTimeout is open-iscsi's node.session.err_timeo.abort_timeout.
const DefaultTMFTimeout = 15 * time.Second

var linuxUAs = []uint16{0x2a06, 0x2a07, 0x2900}

// LinuxDM is open-iscsi + dm-multipath + scsi_dh_alua with multipathd's
// defaults for an ALUA array: group_by_prio, prio alua, failback
// immediate, polling_interval 5 s (max_polling_interval 4x),
// path_selector service-time, queue_if_no_path.
func LinuxDM() Personality {
	return Personality{Name: alua.HostLinuxDMMP, HostType: alua.HostLinuxDMMP, Grouping: GroupByPrio, Selector: "service-time", ReadsRTPG: true,
		RTPGOn: linuxUAs, RetryEvery: time.Second, TransitionTimeout: true, CheckEvery: 5 * time.Second,
		MaxCheckEvery: 20 * time.Second, PrioAtCheck: true, Failback: FailbackImmediate, NoPathRetry: QueueForever,
		NopInterval: 5 * time.Second, NopTimeout: 5 * time.Second, CmdTimeout: 30 * time.Second}
}

// WindowsMSDSM is the Microsoft DSM with Round Robin with Subset and the
// MPIO defaults (RetryInterval 1 s, PDORemovePeriod 20 s; the iSCSI
// initiator re-logs a lost connection in by itself, here every second).
func WindowsMSDSM() Personality {
	return Personality{Name: alua.HostWindows, HostType: alua.HostWindows, Grouping: AOSubset, Selector: "round-robin", ReadsRTPG: true,
		RTPGOn: []uint16{0x2a06, 0x2a07, 0x2900, 0x3f0e}, RetryEvery: time.Second, OtherGroup: true,
		CheckEvery: time.Second, MaxCheckEvery: time.Second, NoPathRetry: 20, CmdTimeout: 60 * time.Second}
}

// VMwareNMP is ESXi's NMP with VMW_SATP_ALUA: psp "mru" (follow-over to
// the new AO path on a state change) or "rr" (round robin over the AO
// paths, switching every 1000 commands). The path evaluation runs every
// 5 minutes on ESXi; a lost path is retried every 2 s here.
func VMwareNMP(psp string) (Personality, error) {
	p := Personality{Name: alua.HostVMware, HostType: alua.HostVMware, ReadsRTPG: true, RTPGOn: linuxUAs, RetryEvery: time.Second,
		CheckEvery: 2 * time.Second, MaxCheckEvery: 2 * time.Second, NoPathRetry: QueueForever, Selector: "round-robin",
		NopInterval: 15 * time.Second, NopTimeout: 10 * time.Second}
	switch psp {
	case "mru", "":
		p.Grouping = MostRecentlyUsed
	case "rr":
		p.Grouping, p.SwitchEvery = AOSubset, 1000
	default:
		return p, fmt.Errorf("vmware: psp must be mru or rr, not %q", psp)
	}
	return p, nil
}

// ExplicitALUA is a host that drives ownership with SET TARGET PORT
// GROUPS: it activates a group it reaches when it has no AO path, and at
// each check moves the LUN back to the group it first saw AO when it
// reaches it (failback by the host). 04/0A is retried every second.
func ExplicitALUA() Personality {
	return Personality{Name: "explicit-alua", HostType: alua.HostDefault, Grouping: AOSubset, Selector: "round-robin", ReadsRTPG: true,
		RTPGOn: linuxUAs, RetryEvery: time.Second, TransitionTimeout: true, CheckEvery: 5 * time.Second,
		MaxCheckEvery: 5 * time.Second, NoPathRetry: QueueForever, Explicit: true,
		NopInterval: 5 * time.Second, NopTimeout: 5 * time.Second}
}

// Naive round-robins over every path and never reads ALUA states; a
// command refused on a path is retried on the next one after a second.
func Naive() Personality {
	return Personality{Name: "naive", HostType: alua.HostDefault, Grouping: AllPaths, Selector: "round-robin", RetryEvery: time.Second,
		CheckEvery: 5 * time.Second, MaxCheckEvery: 5 * time.Second, NoPathRetry: QueueForever,
		NopInterval: 5 * time.Second, NopTimeout: 5 * time.Second}
}

// renamed maps the stacks' earlier names to the host types they model.
var renamed = map[string]string{"linux-dm": alua.HostLinuxDMMP, "windows-msdsm": alua.HostWindows, "vmware-nmp": alua.HostVMware}

// Names lists the personalities Lookup knows.
var Names = []string{alua.HostLinuxDMMP, alua.HostWindows, alua.HostVMware, "explicit-alua", "naive"}

// Lookup builds a personality by name with options from a scenario:
// selector=NAME, psp=mru|rr, failback=immediate|followover|manual,
// checker=DURATION, max_checker=DURATION, no_path_retry=N|queue,
// retry=DURATION.
func Lookup(name string, opts map[string]string) (Personality, error) {
	var p Personality
	var err error
	switch name {
	case alua.HostLinuxDMMP:
		p = LinuxDM()
	case alua.HostWindows:
		p = WindowsMSDSM()
	case alua.HostVMware:
		p, err = VMwareNMP(opts["psp"])
	case "explicit-alua":
		p = ExplicitALUA()
	case "naive":
		p = Naive()
	default:
		if now, ok := renamed[name]; ok {
			return p, fmt.Errorf("host stack %q is now named %q, after the host type it models", name, now)
		}
		return p, fmt.Errorf("unknown host stack %q (%s)", name, strings.Join(Names, ", "))
	}
	if err != nil {
		return p, err
	}
	for k, v := range opts {
		if err := p.set(k, v); err != nil {
			return p, fmt.Errorf("%s: %w", name, err)
		}
	}
	if _, err := NewSelector(p.Selector); err != nil {
		return p, err
	}
	return p, nil
}

func (p *Personality) set(k, v string) error {
	dur := func(dst *time.Duration) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s=%q: want a positive duration like 5s", k, v)
		}
		*dst = d
		return nil
	}
	switch k {
	case "psp":
		if p.Name != "vmware" {
			return fmt.Errorf("psp applies to vmware only")
		}
	case "selector":
		p.Selector = v
	case "failback":
		f, ok := map[string]Failback{"immediate": FailbackImmediate, "followover": FailbackFollowover, "manual": FailbackManual}[v]
		if !ok {
			return fmt.Errorf("failback=%q: want immediate, followover or manual", v)
		}
		p.Failback = f
	case "checker":
		if err := dur(&p.CheckEvery); err != nil {
			return err
		}
		p.MaxCheckEvery = max(p.MaxCheckEvery, p.CheckEvery)
	case "max_checker":
		if err := dur(&p.MaxCheckEvery); err != nil {
			return err
		}
		if p.MaxCheckEvery < p.CheckEvery {
			return fmt.Errorf("max_checker must be at least checker (%v)", p.CheckEvery)
		}
	case "retry":
		return dur(&p.RetryEvery)
	case "fast_io_fail":
		return dur(&p.FastIOFail)
	case "noop_interval":
		return dur(&p.NopInterval)
	case "noop_timeout":
		return dur(&p.NopTimeout)
	case "cmd_timeout":
		return dur(&p.CmdTimeout)
	case "tmf_timeout":
		return dur(&p.TMFTimeout)
	case "no_path_retry":
		if v == "queue" {
			p.NoPathRetry = QueueForever
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("no_path_retry=%q: want a count or queue", v)
		}
		p.NoPathRetry = n
	default:
		return fmt.Errorf("unknown option %q", k)
	}
	return nil
}
