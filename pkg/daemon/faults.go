package daemon

import (
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/control"
)

// Inject applies a fault to the running array and its front end, and
// tells the ownership core (pkg/control).
func (d *Daemon) Inject(f api.Fault) (api.FaultResult, error) {
	var fe control.FrontEnd
	if d.fabric != nil {
		fe = d.fabric
	}
	return d.ctl.Inject(f, fe)
}
