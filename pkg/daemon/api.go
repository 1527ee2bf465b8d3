package daemon

import (
	"errors"

	"github.com/aluad/aluad/ownership"
)

// SetNodeCapacity re-declares a node's capacity (work units per tick) to
// the running ownership core, e.g. after the lab has measured its load.
func (d *Daemon) SetNodeCapacity(node string, capacity float64) error {
	if !d.ctl.Running() {
		return errors.New("the ownership core is not running")
	}
	if d.Array.Node(node) == nil || capacity <= 0 {
		return errors.New("need a known node and a positive capacity")
	}
	d.ctl.Post(ownership.NodeDecl{Node: node, Capacity: capacity})
	if d.state != nil {
		d.state.SetCapacity(node, capacity)
	}
	return nil
}
