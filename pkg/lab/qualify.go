package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
)

// QualifyStacks are the emulated hosts aluad qualify --lab qualifies: one
// of each stack pkg/hosts models, declared with its own host type, and
// the dm-multipath personality with failback followover declared linux
// (a configuration that never follows a planned move).
func QualifyStacks() []HostSpec {
	return []HostSpec{
		{Name: "dmmp", Stack: alua.HostLinuxDMMP, Type: alua.HostLinuxDMMP},
		{Name: "followover", Stack: alua.HostLinuxDMMP, Type: alua.HostLinux, Opts: map[string]string{"failback": "followover"}},
		{Name: "windows", Stack: alua.HostWindows, Type: alua.HostWindows},
		{Name: "vmware", Stack: alua.HostVMware, Type: alua.HostVMware},
		{Name: "explicit", Stack: "explicit-alua", Type: alua.HostDefault},
		{Name: "naive", Stack: "naive", Type: alua.HostDefault},
	}
}

// QualifyLab is an array on loopback with emulated hosts under a steady,
// rate-limited load on every LUN, and a client of its control API: what
// aluad qualify --lab runs against.
type QualifyLab struct {
	Env    *Env
	Load   *Workload
	Client *api.Client
}

// StartQualifyLab starts the array (luns LUNs, mirroring on, the lab's
// ownership timings), the hosts, and per host and LUN a stream of 4 KiB
// random I/O (70% reads) at QD 2 and rate IOPS.
func StartQualifyLab(ctx context.Context, stacks []HostSpec, luns int, rate float64, dir string) (*QualifyLab, error) {
	const size = 64 << 20
	ec := EnvConfig{LUNs: luns, LUNSize: size, Stacks: stacks, Mirror: true,
		Tick: 100 * time.Millisecond, FailbackWindow: 2 * time.Second, Cooldown: 5 * time.Second,
		PlanInterval: time.Second, ShipWindow: 30 * time.Second, Penalty: 50 * time.Microsecond, NodeCapacity: 1e9,
		Dir: dir, Control: filepath.Join(dir, "aluad.sock")}
	env, err := Start(ctx, ec)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	var streams []Stream
	for hi := range env.Hosts {
		for _, l := range env.LUNs {
			streams = append(streams, Stream{Host: hi, LUN: l, BS: blk4k, ReadPct: 70, QD: 2, Rate: rate})
		}
	}
	return &QualifyLab{Env: env, Load: StartStreams(env, streams, size, 1), Client: api.NewClient(ec.Control)}, nil
}

// Close stops the load, the hosts and the array.
func (q *QualifyLab) Close() []Sample {
	s := q.Load.Stop()
	q.Env.Close()
	return s
}
