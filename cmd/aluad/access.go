package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/aluad/aluad/pkg/array"
)

// mapCmd lists, adds and removes LUN mappings on the running array.
func mapCmd(args []string) error {
	const use = "usage: aluad map [list] | aluad map add --lun N (--host H | --group G | --all) [--host-lun M] | aluad map rm --lun N (--host H | --group G | --all)"
	verb := "list"
	if len(args) > 0 && (args[0] == "list" || args[0] == "add" || args[0] == "rm") {
		verb, args = args[0], args[1:]
	}
	fs := newFlags("map " + verb)
	lun := fs.Int64("lun", -1, "the array's LUN (volume) id")
	host := fs.String("host", "", "map to this host")
	group := fs.String("group", "", "map to this host group")
	all := fs.Bool("all", false, "map to every host")
	hostLUN := fs.Int64("host-lun", -1, "the LUN number the host sees (default: the LUN id)")
	out := fs.String("o", "text", "output: text or json")
	client := controlFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), use)
	}
	cl, err := client()
	if err != nil {
		return err
	}
	if verb == "list" {
		ms, err := cl.Mappings()
		if err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(ms)
		}
		return renderMappings(ms)
	}
	n := 0
	for _, b := range []bool{*host != "", *group != "", *all} {
		if b {
			n++
		}
	}
	if *lun < 0 || n != 1 {
		return fmt.Errorf("%s", use)
	}
	m := array.MappingConfig{LUN: uint64(*lun), Host: *host, Group: *group}
	if *hostLUN >= 0 {
		v := uint64(*hostLUN)
		m.HostLUN = &v
	}
	var res any
	if verb == "add" {
		r, err := cl.Map(m)
		if err != nil {
			return err
		}
		fmt.Printf("mapped %v; REPORTED LUNS DATA HAS CHANGED (3F/0E) queued on %d nexus(es) of %d initiator(s)\n", m, r.Told, len(r.Changed))
		res = r
	} else {
		r, err := cl.Unmap(m.LUN, m.Host, m.Group)
		if err != nil {
			return err
		}
		fmt.Printf("unmapped LUN %d from %s; 3F/0E queued on %d nexus(es) of %d initiator(s)\n", m.LUN, m.Target(), r.Told, len(r.Changed))
		res = r
	}
	if *out == "json" {
		return printJSON(res)
	}
	return nil
}

func renderMappings(ms []array.MappingConfig) error {
	if len(ms) == 0 {
		fmt.Println("No mappings: every admitted initiator sees every LUN at its own id.")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LUN\tTO\tHOST LUN")
	for _, m := range ms {
		fmt.Fprintf(tw, "%d\t%s\t%d\n", m.LUN, m.Target(), m.At())
	}
	return tw.Flush()
}
