package lab

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/hosts"
	"github.com/aluad/aluad/pkg/units"
)

// A scenario is a small text file, one directive per line, # comments:
//
//	name default
//	alua implicit                       # or explicit
//	luns 8 size=64MiB                   # preferred owners alternate a, b
//	host h1 linux-dmmp                    # NAME STACK [type=HOSTTYPE] [option=value ...]
//	host h3 vmware psp=mru
//	workload luns=all hosts=all bs=4k read=70 qd=2 rate=0
//	duration 60s
//	at 8s failover: cut host=h1 node=a  # AT [LABEL:] EVENT [k=v ...]
//	at 22s failback: restore host=h1 node=a
//	at 38s rebalance: skew node=a
//	compare explicit-alua               # run again: alua explicit, every host this stack
//
// The array has nodes a and b with two ports each (a0, a1, b0, b1).
// A host line declares the host on the array with the stack's host type
// (hosts.Personality.HostType: linux-dmmp, windows and vmware are their
// own types; explicit-alua and naive are declared default) or type=.
// Events: cut/restore host=H node=N (H's paths to N's ports go down or
// come back), power-loss/panic/crash node=N (the node fails: its ports go
// silent, reset, or close; docs/faults.md), restart node=N,
// port-down/port-up port=P, cable-pull/cable-plug port=P,
// delay node=N [host=H] ms=X (added latency on those paths; ms=0 removes
// it), clear (every fault), skew node=N (every LUN moved to N by an
// operator), move lun=L node=N (one LUN moved by an operator), reboot
// host=H [down=1s] [gap=300ms] (Logout on every path, down, then a login
// a path at a time with RTPG on each). "load light" calibrates the core
// so the balanced nodes run at about 15% utilisation (45% by default). A workload line's rate is commands per second per host and
// LUN (0: as fast as the queue depth allows).
type Scenario struct {
	Name     string
	ALUA     string
	LUNs     int
	LUNSize  int64
	Hosts    []HostSpec
	Loads    []LoadSpec
	Duration time.Duration
	Events   []EventSpec
	// Light: the core's node capacity is calibrated so that the balanced
	// placement runs each node at about 15% (not stressed) instead of 45%.
	Light bool
	// Compare is the stack of the explicit comparison run ("" for none),
	// CompareType its hosts' type.
	Compare, CompareType string
	CompareOpts          map[string]string
}

// HostSpec is one host line. Type is the host type the array is told
// (alua.HostTypes): the stack's default unless type= says otherwise.
type HostSpec struct {
	Name, Stack, Type string
	Opts              map[string]string
}

// takeType removes type= from a host line's options and returns the host
// type: the option's, or the stack's default.
func takeType(stack string, opts map[string]string) (string, error) {
	typ, ok := opts["type"]
	delete(opts, "type")
	if !ok {
		p, err := hosts.Lookup(stack, nil)
		if err != nil {
			return "", err
		}
		return p.HostType, nil
	}
	if _, known := alua.HostTypes[typ]; !known {
		return "", fmt.Errorf("type %q is not a host type (%s)", typ, strings.Join(alua.HostTypeNames(), ", "))
	}
	return typ, nil
}

// LoadSpec is one workload line; nil LUNs or Hosts mean all.
type LoadSpec struct {
	LUNs    []uint64
	Hosts   []string
	BS      int
	ReadPct int
	QD      int
	Rate    float64
}

// EventSpec is one timed event.
type EventSpec struct {
	At    time.Duration
	Label string
	Kind  string
	Host  string
	Node  string
	Port  string
	Delay time.Duration
	// LUN (move); Down and Gap (reboot: how long the host stays down,
	// and the time between its logins).
	LUN       uint64
	Down, Gap time.Duration
}

var nodeNames = []string{"a", "b"}

var eventArgs = map[string][]string{
	"cut": {"host", "node"}, "restore": {"host", "node"}, "power-loss": {"node"}, "panic": {"node"},
	"crash": {"node"}, "restart": {"node"}, "port-down": {"port"}, "port-up": {"port"}, "cable-pull": {"port"},
	"cable-plug": {"port"}, "delay": {"node", "ms"}, "clear": nil, "skew": {"node"}, "reboot": {"host"},
	"move": {"lun", "node"},
}

// eventNames lists the events in the order errors show them.
var eventNames = []string{"cut", "restore", "power-loss", "panic", "crash", "restart", "port-down", "port-up",
	"cable-pull", "cable-plug", "delay", "clear", "skew", "reboot", "move"}

// ParseScenario reads a scenario; errors name the line.
func ParseScenario(r io.Reader) (*Scenario, error) {
	s := &Scenario{ALUA: "implicit", LUNs: 8, LUNSize: 64 << 20}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if err := s.directive(f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return s, s.validate()
}

// kv splits option=value words.
func kv(words []string) (map[string]string, error) {
	m := map[string]string{}
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%q: want option=value", w)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("option %s given twice", k)
		}
		m[k] = v
	}
	return m, nil
}

