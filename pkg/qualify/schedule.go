// Package qualify owns aluad qualify: the array-side qualification of the
// hosts logged in to a running array. It drives the array through its
// management API only (pkg/api), as an administrator would: it waits
// until every declared host is connected and doing I/O, runs a schedule
// of array events one at a time (planned moves, a rebalance, port faults,
// controller failures and restarts, a rolling firmware upgrade), and
// measures every host's behaviour from the array's command trace (GET
// /v1/trace) and event feed: how long until all of its I/O to each LUN
// arrived on the new owner (follow), its longest gap without a completed
// command (stall), the CHECK CONDITIONs, task aborts and resets, session
// drops and relogins, and whether it read RTPG after the unit attention.
// It judges each host and step against limits that depend on the host's
// declared type, says what to change when a check fails, and writes a
// terminal table, JSON, JUnit XML and an HTML report. Nothing in the
// host runs for it: the hosts are real machines, VMs, QEMU lab guests or
// pkg/lab's emulated hosts.
package qualify

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// A schedule is a small text file, one directive per line, # comments:
//
//	name quick
//	settle 5s                  # quiet time after each step
//	follow 30s                 # how long the hosts and the array get per step
//	move luns=first            # each LUN (all | first: one per node | 0,3) to each other node and back
//	rebalance                  # every LUN onto one node, then the array's own rebalance
//	port ports=a0              # port down, then up (all | a0,b1)
//	fail node=a kind=power-loss down=10s   # controller failure (power-loss, panic, crash) and restart
//	upgrade down=10s           # rolling firmware upgrade: each node drained, restarted, failed back
//
// The events run in order, one step at a time.
type Schedule struct {
	Name   string
	Settle time.Duration
	Follow time.Duration
	Events []EventSpec
}

// EventSpec is one event line.
type EventSpec struct {
	Kind string
	Args map[string]string
	Line int
}

// Event kinds.
const (
	EvMove      = "move"
	EvRebalance = "rebalance"
	EvPort      = "port"
	EvFail      = "fail"
	EvUpgrade   = "upgrade"
)

var eventArgs = map[string][]string{
	EvMove:      {"luns"},
	EvRebalance: {"node"},
	EvPort:      {"ports"},
	EvFail:      {"node", "kind", "down"},
	EvUpgrade:   {"down", "nodes"},
}

// Built-in schedules: quick (a planned move of one LUN per node, one
// port's fault, one controller's power loss and restart), matrix (one
// event of every kind: quick with a rebalance and a rolling upgrade) and
// full (every LUN moved, a rebalance, every port, every failure kind, a
// rolling upgrade).
var Builtin = map[string]string{
	"quick": `name quick
settle 5s
follow 30s
move luns=first
port ports=first
fail node=a kind=power-loss down=10s
`,
	// matrix: one event of every kind, what a row of the
	// interoperability matrix is measured against.
	"matrix": `name matrix
settle 5s
follow 30s
move luns=first
rebalance
port ports=first
fail node=a kind=power-loss down=10s
upgrade down=10s
`,
	"full": `name full
settle 5s
follow 45s
move luns=all
rebalance
port ports=all
fail node=a kind=power-loss down=15s
fail node=b kind=panic down=15s
fail node=a kind=crash down=15s
upgrade down=10s
`,
}

// ParseSchedule reads a schedule; errors name the line.
func ParseSchedule(r io.Reader) (*Schedule, error) {
	s := &Schedule{Settle: 5 * time.Second, Follow: 30 * time.Second}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("schedule line %d: %s", n, fmt.Sprintf(format, a...))
		}
		switch f[0] {
		case "name":
			if len(f) != 2 {
				return nil, bad("name takes one word")
			}
			s.Name = f[1]
		case "settle", "follow":
			if len(f) != 2 {
				return nil, bad("%s takes a duration", f[0])
			}
			d, err := time.ParseDuration(f[1])
			if err != nil || d < 0 || d > time.Hour {
				return nil, bad("%s %q: a duration between 0 and 1h", f[0], f[1])
			}
			if f[0] == "settle" {
				s.Settle = d
			} else {
				s.Follow = d
			}
		default:
			allowed, ok := eventArgs[f[0]]
			if !ok {
				return nil, bad("unknown directive %q (name, settle, follow, move, rebalance, port, fail, upgrade)", f[0])
			}
			ev := EventSpec{Kind: f[0], Args: map[string]string{}, Line: n}
			for _, kv := range f[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || v == "" {
					return nil, bad("%q is not key=value", kv)
				}
				if !slices.Contains(allowed, k) {
					return nil, bad("%s takes %s, not %q", f[0], strings.Join(allowed, ", "), k)
				}
				if _, dup := ev.Args[k]; dup {
					return nil, bad("%s given twice", k)
				}
				ev.Args[k] = v
			}
			if err := checkArgs(ev); err != nil {
				return nil, bad("%v", err)
			}
			s.Events = append(s.Events, ev)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(s.Events) == 0 {
		return nil, fmt.Errorf("schedule has no events")
	}
	if s.Name == "" {
		s.Name = "schedule"
	}
	return s, nil
}

func checkArgs(ev EventSpec) error {
	if d, ok := ev.Args["down"]; ok {
		if v, err := time.ParseDuration(d); err != nil || v < 0 || v > 10*time.Minute {
			return fmt.Errorf("down=%q: a duration between 0 and 10m", d)
		}
	}
	switch ev.Kind {
	case EvMove:
		if v := ev.Args["luns"]; v != "" && v != "all" && v != "first" {
			for _, x := range strings.Split(v, ",") {
				if _, err := strconv.ParseUint(x, 10, 64); err != nil {
					return fmt.Errorf("luns=%q: all, first or LUN numbers separated by commas", v)
				}
			}
		}
	case EvFail:
		if ev.Args["node"] == "" {
			return fmt.Errorf("fail needs node=")
		}
		switch k := ev.Args["kind"]; k {
		case "", api.FaultPowerLoss, api.FaultPanic, api.FaultCrash:
		default:
			return fmt.Errorf("kind=%q: power-loss, panic or crash", k)
		}
	}
	return nil
}

// LoadBuiltin returns a built-in schedule by name.
func LoadBuiltin(name string) (*Schedule, error) {
	src, ok := Builtin[name]
	if !ok {
		return nil, fmt.Errorf("no built-in schedule %q (quick, matrix, full)", name)
	}
	return ParseSchedule(strings.NewReader(src))
}

func (e EventSpec) duration(k string, def time.Duration) time.Duration {
	if v, ok := e.Args[k]; ok {
		d, _ := time.ParseDuration(v)
		return d
	}
	return def
}
