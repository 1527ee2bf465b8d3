package daemon

import (
	"errors"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/control"
)

// Inject applies a fault to the running array and its front end, and
// tells the ownership core (pkg/control).
func (d *Daemon) Inject(f api.Fault) (api.FaultResult, error) {
	switch {
	case d.faults != nil:
		if handled, err := d.faults(f); handled {
			if err == nil {
				d.Events.Add(api.Event{Kind: api.EventFault, Fault: &f, Node: f.Node})
				d.log.Info("fault injected", "kind", f.Kind, "node", f.Node, "delay", f.Delay)
			}
			return api.FaultResult{Fault: f}, err
		}
	case f.Kind == api.FaultInterlinkCut || f.Kind == api.FaultInterlinkRestore || f.Kind == api.FaultInterlinkDelay:
		return api.FaultResult{Fault: f}, errors.New("this array's nodes share one process: there is no interlink to cut " +
			"(run the controllers as processes: aluad controller)")
	case f.Kind == api.FaultMediaDelay:
		return api.FaultResult{Fault: f}, errors.New("media-delay slows one controller process's file system " +
			"(run the controllers as processes: aluad controller; here, the LUNs' media profiles set their latency)")
	}
	var fe control.FrontEnd
	if d.fabric != nil {
		fe = d.fabric
	}
	return d.ctl.Inject(f, fe)
}