func (s *Scenario) directive(f []string) error {
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "name":
		if len(f) != 2 {
			return fmt.Errorf("name takes one word")
		}
		s.Name = f[1]
	case "alua":
		if len(f) != 2 || (f[1] != "implicit" && f[1] != "explicit") {
			return fmt.Errorf("alua must be implicit or explicit")
		}
		s.ALUA = f[1]
	case "luns":
		return s.parseLUNs(f[1:])
	case "host":
		if len(f) < 3 {
			return fmt.Errorf("host NAME STACK [option=value ...]")
		}
		opts, err := kv(f[3:])
		if err != nil {
			return err
		}
		typ, err := takeType(f[2], opts)
		if err != nil {
			return err
		}
		if _, err := hosts.Lookup(f[2], opts); err != nil {
			return err
		}
		for _, h := range s.Hosts {
			if h.Name == f[1] {
				return fmt.Errorf("host %s defined twice", f[1])
			}
		}
		s.Hosts = append(s.Hosts, HostSpec{Name: f[1], Stack: f[2], Type: typ, Opts: opts})
	case "workload":
		return s.parseLoad(f[1:])
	case "duration":
		d, err := time.ParseDuration(arg(1))
		if err != nil || d <= 0 || len(f) != 2 {
			return fmt.Errorf("duration takes one positive duration, like 60s")
		}
		s.Duration = d
	case "at":
		return s.parseEvent(f[1:])
	case "load":
		if len(f) != 2 || (f[1] != "light" && f[1] != "busy") {
			return fmt.Errorf("load is light (balanced nodes at about 15%% utilisation) or busy (45%%, the default)")
		}
		s.Light = f[1] == "light"
	case "compare":
		if len(f) < 2 {
			return fmt.Errorf("compare STACK [option=value ...]")
		}
		opts, err := kv(f[2:])
		if err != nil {
			return err
		}
		typ, err := takeType(f[1], opts)
		if err != nil {
			return err
		}
		if _, err := hosts.Lookup(f[1], opts); err != nil {
			return err
		}
		s.Compare, s.CompareType, s.CompareOpts = f[1], typ, opts
	default:
		return fmt.Errorf("unknown directive %q (name, alua, luns, host, workload, load, duration, at, compare)", f[0])
	}
	return nil
}

func (s *Scenario) parseLUNs(f []string) error {
	if len(f) < 1 {
		return fmt.Errorf("luns N [size=SIZE]")
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 1 || n > maxLUNs {
		return fmt.Errorf("luns: %q is not a count from 1 to 256", f[0])
	}
	opts, err := kv(f[1:])
	if err != nil {
		return err
	}
	s.LUNs = n
	for k, v := range opts {
		if k != "size" {
			return fmt.Errorf("luns: unknown option %q", k)
		}
		size, err := units.ParseSize(v)
		if err != nil || size < 1<<20 || size > 1<<30 || size%4096 != 0 {
			return fmt.Errorf("luns: size %q must be from 1MiB to 1GiB in 4KiB units", v)
		}
		s.LUNSize = size
	}
	return nil
}

func (s *Scenario) parseLoad(f []string) error {
	opts, err := kv(f)
	if err != nil {
		return err
	}
	l := LoadSpec{BS: 4096, ReadPct: 70, QD: 1}
	for k, v := range opts {
		switch k {
		case "luns":
			if v != "all" {
				if l.LUNs, err = parseIDs(v); err != nil {
					return err
				}
			}
		case "hosts":
			if v != "all" {
				l.Hosts = strings.Split(v, ",")
			}
		case "bs":
			b, err := units.ParseSize(v)
			if err != nil || b < 512 || b > 1<<20 || b%512 != 0 {
				return fmt.Errorf("bs %q must be 512 bytes to 1MiB in 512-byte units", v)
			}
			l.BS = int(b)
		case "read":
			if l.ReadPct, err = strconv.Atoi(v); err != nil || l.ReadPct < 0 || l.ReadPct > 100 {
				return fmt.Errorf("read %q must be a percentage", v)
			}
		case "qd":
			if l.QD, err = strconv.Atoi(v); err != nil || l.QD < 1 || l.QD > 64 {
				return fmt.Errorf("qd %q must be from 1 to 64", v)
			}
		case "rate":
			if l.Rate, err = strconv.ParseFloat(v, 64); err != nil || l.Rate < 0 || l.Rate > 1e6 {
				return fmt.Errorf("rate %q must be commands per second (0 for unlimited)", v)
			}
		default:
			return fmt.Errorf("workload: unknown option %q (luns, hosts, bs, read, qd, rate)", k)
		}
	}
	s.Loads = append(s.Loads, l)
	return nil
}

// parseIDs reads 0-7 or 0,2,4 or a mix.
// maxLUNs bounds a scenario's LUN count (luns 1..256), so LUN numbers
// are 0..255 and a list holds each at most once: a line cannot make the
// parser build a huge list.
const maxLUNs = 256

func parseIDs(v string) ([]uint64, error) {
	var out []uint64
	seen := map[uint64]bool{}
	for _, part := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil || a >= maxLUNs {
			return nil, fmt.Errorf("LUN list %q: %q is not a LUN number (0 to %d)", v, lo, maxLUNs-1)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 16); err != nil || b < a || b >= maxLUNs {
				return nil, fmt.Errorf("LUN list %q: bad range %q", v, part)
			}
		}
		for i := a; i <= b; i++ {
			if !seen[i] {
				seen[i] = true
				out = append(out, i)
			}
		}
	}
	return out, nil
}

