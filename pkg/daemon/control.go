package daemon

import (
	"github.com/aluad/aluad/pkg/api"
)

// PathIOs reports the I/O counters of every (nexus, LUN).
func (d *Daemon) PathIOs() []api.PathIO {
	var out []api.PathIO
	for _, s := range d.SCSI.IOStats() {
		e := d.ctl.Event("", s.Nexus)
		out = append(out, api.PathIO{Initiator: e.Initiator, ISID: e.ISID, Host: e.Host, TargetPort: e.TargetPort,
			Node: e.Node, LUN: s.LUN, Reads: s.Reads, Writes: s.Writes, Other: s.Other, Media: s.Media,
			LastMedia: s.LastMedia, NonOptimized: s.NonOptimized, Gone: s.Gone})
	}
	return out
}

// LUNInfos reports every LUN.
func (d *Daemon) LUNInfos() []api.LUNInfo {
	var out []api.LUNInfo
	for _, l := range d.Array.LUNs {
		li := api.LUNInfo{ID: l.ID, Owner: l.Owner().Name, Preferred: l.Preferred.Name, Media: l.Media, Group: l.Group,
			Moving: l.Moving(), Generation: l.Generation()}
		for _, g := range l.Groups("") {
			li.Groups = append(li.Groups, api.GroupInfo{Node: g.Node.Name, ID: g.ID, State: g.State.String(), Pref: g.Pref,
				Status: g.Status, Ports: g.Ports})
		}
		st := l.Stats()
		for _, n := range d.Array.Nodes {
			s := &st[n.Index]
			li.Nodes = append(li.Nodes, api.NodeIO{Node: n.Name, Commands: s.Commands.Load(), Bytes: s.Bytes.Load(),
				Forwarded: s.Forwarded.Load(), ForwardedBytes: s.ForwardedBytes.Load()})
		}
		out = append(out, li)
	}
	return out
}
