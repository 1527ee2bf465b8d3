package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Event is one line of a script: a verb, its positional arguments and
// key=value options, optionally tagged with the move phase (and LUN) at
// which it runs.
type Event struct {
	// At is the move phase the event waits for ("" runs it in order).
	At string
	// AtLUN restricts At to the point about that LUN (-1: any).
	AtLUN int64
	Verb  string
	Args  []string
	Opts  map[string]string
}

// String formats the event as a script line; ParseEvent reads it back.
func (e Event) String() string {
	var b strings.Builder
	if e.At != "" {
		b.WriteString("@" + e.At)
		if e.AtLUN >= 0 {
			fmt.Fprintf(&b, ":%d", e.AtLUN)
		}
		b.WriteByte(' ')
	}
	b.WriteString(e.Verb)
	for _, a := range e.Args {
		b.WriteString(" " + a)
	}
	for _, k := range sortedKeys(e.Opts) {
		fmt.Fprintf(&b, " %s=%s", k, e.Opts[k])
	}
	return b.String()
}

// ParseEvent reads one script line.
func ParseEvent(line string) (Event, error) {
	e := Event{AtLUN: -1}
	f := strings.Fields(line)
	if len(f) == 0 {
		return e, fmt.Errorf("empty line")
	}
	if strings.HasPrefix(f[0], "@") {
		at := f[0][1:]
		if i := strings.IndexByte(at, ':'); i >= 0 {
			n, err := strconv.ParseInt(at[i+1:], 10, 64)
			if err != nil || n < 0 {
				return e, fmt.Errorf("bad phase tag %q", f[0])
			}
			at, e.AtLUN = at[:i], n
		}
		if !validPhase(at) {
			return e, fmt.Errorf("unknown phase %q (flush, hold, destage, switch, takeover)", at)
		}
		e.At = at
		f = f[1:]
		if len(f) == 0 {
			return e, fmt.Errorf("a phase tag needs an event")
		}
	}
	e.Verb = f[0]
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			if e.Opts == nil {
				e.Opts = map[string]string{}
			}
			e.Opts[k] = v
		} else {
			e.Args = append(e.Args, a)
		}
	}
	if _, ok := verbs[e.Verb]; !ok {
		return e, fmt.Errorf("unknown verb %q", e.Verb)
	}
	if n := verbs[e.Verb]; len(e.Args) < n {
		return e, fmt.Errorf("%s needs %d arguments", e.Verb, n)
	}
	return e, nil
}

// verbs maps every verb to its number of positional arguments.
var verbs = map[string]int{
	// topology (before any event)
	"nodes": 1, "lun": 1, "host": 1, "mirror": 1,
	// hosts
	"login": 1, "logout": 1, "reboot": 1, "scan": 1, "rtpg": 2,
	"read": 2, "write": 2, "ws": 2, "unmap": 2, "caw": 2, "sync": 2,
	// the array and the fabric
	"tick": 0, "destage": 1, "destager": 1, "bg": 0,
	"crash": 1, "panic": 1, "power-loss": 1, "restart": 1, "port": 2, "cable-pull": 1, "cable-plug": 1,
	"cut": 2, "mend": 2,
	"move": 2, "capacity": 2, "media": 1, "link": 1,
}

func validPhase(p string) bool {
	switch p {
	case "flush", "hold", "destage", "switch", "takeover":
		return true
	}
	return false
}

// Script is a parsed script: its lines in order.
type Script []Event

// ParseScript reads a script; blank lines and # comments are skipped.
func ParseScript(text string) (Script, error) {
	var s Script
	for i, line := range strings.Split(text, "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, err := ParseEvent(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		s = append(s, e)
	}
	return s, nil
}

// String formats the script, one event a line.
func (s Script) String() string {
	var b strings.Builder
	for _, e := range s {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func isTopology(verb string) bool {
	switch verb {
	case "nodes", "lun", "host", "mirror":
		return true
	}
	return false
}

// opt helpers: a missing or malformed option takes its default.
func (e Event) optInt(k string, def int64) int64 {
	if v, ok := e.Opts[k]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return def
}

func (e Event) optDur(k string) time.Duration {
	d, _ := time.ParseDuration(e.Opts[k])
	return d
}

func (e Event) arg(i int) string {
	if i < len(e.Args) {
		return e.Args[i]
	}
	return ""
}

func (e Event) argInt(i int) (int64, bool) {
	n, err := strconv.ParseInt(e.arg(i), 10, 64)
	return n, err == nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
