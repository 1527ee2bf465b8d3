package daemon

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/fabric"
	tcmu "github.com/aluad/aluad/tcmu-handler"
)

// nodeFaultMode is the wire mode of a failed node's ports, by fault kind.
var nodeFaultMode = map[string]fabric.PortMode{
	api.FaultPowerLoss: fabric.PortSilent, api.FaultPanic: fabric.PortReset, api.FaultCrash: fabric.PortDown,
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
func (d *Daemon) Inject(f api.Fault) (api.FaultResult, error) {
	res := api.FaultResult{Fault: f}
	// One fault at a time (a panic racing a cable-plug of its port must
	// not leave the port serving), and no batch of the core starts while
	// a node fails: a failover decided from the node's loss must find it
	// failed in the array, not flush its cache as a planned move would.
	d.faultMu.Lock()
	defer d.faultMu.Unlock()
	post := func(e ownership.Event) { d.ctl.Post(e) }
	switch f.Kind {
	case api.FaultPowerLoss, api.FaultPanic, api.FaultCrash, api.FaultRestart:
		n := d.Array.Node(f.Node)
		if n == nil {
			return res, fmt.Errorf("no node %q", f.Node)
		}
		if mode, fails := nodeFaultMode[f.Kind]; fails {
			if d.TCMU != nil && mode != fabric.PortDown {
				// Refused before the node fails: LIO would leave a
				// failed node's ports serving.
				return res, tcmu.ErrNoWireModes
			}
			if n.Up() {
				// The core hears of the node first: the sessions its
				// ports drop are its loss, not a path fault of each host.
				post(ownership.NodeState{Node: n.Name, Up: false})
				// The wire goes as the power does, before the array
				// notices: no answer to a command in flight (it would be
				// 04/0C from the failed cache) leaves a silent port.
				if err := d.setPorts(n, mode); err != nil {
					return res, err
				}
			}
			c, err := d.Array.CrashNode(n.Name)
			if err != nil {
				return res, err
			}
			res.Change = api.NewChangeInfo(c)
		} else {
			if n.Up() {
				return res, fmt.Errorf("node %s is not down", n.Name)
			}
			if err := d.Array.RestartNode(n.Name); err != nil {
				return res, err
			}
			// The node is up whatever its ports do: the core hears it
			// even if a port cannot listen again (port-up retries it).
			post(ownership.NodeState{Node: n.Name, Up: true})
			if err := d.setPorts(n, fabric.PortUp); err != nil {
				return res, fmt.Errorf("node %s restarted, but a port did not come back: %w", n.Name, err)
			}
			// Every port serves again (a port disabled or a cable pulled
			// before the failure included): the core hears each.
			for _, p := range n.Ports {
				post(ownership.PortState{Node: n.Name, Port: p.RelativeID, Up: true})
			}
		}
	case api.FaultPortDown, api.FaultPortUp, api.FaultCablePull, api.FaultCablePlug, api.FaultPathDown, api.FaultPathUp, api.FaultDelay:
		if d.fabric == nil {
			return res, ErrNoFabric
		}
		p, err := d.portOf(f.Port)
		if err != nil {
			return res, err
		}
		switch f.Kind {
		case api.FaultPortDown, api.FaultPortUp, api.FaultCablePull, api.FaultCablePlug:
			mode := map[string]fabric.PortMode{api.FaultPortDown: fabric.PortDown, api.FaultCablePull: fabric.PortSilent}[f.Kind]
			if !p.Node.Up() {
				return res, fmt.Errorf("node %s is down: its ports follow it (restart it first)", p.Node.Name)
			}
			if err := d.fabric.SetPortMode(p.RelativeID, mode); err != nil {
				return res, err
			}
			// The controller sees its own port's link go: the core hears
			// of it as a port state.
			post(ownership.PortState{Node: p.Node.Name, Port: p.RelativeID, Up: mode == fabric.PortUp})
		case api.FaultPathDown, api.FaultPathUp:
			if f.Initiator == "" {
				return res, errors.New("a path fault needs an initiator")
			}
			if err := d.fabric.SetPathUp(f.Initiator, p.RelativeID, f.Kind == api.FaultPathUp); err != nil {
				return res, err
			}
		case api.FaultDelay:
			if f.Delay < 0 || f.Delay > time.Minute {
				return res, errors.New("delay must be from 0 (remove) to 1m")
			}
			if err := d.fabric.SetPathDelay(f.Initiator, p.RelativeID, f.Delay); err != nil {
				return res, err
			}
		}
	case api.FaultClear:
		if d.fabric == nil {
			return res, ErrNoFabric
		}
		d.fabric.ClearPathFaults()
		// Every port of a node that is up serves again; a failed node's
		// ports stay as its failure left them.
		for _, p := range d.Array.Ports {
			if !p.Node.Up() {
				continue
			}
			if err := d.fabric.SetPortMode(p.RelativeID, fabric.PortUp); err != nil {
				return res, err
			}
			post(ownership.PortState{Node: p.Node.Name, Port: p.RelativeID, Up: true})
		}
	default:
		return res, fmt.Errorf("unknown fault %q (%s)", f.Kind, strings.Join(api.FaultKinds, ", "))
	}
	d.Events.Add(api.Event{Kind: api.EventFault, Fault: &f, Node: f.Node, Initiator: f.Initiator})
	d.log.Info("fault injected", "kind", f.Kind, "node", f.Node, "port", f.Port, "initiator", f.Initiator, "delay", f.Delay)
	return res, nil
}

// setPorts puts a node's ports in a wire mode (a failed node's ports
// are as its failure left them).
func (d *Daemon) setPorts(n *array.Node, mode fabric.PortMode) error {
	if d.fabric == nil {
		return nil
	}
	var first error
	for _, p := range n.Ports {
		if err := d.fabric.SetPortMode(p.RelativeID, mode); err != nil && first == nil {
			first = err
		}
	}
	return first
}