func (s *Scenario) parseEvent(f []string) error {
	if len(f) < 2 {
		return fmt.Errorf("at TIME [LABEL:] EVENT [option=value ...]")
	}
	at, err := time.ParseDuration(f[0])
	if err != nil || at < 0 {
		return fmt.Errorf("at: %q is not a time like 8s", f[0])
	}
	e := EventSpec{At: at}
	rest := f[1:]
	if strings.HasSuffix(rest[0], ":") {
		e.Label = strings.TrimSuffix(rest[0], ":")
		rest = rest[1:]
		if len(rest) == 0 || e.Label == "" {
			return fmt.Errorf("at: an event must follow the label")
		}
	}
	e.Kind = rest[0]
	need, ok := eventArgs[e.Kind]
	if !ok {
		return fmt.Errorf("unknown event %q (%s)", e.Kind, strings.Join(eventNames, ", "))
	}
	opts, err := kv(rest[1:])
	if err != nil {
		return err
	}
	for _, k := range need {
		if opts[k] == "" {
			return fmt.Errorf("%s needs %s=", e.Kind, k)
		}
	}
	for k, v := range opts {
		switch k {
		case "host":
			e.Host = v
		case "node":
			if !slices.Contains(nodeNames, v) {
				return fmt.Errorf("no node %q (a, b)", v)
			}
			e.Node = v
		case "port":
			e.Port = v
		case "lun":
			id, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fmt.Errorf("lun %q is not a LUN number", v)
			}
			e.LUN = id
		case "down", "gap":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > time.Minute || e.Kind != "reboot" {
				return fmt.Errorf("%s: %s=%q must be a duration up to 1m, on a reboot", e.Kind, k, v)
			}
			if k == "down" {
				e.Down = d
			} else {
				e.Gap = d
			}
		case "ms":
			ms, err := strconv.ParseFloat(v, 64)
			if err != nil || ms < 0 || ms > 10000 {
				return fmt.Errorf("ms %q must be from 0 to 10000", v)
			}
			e.Delay = time.Duration(ms * float64(time.Millisecond))
		default:
			return fmt.Errorf("%s: unknown option %q", e.Kind, k)
		}
	}
	if e.Label == "" {
		e.Label = e.Kind
	}
	if e.Kind == "reboot" {
		if _, ok := opts["down"]; !ok {
			e.Down = time.Second
		}
		if _, ok := opts["gap"]; !ok {
			e.Gap = 300 * time.Millisecond
		}
	}
	s.Events = append(s.Events, e)
	return nil
}

func (s *Scenario) validate() error {
	if len(s.Hosts) == 0 {
		return fmt.Errorf("scenario: no host lines")
	}
	if s.Duration == 0 {
		return fmt.Errorf("scenario: no duration line")
	}
	if len(s.Loads) == 0 {
		return fmt.Errorf("scenario: no workload line")
	}
	known := map[string]bool{}
	for _, h := range s.Hosts {
		known[h.Name] = true
	}
	for _, l := range s.Loads {
		for _, h := range l.Hosts {
			if !known[h] {
				return fmt.Errorf("workload: no host %q", h)
			}
		}
		for _, id := range l.LUNs {
			if id >= uint64(s.LUNs) {
				return fmt.Errorf("workload: no LUN %d (luns %d)", id, s.LUNs)
			}
		}
	}
	var last time.Duration
	for _, e := range s.Events {
		if e.Kind == "move" && e.LUN >= uint64(s.LUNs) {
			return fmt.Errorf("at %v: no LUN %d (luns %d)", e.At, e.LUN, s.LUNs)
		}
		if e.Host != "" && !known[e.Host] {
			return fmt.Errorf("at %v: no host %q", e.At, e.Host)
		}
		if e.Port != "" && !validPort(e.Port) {
			return fmt.Errorf("at %v: no port %q (a0, a1, b0, b1)", e.At, e.Port)
		}
		if e.At < last {
			return fmt.Errorf("at %v: events must be in time order", e.At)
		}
		if e.At >= s.Duration {
			return fmt.Errorf("at %v: after the end of the run (duration %v)", e.At, s.Duration)
		}
		last = e.At
	}
	return nil
}

func validPort(p string) bool {
	return len(p) == 2 && slices.Contains(nodeNames, p[:1]) && (p[1] == '0' || p[1] == '1')
}
