package daemon

import (
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/reports"
)

// Reports returns the conditions raised now, as an admin reads them: the
// catalog entry, the host, node, ports and LUNs concerned, the core's
// cause, and since when (from the event feed, while it still holds the
// raise).
func (d *Daemon) Reports() ([]reports.Report, error) {
	raised, err := d.ctl.Reports()
	if err != nil {
		return nil, err
	}
	type reportKey struct {
		cond       ownership.Condition
		host, node string
		lun        uint64
		port       uint16
	}
	since := map[reportKey]time.Time{}
	evs, _ := d.Events.Since(0)
	for _, e := range evs {
		if e.Kind == api.EventReport && e.Report != nil {
			r := e.Report
			since[reportKey{ownership.Condition(r.Condition), r.Host, r.Node, r.LUN, r.Port}] = e.Time
		}
	}
	var out []reports.Report
	for _, rc := range raised {
		entry, ok := reports.Lookup(rc.Condition)
		if !ok {
			entry = reports.Entry{Condition: rc.Condition, Code: "?", Title: string(rc.Condition), Severity: reports.Major}
		}
		r := reports.Report{Entry: entry, Host: rc.Host, Node: rc.Node, Cause: rc.Cause,
			Since: since[reportKey{rc.Condition, rc.Host, rc.Node, rc.LUN, rc.Port}]}
		if p := d.Array.Port(rc.Port); rc.Condition == ownership.PathDegraded && p != nil {
			r.Ports = []string{p.Name} // one path
		} else if n := d.Array.Node(rc.Node); n != nil {
			for _, p := range n.Ports {
				r.Ports = append(r.Ports, p.Name)
			}
		}
		switch {
		case rc.Host == "" && rc.Node == "":
			r.LUNs = []uint64{rc.LUN}
		case d.Array.Node(rc.Node) != nil:
			n := d.Array.Node(rc.Node)
			// A host condition about a node concerns the LUNs whose home
			// is that node: the ones it cannot be given back.
			for _, l := range d.Array.LUNs {
				if l.Preferred == n {
					r.LUNs = append(r.LUNs, l.ID)
				}
			}
		}
		out = append(out, r)
	}
	reports.Sort(out)
	return out, nil
}
