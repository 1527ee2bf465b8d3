package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Every subcommand's flags: '-h' prints its usage line (from the usage
// text) and its flags on stdout and exits 0; a mistake is returned as an
// error, printed once by main with a hint to '-h'.

// helpFor is the flag set of the subcommand running, for main's '-h'.
var helpFor *flag.FlagSet

// newFlags is a subcommand's flag set, silent on errors (main prints
// them).
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	helpFor = fs
	return fs
}

// usageOf is the usage text's lines for command (its first word), each
// with its description.
func usageOf(command string) string {
	word := strings.Fields(command)[0]
	var out []string
	in := false
	for _, l := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(l, "  aluad "+word+" ") || l == "  aluad "+word:
			in = true
		case strings.HasPrefix(l, "  aluad ") || strings.TrimSpace(l) == "":
			in = false
		}
		if in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// printHelp prints fs's command's usage and flags to w.
func printHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage:\n%s\n", usageOf(fs.Name()))
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// isHelp says args asks for help.
func isHelp(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help")
}

// exit ends a subcommand: help on stdout and 0; an error once on stderr
// with a hint, and 1.
func exit(command string, err error) {
	if errors.Is(err, flag.ErrHelp) {
		if helpFor != nil {
			printHelp(os.Stdout, helpFor)
		} else {
			fmt.Printf("Usage:\n%s\n", usageOf(command))
		}
		os.Exit(0)
	}
	if err == nil {
		return
	}
	msg := err.Error()
	fmt.Fprintf(os.Stderr, "aluad %s: %s\n", command, msg)
	if helpFor != nil && (strings.HasPrefix(msg, "flag") || strings.HasPrefix(msg, "invalid value") ||
		strings.HasPrefix(msg, "unexpected argument") || strings.HasPrefix(msg, "usage:")) {
		fmt.Fprintf(os.Stderr, "Run 'aluad %s -h' for its flags.\n", command)
	}
	os.Exit(1)
}

// parse parses a subcommand's flags and refuses arguments left over.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
