package daemon

import (
	"errors"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/reports"
)

// Reports returns the conditions raised now, as an admin reads them: the
// catalog entry, the host, node, ports and LUNs concerned, the core's
// cause, and since when (from the event feed, while it still holds the
// raise).
func (d *Daemon) Reports() ([]reports.Report, error) {
	b := d.brain.Load()
	if b == nil {
		return nil, errors.New("the ownership core is not running (ownership.off): no reports are raised")
	}
	since := map[reportKey]time.Time{}
	evs, _ := d.Events.Since(0)
	for _, e := range evs {
		if e.Kind == EventReport && e.Report != nil {
			r := e.Report
			since[reportKey{ownership.Condition(r.Condition), r.Host, r.Node, r.LUN}] = e.Time
		}
	}
	var out []reports.Report
	for _, rc := range b.Reports() {
		entry, ok := reports.Lookup(rc.Condition)
		if !ok {
			entry = reports.Entry{Condition: rc.Condition, Code: "?", Title: string(rc.Condition), Severity: reports.Major}
		}
		r := reports.Report{Entry: entry, Host: rc.Host, Node: rc.Node, Cause: rc.Cause,
			Since: since[reportKey{rc.Condition, rc.Host, rc.Node, rc.LUN}]}
		if n := d.Array.Node(rc.Node); n != nil {
			for _, p := range n.Ports {
				r.Ports = append(r.Ports, p.Name)
			}
		}
		if rc.Host == "" {
			r.LUNs = []uint64{rc.LUN}
		} else if n := d.Array.Node(rc.Node); n != nil {
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
