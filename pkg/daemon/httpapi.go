package daemon

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/mgmt"
)

// APIAddr is the bound address of the management API ("" when none).
func (d *Daemon) APIAddr() string {
	if d.api == nil {
		return ""
	}
	return d.api.Addr()
}

// The rest of mgmt.Array.

// Move is an operator's move of one LUN.
func (d *Daemon) Move(lun uint64, to string) (array.Change, error) {
	if d.Array.LUN(lun) == nil {
		return array.Change{}, mgmt.NotFound(fmt.Sprintf("no LUN %d", lun))
	}
	if d.Array.Node(to) == nil {
		return array.Change{}, mgmt.NotFound(fmt.Sprintf("no node %q", to))
	}
	if d.mover != nil {
		return d.mover([]uint64{lun}, to, alua.CauseManual)
	}
	return d.Array.Move([]uint64{lun}, to, alua.CauseManual)
}

// Ctl is the control path: a cluster's controller starts the ownership
// core on it while it leads, and feeds it every controller's
// observations.
func (d *Daemon) Ctl() *control.Path { return d.ctl }

// Mappings is the LUN map.
func (d *Daemon) Mappings() []array.MappingConfig { return d.Array.Mappings() }

// EventsSince is the feed after seq.
func (d *Daemon) EventsSince(seq uint64) ([]api.Event, uint64) { return d.Events.Since(seq) }

// Publish adds an event to the feed.
func (d *Daemon) Publish(e api.Event) { d.Events.Add(e) }

// Gatherer is the daemon's metrics registry.
func (d *Daemon) Gatherer() prometheus.Gatherer { return d.metrics.Gatherer() }

// Done is closed when the daemon stops.
func (d *Daemon) Done() <-chan struct{} { return d.done }
