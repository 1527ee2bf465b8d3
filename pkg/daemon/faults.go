package daemon

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/array"
)

// Fault kinds that Inject understands.
const (
	FaultCrash    = "crash"     // a node loses power: its cache, sessions and ports
	FaultRestart  = "restart"   // a crashed node comes back (empty cache)
	FaultPortDown = "port-down" // a target port goes down
	FaultPortUp   = "port-up"
	FaultPathDown = "path-down" // one initiator's path to a port is cut
	FaultPathUp   = "path-up"
	FaultDelay    = "delay" // latency added on a port (or one initiator's path to it)
	FaultClear    = "clear" // every port, path and delay restored (nodes stay as they are)
)

// Fault is one fault to inject on the running daemon.
type Fault struct {
	Kind string `json:"kind"`
	Node string `json:"node,omitempty"`
	// Port is a port name (a0) or relative target port id (1).
	Port      string        `json:"port,omitempty"`
	Initiator string        `json:"initiator,omitempty"`
	Delay     time.Duration `json:"delay_ns,omitempty"`
}

// FaultResult is what an injected fault did.
type FaultResult struct {
	Fault  Fault       `json:"fault"`
	Change *ChangeInfo `json:"change,omitempty"`
}

// ErrNoFabric: fabric faults need a started daemon.
var ErrNoFabric = errors.New("no iSCSI fabric is running")

func (d *Daemon) portOf(s string) (*array.Port, error) {
	if s == "" {
		return nil, errors.New("fault needs a port (name or relative id)")
	}
	for _, p := range d.Array.Ports {
		if p.Name == s {
			return p, nil
		}
	}
	if id, err := strconv.ParseUint(s, 10, 16); err == nil {
		if p := d.Array.Port(uint16(id)); p != nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no port %q", s)
}

// Inject applies a fault to the running array and fabric and tells the
// ownership core, which reacts as it would to the real thing (a crash is
// failed over at once; a repair fails back after the stability window).
func (d *Daemon) Inject(f Fault) (FaultResult, error) {
	res := FaultResult{Fault: f}
	b := d.brain.Load()
	post := func(e ownership.Event) {
		if b != nil {
			b.post(e)
		}
	}
	switch f.Kind {
	case FaultCrash, FaultRestart:
		n := d.Array.Node(f.Node)
		if n == nil {
			return res, fmt.Errorf("no node %q", f.Node)
		}
		if f.Kind == FaultCrash {
			c, err := d.Array.CrashNode(n.Name)
			if err != nil {
				return res, err
			}
			res.Change = changeInfo(c)
			// The core hears of the node first: the sessions its ports
			// drop are its loss, not a path fault of each host.
			post(ownership.NodeState{Node: n.Name, Up: false})
			d.setPorts(n, false)
		} else {
			if n.Up() {
				return res, fmt.Errorf("node %s is not down", n.Name)
			}
			if err := d.Array.RestartNode(n.Name); err != nil {
				return res, err
			}
			d.setPorts(n, true)
			post(ownership.NodeState{Node: n.Name, Up: true})
		}
	case FaultPortDown, FaultPortUp, FaultPathDown, FaultPathUp, FaultDelay:
		if d.fabric == nil {
			return res, ErrNoFabric
		}
		p, err := d.portOf(f.Port)
		if err != nil {
			return res, err
		}
		switch f.Kind {
		case FaultPortDown, FaultPortUp:
			d.fabric.SetPortUp(p.RelativeID, f.Kind == FaultPortUp)
			post(ownership.PortState{Node: p.Node.Name, Port: p.RelativeID, Up: f.Kind == FaultPortUp})
		case FaultPathDown, FaultPathUp:
			if f.Initiator == "" {
				return res, errors.New("a path fault needs an initiator")
			}
			if err := d.fabric.SetPathUp(f.Initiator, p.RelativeID, f.Kind == FaultPathUp); err != nil {
				return res, err
			}
		case FaultDelay:
			if f.Delay < 0 || f.Delay > time.Minute {
				return res, errors.New("delay must be from 0 (remove) to 1m")
			}
			if err := d.fabric.SetPathDelay(f.Initiator, p.RelativeID, f.Delay); err != nil {
				return res, err
			}
		}
	case FaultClear:
		if d.fabric == nil {
			return res, ErrNoFabric
		}
		d.fabric.ClearFaults()
		for _, n := range d.Array.Nodes {
			if !n.Up() {
				d.setPorts(n, false) // a crashed node stays dark
			}
		}
		for _, p := range d.Array.Ports {
			if p.Node.Up() {
				post(ownership.PortState{Node: p.Node.Name, Port: p.RelativeID, Up: true})
			}
		}
	default:
		return res, fmt.Errorf("unknown fault %q (crash, restart, port-down, port-up, path-down, path-up, delay, clear)", f.Kind)
	}
	d.Events.Add(Event{Kind: EventFault, Fault: &f, Node: f.Node, Initiator: f.Initiator})
	d.log.Info("fault injected", "kind", f.Kind, "node", f.Node, "port", f.Port, "initiator", f.Initiator, "delay", f.Delay)
	return res, nil
}

// setPorts takes a node's ports down or up in the fabric (a crashed
// node answers nothing).
func (d *Daemon) setPorts(n *array.Node, up bool) {
	if d.fabric == nil {
		return
	}
	for _, p := range n.Ports {
		d.fabric.SetPortUp(p.RelativeID, up)
	}
}
