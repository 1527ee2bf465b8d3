package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// viewCmd parses a read-only view command's flags (-o, and the daemon's
// address) and returns its client and whether JSON was asked for.
func viewCmd(name string, args []string) (*api.Client, bool, error) {
	fs := newFlags(name)
	output := outputFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON (same as -o json)")
	client := controlFlags(fs)
	if err := parse(fs, args); err != nil {
		return nil, false, err
	}
	js, err := output()
	if err != nil {
		return nil, false, err
	}
	c, err := client()
	return c, js || *asJSON, err
}

func status(args []string) error {
	c, js, err := viewCmd("status", args)
	if err != nil {
		return err
	}
	st, err := c.Status()
	if err != nil {
		return err
	}
	if js {
		return printJSON(st)
	}
	return renderStatus(os.Stdout, st)
}

func renderStatus(w io.Writer, st api.StatusInfo) error {
	core := "ownership core running"
	if !st.Ownership {
		core = "ownership core off: moves only by operator or STPG"
	}
	fmt.Fprintf(w, "Array %s (%s ALUA, %s)\n\n", st.Target, st.ALUA, core)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tGROUP\tOWNS\tPREFERRED_FOR\tLOAD\tEXPANSION\tPORTS")
	for _, n := range st.Nodes {
		state := "online"
		if !n.Up {
			state = "OFFLINE"
		}
		var ports []string
		for _, p := range n.Ports {
			ps := "up"
			if !p.Up {
				ps = "DOWN"
			}
			ports = append(ports, fmt.Sprintf("%s %s %s (%d sessions)", p.Name, p.Addr, ps, p.Sessions))
		}
		load := pct(n.Utilisation, st.Ownership)
		if st.Ownership && n.Capacity > 0 {
			load += fmt.Sprintf(" of %.0f", n.Capacity)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", n.Name, state, n.GroupID, n.Owned, n.Preferred,
			load, factor(n.Expansion), strings.Join(ports, "; "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "OWNS: LUNs it owns now; PREFERRED_FOR: LUNs whose preferred owner it is; LOAD: the work it served as owner "+
		"in the last tick, as a share of its capacity in work units per tick (ownership.node_capacity: a 4 KiB command is one unit, "+
		"each 64 KiB of data another; over 100% is more than the capacity the core plans with, not an overload of the emulator); "+
		"EXPANSION: its response time over the best seen")
	fmt.Fprintf(w, "\nLUNs %d (%d off their preferred owner); hosts %d declared, %d unknown initiators; sessions %d\n",
		st.LUNs, st.LUNsOffPreferred, st.Hosts, st.Unknown, st.Sessions)
	access := "open (nothing mapped: every admitted initiator sees every LUN)"
	if st.Access == "mapped" {
		access = fmt.Sprintf("mapped (%d mappings; aluad map lists them)", st.Mappings)
	}
	fmt.Fprintf(w, "Access: %s; unknown initiators: %s\n", access, st.UnknownInitiators)
	if s := st.State; s != nil {
		fmt.Fprintf(w, "State: %s (%d saves)\n", s.Dir, s.Saves)
		if s.LoadError != "" {
			fmt.Fprintf(w, "STATE FILE REJECTED AT START: %s\n", s.LoadError)
		}
		if s.SaveError != "" {
			fmt.Fprintf(w, "STATE NOT SAVED: %s\n", s.SaveError)
		}
	}
	if !st.Ownership {
		fmt.Fprintln(w, "Problems: not tracked (the ownership core is off)")
		return nil
	}
	_, err := fmt.Fprintf(w, "Problems: %d critical, %d major, %d minor (aluad report shows them)\n",
		st.Reports["critical"], st.Reports["major"], st.Reports["minor"])
	return err
}

func pct(v float64, known bool) string {
	if !known {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

func factor(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fx", v)
}

func hosts(args []string) error {
	c, js, err := viewCmd("hosts", args)
	if err != nil {
		return err
	}
	hs, err := c.Hosts()
	if err != nil {
		return err
	}
	if js {
		if hs == nil {
			hs = []api.HostInfo{}
		}
		return printJSON(hs)
	}
	return renderHosts(os.Stdout, hs)
}

func renderHosts(w io.Writer, hs []api.HostInfo) error {
	if len(hs) == 0 {
		_, err := fmt.Fprintln(w, "No hosts are declared and no initiator has logged in.")
		return err
	}
	var nodes []string
	for n := range hs[0].Nodes {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := []string{"HOST", "TYPE", "DECLARED", "NON-OWNER", "TYPE FOLLOWS", "OBSERVED", "SESSIONS"}
	for _, n := range nodes {
		head = append(head, "NODE "+strings.ToUpper(n))
	}
	head = append(head, "INITIATORS")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, h := range hs {
		decl := "yes"
		if !h.Declared {
			decl = "UNKNOWN INITIATOR"
		}
		row := []string{h.Name, h.Type, decl, h.NonOwner, yesNo(h.FollowsALUA), observed(h), fmt.Sprint(h.Sessions)}
		for _, n := range nodes {
			row = append(row, h.Nodes[n])
		}
		row = append(row, strings.Join(h.Initiators, ", "))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, h := range hs {
		if h.SuggestedType != "" {
			fmt.Fprintf(w, "%s: its behaviour fits host type %s: %s\n", h.Name, h.SuggestedType, h.SuggestWhy)
		}
	}
	return nil
}

// observed is what a host was seen to do after planned moves, with the
// last time it followed one.
func observed(h api.HostInfo) string {
	if h.LastFollow != nil && h.Observed == "follows" {
		return "follows (" + h.LastFollow.Local().Format("15:04:05") + ")"
	}
	if h.Observed == "" {
		return "unknown"
	}
	return h.Observed
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func paths(args []string) error {
	c, js, err := viewCmd("paths", args)
	if err != nil {
		return err
	}
	ps, err := c.Paths()
	if err != nil {
		return err
	}
	if js {
		return printJSON(ps)
	}
	return renderPaths(os.Stdout, ps, time.Now())
}

// renderPaths prints every host's paths side by side, one column per
// path, in the shape of reference 000's "ra mlm load show": identity,
// counters, service and latency times, then the load per path and per
// LUN with each LUN's state on that path (INU: carried the LUN's I/O in
// the last interval, RDY: ready; then the ALUA state).
func renderPaths(w io.Writer, ps []api.PathInfo, now time.Time) error {
	if len(ps) == 0 {
		_, err := fmt.Fprintln(w, "No sessions: no host is logged in.")
		return err
	}
	var order []string
	byHost := map[string][]api.PathInfo{}
	for _, p := range ps {
		if _, ok := byHost[p.Host]; !ok {
			order = append(order, p.Host)
		}
		byHost[p.Host] = append(byHost[p.Host], p)
	}
	for i, h := range order {
		if i > 0 {
			fmt.Fprintln(w)
		}
		hp := byHost[h]
		failed := 0
		for _, p := range hp {
			if p.State == "failed" {
				failed++
			}
		}
		if failed > 0 {
			fmt.Fprintf(w, "Host %s: %d paths, %d FAILED\n", h, len(hp), failed)
		} else {
			fmt.Fprintf(w, "Host %s: %d paths\n", h, len(hp))
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		row := func(name string, f func(p api.PathInfo) string) {
			cells := []string{"  " + name}
			for _, p := range hp {
				cells = append(cells, f(p))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		row("path", func(p api.PathInfo) string { return p.Node + "/" + p.Port })
		row("state", func(p api.PathInfo) string {
			if p.State == "failed" {
				return "FAILED (" + p.Reason + ")"
			}
			return p.State
		})
		row("initiator", func(p api.PathInfo) string { return p.Initiator })
		row("isid", func(p api.PathInfo) string { return p.ISID })
		row("target port group", func(p api.PathInfo) string { return fmt.Sprint(p.GroupID) })
		row("relative port id", func(p api.PathInfo) string { return fmt.Sprint(p.RelativeID) })
		row("logged in / failed for", func(p api.PathInfo) string { return now.Sub(p.Since).Round(time.Second).String() })
		row("discovered (RTPG/I/O)", func(p api.PathInfo) string { return yesNo(p.Discovered) })
		row("commands", func(p api.PathInfo) string { return fmt.Sprint(p.Commands) })
		row("total bytes", func(p api.PathInfo) string { return fmt.Sprint(p.BytesRead + p.BytesWritten) })
		row("forwarded (ANO) cmds", func(p api.PathInfo) string { return fmt.Sprint(p.NonOptimized) })
		row("average service time us", func(p api.PathInfo) string { return fmt.Sprintf("%.0f", p.ServiceUs) })
		row("average latency time us", func(p api.PathInfo) string { return fmt.Sprintf("%.0f", p.LatencyUs) })
		row("latency expansion", func(p api.PathInfo) string {
			s := factor(p.Expansion)
			if p.Degraded {
				s += " DEGRADED"
			}
			return s
		})
		row("path load MB/s (now avg)", func(p api.PathInfo) string { return fmt.Sprintf("%.2f %.2f", p.MBps, p.AvgMBps) })
		if len(hp) > 0 {
			for li, l := range hp[0].LUNs {
				row(fmt.Sprintf("L%d", l.LUN), func(p api.PathInfo) string {
					if li >= len(p.LUNs) {
						return ""
					}
					pl := p.LUNs[li]
					use := "RDY"
					if pl.InUse {
						use = "INU"
					}
					return fmt.Sprintf("%s/%s %.2f %.2f", use, pl.State, pl.MBps, pl.AvgMBps)
				})
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func rebalance(args []string) error {
	c, js, err := viewCmd("rebalance", args)
	if err != nil {
		return err
	}
	r, err := c.Rebalance()
	if err != nil {
		return err
	}
	if js {
		return printJSON(r)
	}
	if r.Moves == 0 {
		fmt.Printf("nothing to move: %s\n", r.Reason)
		return nil
	}
	fmt.Printf("moving %d LUNs:\n", r.Moves)
	for _, b := range r.Batches {
		fmt.Printf("  LUNs %v -> node %s (%s)\n", b.LUNs, b.To, b.Cause)
	}
	fmt.Println("each batch flushes under I/O, holds briefly and is announced with UA 2A/06 (aluad events shows them)")
	return nil
}

// renderLUNs prints the LUN table: identity and geometry, then ownership
// and what each node's group reports (+PREF: the group carries the RTPG
// PREF bit, which marks the preferred owner's group).
func renderLUNs(w io.Writer, ls []api.LUNInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LUN\tSIZE\tBLOCK\tWWID\tOWNER\tPREFERRED\tGROUPS\tCOMMANDS\tFORWARDED")
	for _, l := range ls {
		var gs, cmds, fwd []string
		for _, g := range l.Groups {
			p := ""
			if g.Pref {
				p = "+PREF"
			}
			gs = append(gs, fmt.Sprintf("%s(%d)=%s%s", g.Node, g.ID, g.State, p))
		}
		for _, n := range l.Nodes {
			cmds = append(cmds, fmt.Sprintf("%s:%d", n.Node, n.Commands))
			fwd = append(fwd, fmt.Sprintf("%s:%d", n.Node, n.Forwarded))
		}
		block := fmt.Sprint(l.BlockSize)
		if l.PhysicalBlockSize != 0 && l.PhysicalBlockSize != l.BlockSize {
			block += fmt.Sprintf("/%d", l.PhysicalBlockSize)
		}
		owner := l.Owner
		if l.Moving {
			owner += " (moving)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.ID, humanSize(l.Size), block, l.WWID, owner, l.Preferred,
			strings.Join(gs, " "), strings.Join(cmds, " "), strings.Join(fwd, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "BLOCK: logical/physical bytes; +PREF: the group reports the PREF bit in RTPG (the preferred owner's); FORWARDED: commands that arrived at a non-owner node and went over the interlink")
	return err
}

// humanSize is a byte count in the largest binary unit that divides it.
func humanSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return fmt.Sprintf("%d%s", n/u.m, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}
