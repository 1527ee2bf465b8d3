// Package daemon wires one running aluad: the array (nodes, ports, LUNs),
// the SCSI device server over it, and the iSCSI fabric in front. It owns
// start-up order and graceful shutdown (in-flight commands finish, data is
// flushed). cmd/aluad and the integration tests use it; it holds no
// protocol logic of its own.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/scsi"
)

// Daemon is a running array with its fabric.
type Daemon struct {
	Array  *array.Array
	SCSI   *scsi.Server
	Target *iscsi.Target
	log    *slog.Logger
}

// PortalInfo describes one listening target port.
type PortalInfo struct {
	Node, Port, Addr, Target string
	RelativeID               uint16
}

// Options tune the daemon.
type Options struct {
	Logger *slog.Logger
	// NopInterval enables target NOP-In keepalives (0 disables).
	NopInterval time.Duration
}

// Start builds everything from cfg and starts listening.
func Start(cfg array.Config, opt Options) (*Daemon, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	arr, err := array.New(cfg, array.Options{})
	if err != nil {
		return nil, err
	}
	srv := scsi.NewServer()
	var portals []iscsi.Portal
	for _, p := range arr.Ports {
		name := iscsi.TargetPortName(cfg.Target, p.RelativeID)
		srv.AddTargetPort(scsi.TargetPortInfo{RelativeID: p.RelativeID, Name: name})
		portals = append(portals, iscsi.Portal{Addr: p.Addr, TPGT: p.RelativeID, RelativeID: p.RelativeID,
			Node: p.Node.Name, Name: p.Name})
	}
	for _, l := range arr.LUNs {
		_, err := srv.AddLU(scsi.LUConfig{LUN: l.ID, BlockSize: l.BlockSize, Blocks: uint64(l.Size / int64(l.BlockSize)),
			Backend: l, Rotational: l.Media == "hdd",
			Identity: scsi.Identity{Vendor: "ALUAD", Product: "aluad array", Revision: "0001",
				Serial: arr.Serial(l), NAA: arr.NAA(l)}})
		if err != nil {
			arr.Close()
			return nil, err
		}
	}
	tgt, err := iscsi.NewTarget(iscsi.Config{Name: cfg.Target, Alias: "aluad", Portals: portals,
		Logger: opt.Logger, NopInterval: opt.NopInterval, NopTimeout: 2 * opt.NopInterval}, srv)
	if err != nil {
		arr.Close()
		return nil, err
	}
	if err := tgt.Listen(); err != nil {
		arr.Close()
		return nil, err
	}
	return &Daemon{Array: arr, SCSI: srv, Target: tgt, log: opt.Logger}, nil
}

// Portals lists the bound portals in port order.
func (d *Daemon) Portals() []PortalInfo {
	addrs := d.Target.Addrs()
	out := make([]PortalInfo, 0, len(d.Array.Ports))
	for i, p := range d.Array.Ports {
		addr := p.Addr
		if i < len(addrs) {
			addr = addrs[i]
		}
		out = append(out, PortalInfo{Node: p.Node.Name, Port: p.Name, Addr: addr, Target: d.Array.Config().Target,
			RelativeID: p.RelativeID})
	}
	return out
}

// Stop lets in-flight commands finish (up to grace), closes every
// connection, and flushes and closes the media.
func (d *Daemon) Stop(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	terr := d.Target.Shutdown(ctx)
	if err := d.Array.Close(); err != nil {
		return fmt.Errorf("flushing media: %w", err)
	}
	if terr != nil {
		d.log.Warn("some commands were still running at shutdown", "err", terr)
	}
	return nil
}
