package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// samples are the kinds emitted every stats interval per nexus (I/O and
// exchange counters): the measurements, not the log. They are off unless
// asked for.
var samples = []string{api.EventIO, api.EventPath}

// eventKinds lists every kind the feed has.
var eventKinds = []string{api.EventLogin, api.EventLogout, api.EventRTPG, api.EventUA, api.EventALUA, api.EventHandoff,
	api.EventReport, api.EventFault, api.EventMapping, api.EventHost, api.EventAudit, api.EventState, api.EventIO, api.EventPath}

// eventFilter is what 'aluad events' prints.
type eventFilter struct {
	kinds  []string  // only these (empty: every kind but the samples)
	after  time.Time // only events at or after this time
	sample bool
}

func (f eventFilter) keep(e api.Event) bool {
	if !f.after.IsZero() && e.Time.Before(f.after) {
		return false
	}
	if len(f.kinds) > 0 {
		return slices.Contains(f.kinds, e.Kind)
	}
	return f.sample || !slices.Contains(samples, e.Kind)
}

// events is 'aluad events': the array's event log, as a SANtricity-like
// list (text) or JSON lines, filtered by kind and time.
func events(args []string) error {
	fs := newFlags("events")
	since := fs.String("since", "", "only events after this sequence number (e.g. 1200) or within this long (e.g. 10m)")
	kind := fs.String("kind", "", "only these kinds, comma-separated: "+strings.Join(eventKinds, ", "))
	withSamples := fs.Bool("samples", false, "include the per-interval samples (io, path), off by default")
	follow := fs.Bool("follow", false, "keep printing new events")
	output := outputFlag(fs)
	client := controlFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	js, err := output()
	if err != nil {
		return err
	}
	f := eventFilter{sample: *withSamples}
	var seq uint64
	if *since != "" {
		if n, err := strconv.ParseUint(*since, 10, 64); err == nil {
			seq = n
		} else if d, err := time.ParseDuration(*since); err == nil && d > 0 {
			f.after = time.Now().Add(-d)
		} else {
			return fmt.Errorf("--since %q: give a sequence number (1200) or a duration (10m)", *since)
		}
	}
	if *kind != "" {
		for _, k := range strings.Split(*kind, ",") {
			k = strings.TrimSpace(k)
			if !slices.Contains(eventKinds, k) {
				return fmt.Errorf("--kind %q: not an event kind (%s)", k, strings.Join(eventKinds, ", "))
			}
			f.kinds = append(f.kinds, k)
		}
	}
	c, err := client()
	if err != nil {
		return err
	}
	for {
		r, err := c.Events(seq)
		if err != nil {
			return err
		}
		if r.Lost > 0 {
			fmt.Fprintf(os.Stderr, "aluad events: %d events were overwritten before they were read\n", r.Lost)
		}
		if err := printEvents(os.Stdout, r.Events, f, js); err != nil {
			return err
		}
		if n := len(r.Events); n > 0 {
			seq = r.Events[n-1].Seq
		}
		if !*follow {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// printEvents writes the events f keeps, one per line.
func printEvents(w io.Writer, evs []api.Event, f eventFilter, js bool) error {
	enc := json.NewEncoder(w)
	for _, e := range evs {
		if !f.keep(e) {
			continue
		}
		var err error
		if js {
			err = enc.Encode(e)
		} else {
			_, err = fmt.Fprintf(w, "%s  %6d  %-8s %s\n", e.Time.UTC().Format(time.RFC3339), e.Seq, e.Kind, describe(e))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// describe is one event in words.
func describe(e api.Event) string {
	var parts []string
	add := func(format string, a ...any) { parts = append(parts, fmt.Sprintf(format, a...)) }
	nexus := func() {
		if e.Host != "" {
			add("host %s", e.Host)
		}
		if e.Initiator != "" && e.Initiator != e.Host {
			add("initiator %s", e.Initiator)
		}
		if e.Node != "" {
			add("node %s", e.Node)
		}
		if e.TargetPort != 0 {
			add("port %d", e.TargetPort)
		}
	}
	switch e.Kind {
	case api.EventAudit, api.EventMapping, api.EventHost:
		add("%s", e.Reason)
		if e.Initiator != "" {
			add("by %s", e.Initiator)
		}
		return strings.Join(parts, ", ")
	}
	if c := e.Change; c != nil {
		add("LUNs %v %s -> %s (%s)", c.LUNs, c.From, c.To, c.Cause)
		if c.Failed {
			add("FAILED, rolled back: %s", c.Error)
		} else {
			add("I/O held %v", c.Stop.Round(time.Microsecond))
		}
		if len(c.Lost) > 0 {
			add("%d acknowledged writes LOST", len(c.Lost))
		}
	}
	if r := e.Report; r != nil {
		state := "raised"
		if !r.Raised {
			state = "cleared"
		}
		add("%s %s", r.Condition, state)
		switch {
		case r.Cause != "": // it names the host and node itself
			parts[len(parts)-1] += ": " + r.Cause
		default:
			if r.Host != "" {
				add("host %s", r.Host)
			}
			if r.Node != "" {
				add("node %s", r.Node)
			}
		}
	}
	if ft := e.Fault; ft != nil {
		add("%s", ft.Kind)
		if ft.Node != "" {
			add("node %s", ft.Node)
		}
		if ft.Port != "" {
			add("port %s", ft.Port)
		}
	}
	if e.Report == nil {
		nexus()
	}
	if e.LUN != nil {
		add("LUN %d", *e.LUN)
	}
	if e.Extended {
		add("extended header")
	}
	if io := e.IO; io != nil {
		add("%d reads %d writes %d other in %v", io.Reads, io.Writes, io.Other, io.Interval)
	}
	if p := e.Path; p != nil && p.Exchanges > 0 {
		add("%d exchanges, mean %v", p.Exchanges, (p.Exchange / time.Duration(p.Exchanges)).Round(time.Microsecond))
	}
	if e.Reason != "" && e.Report == nil {
		add("%s", e.Reason)
	}
	return strings.Join(parts, ", ")
}
