package control

// Faults: the fault API, with the wire behaviour of the real event (a
// front end's port mode), since a host's recovery time depends on how it
// learns of the fault. The array, the front end and the core each hear
// of it in the order the real event would tell them.

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
)

// FrontEnd is what faults drive of the front end.
type FrontEnd interface {
	// Supports says whether SetPortMode can put a port in m (asked
	// before a node fails, not after).
	Supports(m fabric.PortMode) error
	SetPortMode(port uint16, m fabric.PortMode) error
	SetPathUp(initiator string, port uint16, up bool) error
	SetPathDelay(initiator string, port uint16, d time.Duration) error
	// ClearPathFaults restores cut paths and removes delays.
	ClearPathFaults()
}

// nodeFaultMode is the wire mode of a failed node's ports, by fault kind.
var nodeFaultMode = map[string]fabric.PortMode{
	api.FaultPowerLoss: fabric.PortSilent, api.FaultPanic: fabric.PortReset, api.FaultCrash: fabric.PortDown,
}

// ErrNoFabric: fabric faults need a running front end.
var ErrNoFabric = errors.New("no iSCSI fabric is running")

func (p *Path) portOf(s string) (*array.Port, error) {
	if s == "" {
		return nil, errors.New("fault needs a port (name or relative id)")
	}
	for _, pt := range p.arr.Ports {
		if pt.Name == s {
			return pt, nil
		}
	}
	if id, err := strconv.ParseUint(s, 10, 16); err == nil {
		if pt := p.arr.Port(uint16(id)); pt != nil {
			return pt, nil
		}
	}
	return nil, fmt.Errorf("no port %q", s)
}

// Inject applies a fault to the running array and fabric and tells the
// ownership core, which reacts as it would to the real thing (a crash is
// failed over at once; a repair fails back after the stability window).
func (p *Path) Inject(f api.Fault, fe FrontEnd) (api.FaultResult, error) {
	res := api.FaultResult{Fault: f}
	// One fault at a time (a panic racing a cable-plug of its port must
	// not leave the port serving), and no batch of the core starts while
	// a node fails: a failover decided from the node's loss must find it
	// failed in the array, not flush its cache as a planned move would.
	p.faultMu.Lock()
	defer p.faultMu.Unlock()
	post := p.Post
	switch f.Kind {
	case api.FaultPowerLoss, api.FaultPanic, api.FaultCrash, api.FaultRestart:
		n := p.arr.Node(f.Node)
		if n == nil {
			return res, fmt.Errorf("no node %q", f.Node)
		}
		if mode, fails := nodeFaultMode[f.Kind]; fails {
			if fe != nil {
				// Refused before the node fails: a front end that cannot
				// (LIO) would leave a failed node's ports serving.
				if err := fe.Supports(mode); err != nil {
					return res, err
				}
			}
			if n.Up() {
				// The core hears of the node first: the sessions its
				// ports drop are its loss, not a path fault of each host.
				post(ownership.NodeState{Node: n.Name, Up: false})
				// The wire goes as the power does, before the array
				// notices: no answer to a command in flight (it would be
				// 04/0C from the failed cache) leaves a silent port.
				if err := p.setPorts(fe, n, mode); err != nil {
					return res, err
				}
			}
			c, err := p.arr.CrashNode(n.Name)
			if err != nil {
				return res, err
			}
			res.Change = api.NewChangeInfo(c)
		} else {
			if n.Up() {
				return res, fmt.Errorf("node %s is not down", n.Name)
			}
			if err := p.arr.RestartNode(n.Name); err != nil {
				return res, err
			}
			// The node is up whatever its ports do: the core hears it
			// even if a port cannot listen again (port-up retries it).
			post(ownership.NodeState{Node: n.Name, Up: true})
			if err := p.setPorts(fe, n, fabric.PortUp); err != nil {
				return res, fmt.Errorf("node %s restarted, but a port did not come back: %w", n.Name, err)
			}
			// Every port serves again (a port disabled or a cable pulled
			// before the failure included): the core hears each.
			for _, pt := range n.Ports {
				post(ownership.PortState{Node: n.Name, Port: pt.RelativeID, Up: true})
			}
		}
	case api.FaultPortDown, api.FaultPortUp, api.FaultCablePull, api.FaultCablePlug, api.FaultPathDown, api.FaultPathUp, api.FaultDelay:
		if fe == nil {
			return res, ErrNoFabric
		}
		pt, err := p.portOf(f.Port)
		if err != nil {
			return res, err
		}
		switch f.Kind {
		case api.FaultPortDown, api.FaultPortUp, api.FaultCablePull, api.FaultCablePlug:
			mode := map[string]fabric.PortMode{api.FaultPortDown: fabric.PortDown, api.FaultCablePull: fabric.PortSilent}[f.Kind]
			if !pt.Node.Up() {
				return res, fmt.Errorf("node %s is down: its ports follow it (restart it first)", pt.Node.Name)
			}
			if err := fe.SetPortMode(pt.RelativeID, mode); err != nil {
				return res, err
			}
			// The controller sees its own port's link go: the core hears
			// of it as a port state.
			post(ownership.PortState{Node: pt.Node.Name, Port: pt.RelativeID, Up: mode == fabric.PortUp})
		case api.FaultPathDown, api.FaultPathUp:
			if f.Initiator == "" {
				return res, errors.New("a path fault needs an initiator")
			}
			if err := fe.SetPathUp(f.Initiator, pt.RelativeID, f.Kind == api.FaultPathUp); err != nil {
				return res, err
			}
		case api.FaultDelay:
			if f.Delay < 0 || f.Delay > time.Minute {
				return res, errors.New("delay must be from 0 (remove) to 1m")
			}
			if err := fe.SetPathDelay(f.Initiator, pt.RelativeID, f.Delay); err != nil {
				return res, err
			}
		}
	case api.FaultClear:
		if fe == nil {
			return res, ErrNoFabric
		}
		fe.ClearPathFaults()
		// Every port of a node that is up serves again; a failed node's
		// ports stay as its failure left them.
		for _, pt := range p.arr.Ports {
			if !pt.Node.Up() {
				continue
			}
			if err := fe.SetPortMode(pt.RelativeID, fabric.PortUp); err != nil {
				return res, err
			}
			post(ownership.PortState{Node: pt.Node.Name, Port: pt.RelativeID, Up: true})
		}
	default:
		return res, fmt.Errorf("unknown fault %q (%s)", f.Kind, strings.Join(api.FaultKinds, ", "))
	}
	p.publish(api.Event{Kind: api.EventFault, Fault: &f, Node: f.Node, Initiator: f.Initiator})
	p.o.Log.Info("fault injected", "kind", f.Kind, "node", f.Node, "port", f.Port, "initiator", f.Initiator, "delay", f.Delay)
	return res, nil
}

// setPorts puts a node's ports in a wire mode (a failed node's ports
// are as its failure left them).
func (p *Path) setPorts(fe FrontEnd, n *array.Node, mode fabric.PortMode) error {
	if fe == nil {
		return nil
	}
	var first error
	for _, pt := range n.Ports {
		if err := fe.SetPortMode(pt.RelativeID, mode); err != nil && first == nil {
			first = err
		}
	}
	return first
}
