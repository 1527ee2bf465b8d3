package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
)

// list is a flag given once per value.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// hostCmd is "aluad host": the declared hosts, changed on the running
// array (no restart, no session dropped).
func hostCmd(args []string) error {
	const use = "usage: aluad host list | types | add NAME --initiator IQN [--type T] [--group G] | set NAME [--type T] [--add-initiator IQN] [--remove-initiator IQN] [--group G|-] | remove NAME [--force]"
	verb := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	fs := newFlags("host " + verb)
	var inits, add, rm list
	typ := fs.String("type", "", "host type (aluad host types lists them; add: default)")
	group := fs.String("group", "", "host group (set: \"-\" takes the host out of its group)")
	switch verb {
	case "add":
		fs.Var(&inits, "initiator", "an initiator (IQN) of the host; repeat for each")
	case "set":
		fs.Var(&add, "add-initiator", "add an initiator (IQN); repeat for each")
		fs.Var(&rm, "remove-initiator", "remove an initiator (IQN); repeat for each")
	}
	force := false
	if verb == "remove" {
		fs.BoolVar(&force, "force", false, "remove it even with sessions logged in (they become an undeclared initiator's)")
	}
	output := outputFlag(fs)
	client := controlFlags(fs)
	if isHelp(args) {
		return flag.ErrHelp
	}
	name := ""
	switch verb {
	case "list", "types":
	case "add", "set", "remove":
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return fmt.Errorf("host %s needs the host's name\n%s", verb, use)
		}
		name, args = args[0], args[1:]
	default:
		return fmt.Errorf("unknown verb %q\n%s", verb, use)
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	js, err := output()
	if err != nil {
		return err
	}
	if verb == "types" {
		return printHostTypes(js)
	}
	cl, err := client()
	if err != nil {
		return err
	}
	var rep api.HostsReply
	switch verb {
	case "list":
		hs, err := cl.HostSpecs()
		if err != nil {
			return err
		}
		if js {
			return printJSON(hs)
		}
		return renderHostSpecs(hs)
	case "add":
		rep, err = cl.AddHost(api.HostSpec{Name: name, Type: *typ, Initiators: inits, Group: *group})
	case "set":
		rep, err = cl.ChangeHost(name, api.HostChange{Type: *typ, AddInitiators: add, RemoveInitiators: rm, Group: *group})
	case "remove":
		rep, err = cl.RemoveHost(name, force)
	}
	if err != nil {
		return err
	}
	if js {
		return printJSON(rep)
	}
	fmt.Printf("host %s: %s\n", verb, name)
	if len(rep.Retyped) > 0 {
		fmt.Printf("access states changed for %s: ASYMMETRIC ACCESS STATE CHANGED (2A/06) queued on its nexuses\n", strings.Join(rep.Retyped, ", "))
	}
	if len(rep.Views) > 0 {
		fmt.Printf("REPORTED LUNS DATA HAS CHANGED (3F/0E) queued on %d nexus(es) of %s\n", rep.Told, strings.Join(rep.Views, ", "))
	}
	fmt.Println("Saved in the state directory; 'aluad config dump' writes the running configuration.")
	return renderHostSpecs(rep.Hosts)
}

func renderHostSpecs(hs []api.HostSpec) error {
	if len(hs) == 0 {
		fmt.Println("No hosts are declared.")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tTYPE\tGROUP\tINITIATORS")
	for _, h := range hs {
		g := h.Group
		if g == "" {
			g = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.Name, h.Type, g, strings.Join(h.Initiators, " "))
	}
	return tw.Flush()
}

// configCmd is "aluad config dump": the running configuration as YAML
// that 'aluad serve --config' accepts.
func configCmd(args []string) error {
	if len(args) == 0 || args[0] != "dump" {
		if isHelp(args) {
			newFlags("config dump")
			return flag.ErrHelp
		}
		return fmt.Errorf("usage: aluad config dump [--out FILE]")
	}
	fs := newFlags("config dump")
	out := fs.String("out", "", "write to FILE (default: standard output)")
	client := controlFlags(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	cl, err := client()
	if err != nil {
		return err
	}
	b, err := cl.RunningConfig()
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(*out, b, 0o600)
}

// printHostTypes lists the host types and what each reports.
func printHostTypes(js bool) error {
	names := alua.HostTypeNames()
	if js {
		out := []map[string]any{}
		for _, n := range names {
			t := alua.HostTypes[n]
			out = append(out, map[string]any{"name": n, "non_owner": t.NonOwner.String(), "tpgs": t.TPGS, "doc": t.Doc})
		}
		return printJSON(out)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tNON-OWNER PATHS\tREADS RTPG\tFOR")
	for _, n := range names {
		t := alua.HostTypes[n]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, t.NonOwner, yesNo(t.TPGS), t.Doc)
	}
	return tw.Flush()
}
