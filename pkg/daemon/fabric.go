package daemon

import (
	"context"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/arrayview"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/scsi"
	tcmu "github.com/aluad/aluad/tcmu-handler"
)

// Fabric is the front end hosts reach the nodes through: the embedded
// pure-Go iSCSI target, or LIO over TCMU. Faults, path counters and the
// port view go through it.
type Fabric interface {
	SetPortUp(port uint16, up bool)
	// SetPortMode puts a port in a wire mode (fabric.PortMode); a fabric
	// that cannot do a mode says so.
	SetPortMode(port uint16, m fabric.PortMode) error
	// Supports says whether SetPortMode can put a port in m.
	Supports(m fabric.PortMode) error
	SetPathUp(initiator string, port uint16, up bool) error
	SetPathDelay(initiator string, port uint16, d time.Duration) error
	// ClearPathFaults restores cut paths and removes delays.
	ClearPathFaults()
	PortUp(port uint16) bool
	PathStats() []fabric.PathStat
	Addrs() []string
	Shutdown(ctx context.Context) error
}

// fabricKind is one front end the daemon can start.
type fabricKind struct {
	start func(d *Daemon, cfg config.Config, opt Options) error
	// hostBlind: the front end cannot tell hosts apart when it reports
	// access states (LIO's kernel ALUA is per port, not per initiator),
	// so every host gets the same state.
	hostBlind bool
}

// fabrics are the front ends by the config's fabric kind.
var fabrics = map[string]fabricKind{
	"iscsi": {start: (*Daemon).startISCSI},
	"tcmu":  {start: (*Daemon).startTCMU, hostBlind: true},
}

// fabricOf is the front end cfg chooses (the validated config names one
// of fabrics; empty is the pure-Go iSCSI target).
func fabricOf(cfg config.Config) fabricKind {
	if f, ok := fabrics[cfg.Fabric.Kind]; ok {
		return f
	}
	return fabrics["iscsi"]
}

// iscsiFabric adapts the pure-Go target, whose path faults cannot fail.
type iscsiFabric struct{ *iscsi.Target }

// Supports: the pure-Go target has every wire mode.
func (iscsiFabric) Supports(fabric.PortMode) error { return nil }

func (f iscsiFabric) SetPathUp(initiator string, port uint16, up bool) error {
	f.Target.SetPathUp(initiator, port, up)
	return nil
}

func (f iscsiFabric) SetPathDelay(initiator string, port uint16, d time.Duration) error {
	f.Target.SetPathDelay(initiator, port, d)
	return nil
}

// tcmuLayout is what the TCMU front end builds in LIO for cfg: one
// target per node, one TPG per port (TPGT = relative port id), one
// device per (LUN, port), a node ACL per declared initiator.
func tcmuLayout(cfg config.Config, arr *array.Array) tcmu.Layout {
	l := tcmu.Layout{Root: cfg.Fabric.ConfigFS, HBA: cfg.Fabric.HBA, Subtype: "aluad"}
	for _, n := range arr.Nodes {
		t := tcmu.TargetSpec{Node: n.Name, IQN: cfg.NodeTarget(n.Name)}
		for _, p := range n.Ports {
			t.TPGs = append(t.TPGs, tcmu.TPGSpec{Port: p.Name, TPGT: p.RelativeID, Portal: p.Addr})
		}
		l.Targets = append(l.Targets, t)
	}
	for _, lun := range arr.LUNs {
		l.LUNs = append(l.LUNs, tcmu.LUNSpec{ID: lun.ID, Size: lun.Size, BlockSize: lun.BlockSize})
	}
	// Declared hosts get explicit ACLs: LIO counts their commands per
	// (LUN, port), which tells them apart on a shared port.
	for _, h := range cfg.Hosts {
		l.Initiators = append(l.Initiators, h.Initiators...)
	}
	return l
}

// startTCMU serves the array through LIO: kernel ALUA states follow the
// array's (for a host it cannot tell apart), logins come from configfs.
func (d *Daemon) startTCMU(cfg config.Config, opt Options) error {
	view := arrayview.View{Arr: d.Array, Srv: d.SCSI, HostBlind: true}
	to := tcmu.Options{
		Layout:  tcmuLayout(cfg, d.Array),
		Handler: d.SCSI,
		State: func(lun uint64, port uint16) alua.AccessState {
			return view.State(scsi.Nexus{TargetPort: port}, lun)
		},
		OnEvent: d.ctl.Fabric,
		OnRTPG:  d.ctl.RTPG,
		// Commands of a declared host LIO answered itself: the path's
		// traffic as the pure-Go fabric would count it.
		OnAnswered: d.SCSI.CountAnswered,
		Logger:     opt.Logger,
		Netlink:    true,
	}
	if opt.TCMUOptions != nil {
		opt.TCMUOptions(&to)
	}
	f, err := tcmu.New(to)
	if err != nil {
		return err
	}
	d.aluaHook.Store(&aluaHook{fn: f.ALUAChanged})
	if err := f.Start(); err != nil {
		d.aluaHook.Store(nil)
		return err
	}
	d.TCMU, d.fabric = f, f
	return nil
}

type aluaHook struct{ fn func([]uint64) }
