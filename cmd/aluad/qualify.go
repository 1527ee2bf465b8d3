package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/lab"
	"github.com/aluad/aluad/pkg/qualify"
)

// qualifyCmd runs aluad qualify: against the running array (the client
// flags), or with --lab against an in-process array with emulated hosts.
func qualifyCmd(args []string) error {
	fs := newFlags("qualify")
	quick := fs.Bool("quick", false, "the quick schedule: a planned move of one LUN per node and back, one port down and up, a controller's power loss and restart")
	sched := fs.String("schedule", "full", "the schedule: quick, matrix, full, or a schedule file (docs/qualify.md)")
	hostList := fs.String("hosts", "", "the hosts to qualify, comma-separated (default: every host declared on the array, or every logged-in host)")
	wait := fs.Duration("wait", 5*time.Minute, "how long to wait for the hosts to be logged in and doing I/O")
	limits := fs.String("limits", "", "a limits file by host type (default: the built-in limits, docs/qualify.md)")
	out := fs.String("out", "", "the directory for report.html, results.json and junit.xml (default qualify-<time>)")
	labMode := fs.Bool("lab", false, "start an in-process array with one emulated host of each multipath stack, and qualify those")
	labLUNs := fs.Int("lab-luns", 4, "with --lab: the LUNs")
	labRate := fs.Float64("lab-rate", 100, "with --lab: commands per second per host and LUN")
	client := controlFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	name := *sched
	if *quick {
		name = "quick"
	}
	var s *qualify.Schedule
	var err error
	if _, builtin := qualify.Builtin[name]; builtin {
		s, err = qualify.LoadBuiltin(name)
	} else {
		f, ferr := os.Open(name)
		if ferr != nil {
			return fmt.Errorf("--schedule %q is not quick, matrix, full or a readable file: %v", name, ferr)
		}
		s, err = qualify.ParseSchedule(f)
		f.Close()
	}
	if err != nil {
		return err
	}
	lim := qualify.DefaultLimits()
	if *limits != "" {
		if lim, err = qualify.LoadLimits(*limits); err != nil {
			return err
		}
	}
	if *labLUNs < 1 || *labLUNs > 64 {
		return errors.New("--lab-luns must be 1-64")
	}
	if *labRate <= 0 || *labRate > 10000 {
		return errors.New("--lab-rate must be in (0, 10000]")
	}
	if *out == "" {
		*out = "qualify-" + time.Now().Format("20060102-150405")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	o := qualify.Options{Schedule: s, Limits: lim, Wait: *wait, Progress: os.Stderr, TTY: isTerminal(os.Stderr)}
	if *hostList != "" {
		o.Hosts = strings.Split(*hostList, ",")
	}
	if *labMode {
		dir, err := os.MkdirTemp("", "aluad-qualify-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "qualify: starting the lab array with emulated hosts:", labHostNames())
		q, err := lab.StartQualifyLab(ctx, lab.QualifyStacks(), *labLUNs, *labRate, dir)
		if err != nil {
			return err
		}
		defer q.Close()
		o.Source = q.Client
	} else {
		c, err := client()
		if err != nil {
			return err
		}
		o.Source = c
	}
	rep, runErr := qualify.Run(ctx, o)
	if rep == nil {
		// The outputs still say why: a CI gate must not read an old file.
		if err := qualify.WriteFiles(*out, qualify.Failed(s.Name, runErr)); err != nil {
			return err
		}
		return runErr
	}
	qualify.WriteTable(os.Stdout, rep)
	if err := qualify.WriteFiles(*out, rep); err != nil {
		return err
	}
	fmt.Printf("report: %s\n", filepath.Join(*out, "report.html"))
	if runErr != nil {
		return runErr
	}
	if !rep.Pass {
		return errors.New("qualification failed (see the findings above)")
	}
	return nil
}

func labHostNames() string {
	var n []string
	for _, h := range lab.QualifyStacks() {
		n = append(n, h.Name+" ("+h.Stack+", declared "+h.Type+")")
	}
	return strings.Join(n, ", ")
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
