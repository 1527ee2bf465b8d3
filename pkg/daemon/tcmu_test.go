package daemon

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
	tcmu "github.com/aluad/aluad/tcmu-handler"
)

// tcmuLab is a daemon on the TCMU fabric over an in-memory configfs and
// fake mapped regions: the kernel's side played by the test.
type tcmuLab struct {
	d    *Daemon
	fs   *tcmu.MemFS
	root string
	mu   sync.Mutex
	devs map[string]*tcmu.FakeDevice
}

func startTCMU(t *testing.T) *tcmuLab {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.Fabric = fabric.Config{Kind: "tcmu", ConfigFS: "/cfg/target", HBA: 7}
	cfg.Ownership.Off = true // moves here are the test's
	l := &tcmuLab{fs: tcmu.NewMemFS(), root: "/cfg/target", devs: map[string]*tcmu.FakeDevice{}}
	l.fs.MkdirAll("/cfg/target/core")
	l.fs.MkdirAll("/cfg/target/iscsi")
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1, TCMUOptions: func(o *tcmu.Options) {
		o.FS = l.fs
		o.Netlink = false
		o.Poll = 10 * time.Millisecond
		o.OpenRegion = func(lun uint64, port uint16) (tcmu.Region, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			dev := tcmu.NewFakeDevice(tcmu.DeviceName(lun, port))
			l.devs[dev.Name] = dev
			return dev, nil
		}
	}})
	require.NoError(t, err)
	l.d = d
	t.Cleanup(func() { _ = d.Stop(5 * time.Second) })
	return l
}

// run queues one command on a device, signals it, and returns its answer.
func (l *tcmuLab) run(t *testing.T, lun uint64, port uint16, cdb, dataOut []byte, dataIn int) tcmu.Done {
	t.Helper()
	l.mu.Lock()
	dev := l.devs[tcmu.DeviceName(lun, port)]
	l.mu.Unlock()
	require.NotNil(t, dev)
	_, err := dev.Queue(cdb, dataOut, dataIn)
	require.NoError(t, err)
	dev.Signal()
	deadline := time.After(5 * time.Second)
	for {
		if done := dev.Reap(); len(done) > 0 {
			require.Len(t, done, 1)
			return done[0]
		}
		select {
		case <-dev.Kicked:
		case <-deadline:
			t.Fatalf("no answer on %s", dev.Name)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (l *tcmuLab) login(t *testing.T, port uint16, initiators ...string) {
	t.Helper()
	p := l.d.Array.Port(port)
	iqn := l.d.fabricCfg.NodeTarget(l.d.Array.Config().Target, p.Node.Name)
	l.fs.Set(filepath.Join(l.root, "iscsi", iqn, fmt.Sprintf("tpgt_%d", port), "dynamic_sessions"),
		strings.Join(initiators, "\n\x00")+"\n\x00")
}

func (l *tcmuLab) state(lun uint64, port uint16) string {
	return l.fs.Value(filepath.Join(l.root, "core", "user_7", tcmu.DeviceName(lun, port), "alua", "default_tg_pt_gp", "alua_access_state"))
}

// The TCMU front end builds LIO's side as documented (a target per node,
// a TPG per port, a device per (LUN, port) with kernel ALUA driven and no
// non-optimized delay), answers the ring through aluad's device server,
// learns logins from configfs, credits RTPGs, drives the kernel ALUA
// state on a move (new owner first), and takes it all down at stop.
func TestTCMUFrontEnd(t *testing.T) {
	l := startTCMU(t)
	d := l.d
	cfg := d.Array.Config()
	lun0 := d.Array.LUNs[0]
	owner := lun0.Owner()
	var ownerPort, otherPort uint16
	for _, p := range d.Array.Ports {
		if p.Node == owner && ownerPort == 0 {
			ownerPort = p.RelativeID
		}
		if p.Node != owner && otherPort == 0 {
			otherPort = p.RelativeID
		}
	}

	// LIO's side.
	for _, n := range d.Array.Nodes {
		iqn := d.fabricCfg.NodeTarget(cfg.Target, n.Name)
		require.Equal(t, cfg.Target+"."+n.Name, iqn)
		for _, p := range n.Ports {
			tpg := filepath.Join(l.root, "iscsi", iqn, fmt.Sprintf("tpgt_%d", p.RelativeID))
			require.True(t, l.fs.Exists(filepath.Join(tpg, "np", p.Addr)), "portal %s", p.Addr)
			require.Equal(t, "1", l.fs.Value(filepath.Join(tpg, "enable")))
			require.Equal(t, "1", l.fs.Value(filepath.Join(tpg, "attrib", "generate_node_acls")))
			for _, lun := range d.Array.LUNs {
				require.True(t, l.fs.Exists(filepath.Join(tpg, "lun", fmt.Sprintf("lun_%d", lun.ID), "aluad")))
				dev := filepath.Join(l.root, "core", "user_7", tcmu.DeviceName(lun.ID, p.RelativeID))
				require.Contains(t, l.fs.Value(filepath.Join(dev, "control")), "nl_reply_supported=-1")
				require.Contains(t, l.fs.Value(filepath.Join(dev, "control")), "dev_config=aluad/")
				require.Equal(t, "0", l.fs.Value(filepath.Join(dev, "alua", "default_tg_pt_gp", "nonop_delay_msecs")))
			}
		}
	}
	// The kernel states match the array's before any TPG was enabled.
	require.Equal(t, "0", l.state(lun0.ID, ownerPort), "AO on the owner")
	require.NotEqual(t, "0", l.state(lun0.ID, otherPort))
	writes := strings.Join(l.fs.Writes, "\n")
	require.Less(t, strings.Index(writes, "alua_access_state"), strings.Index(writes, "tpgt_1/enable=1"))

	// A host logs in on one port of each node: configfs says so.
	h1 := "iqn.2026-11.org.example:h1"
	l.login(t, ownerPort, h1)
	l.login(t, otherPort, h1)
	require.Eventually(t, func() bool { return len(d.fabric.PathStats()) == 2 }, 5*time.Second, 10*time.Millisecond)

	// INQUIRY VPD 0x83 through the ring names the LU and the port.
	inq := l.run(t, lun0.ID, otherPort, []byte{0x12, 1, 0x83, 0, 255, 0}, nil, 255)
	require.Zero(t, inq.Status)
	naa := d.Array.NAA(lun0)
	require.True(t, bytes.Contains(inq.Data, naa[:]), "VPD 0x83 carries the LU's NAA")
	rel := []byte{0, 0, byte(otherPort >> 8), byte(otherPort)}
	require.True(t, bytes.Contains(inq.Data, rel), "and the relative port %d", otherPort)

	// RTPG: both groups; credited to h1, the port's only session.
	rtpg := l.run(t, lun0.ID, otherPort, []byte{0xa3, 0x0a | 0x20, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0}, nil, 1024)
	require.Zero(t, rtpg.Status)
	groups, _, _, err := scsi.ParseRTPG(rtpg.Data[:rtpg.ReadLen])
	require.NoError(t, err)
	require.Len(t, groups, len(d.Array.Nodes))
	require.Eventually(t, func() bool {
		evs, _ := d.Events.Since(0)
		for _, e := range evs {
			if e.Kind == api.EventRTPG && e.Initiator == h1 && e.TargetPort == otherPort {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)

	// Data written through one device reads back through it.
	bs := lun0.BlockSize
	block := bytes.Repeat([]byte("tcmu"), bs/4)
	w := l.run(t, lun0.ID, ownerPort, []byte{0x2a, 0, 0, 0, 0, 9, 0, 0, 1, 0}, block, 0)
	require.Zero(t, w.Status)
	r := l.run(t, lun0.ID, ownerPort, []byte{0x28, 0, 0, 0, 0, 9, 0, 0, 1, 0}, nil, bs)
	require.Zero(t, r.Status)
	require.Equal(t, block, r.Data)
	// An out-of-range read is a CHECK CONDITION with ILLEGAL REQUEST.
	cap := d.Array.LUNs[0].Size / int64(bs)
	bad := make([]byte, 16)
	bad[0] = 0x88
	binary.BigEndian.PutUint64(bad[2:], uint64(cap))
	binary.BigEndian.PutUint32(bad[10:], 1)
	oob := l.run(t, lun0.ID, ownerPort, bad, nil, bs)
	require.Equal(t, byte(0x02), oob.Status)
	require.Equal(t, byte(0x05), oob.Sense[2]&0x0f)

	// A move: the kernel states follow, the new owner's devices first.
	other := d.Array.Port(otherPort).Node
	before := len(l.fs.Writes)
	_, err = d.Array.Move([]uint64{lun0.ID}, other.Name, alua.CauseManual)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l.state(lun0.ID, otherPort) == "0" && l.state(lun0.ID, ownerPort) != "0" },
		5*time.Second, 10*time.Millisecond)
	moved := l.fs.Writes[before:]
	var order []string
	for _, wr := range moved {
		if strings.Contains(wr, "alua_access_state") {
			order = append(order, wr[strings.LastIndex(wr, "=")+1:])
		}
	}
	require.NotEmpty(t, order)
	require.Equal(t, "0", order[0], "the new owner becomes active first: %v", order)

	// Faults: a port down disables its TPG and ends its sessions; a path
	// fault is refused with the reason.
	_, err = d.Inject(api.Fault{Kind: api.FaultPathDown, Port: d.Array.Port(ownerPort).Name, Initiator: h1})
	require.ErrorIs(t, err, tcmu.ErrNoPathFaults)
	_, err = d.Inject(api.Fault{Kind: api.FaultPortDown, Port: d.Array.Port(ownerPort).Name})
	require.NoError(t, err)
	p := d.Array.Port(ownerPort)
	tpgEnable := filepath.Join(l.root, "iscsi", d.fabricCfg.NodeTarget(cfg.Target, p.Node.Name), fmt.Sprintf("tpgt_%d", ownerPort), "enable")
	require.Equal(t, "0", l.fs.Value(tpgEnable))
	require.False(t, d.fabric.PortUp(ownerPort))
	l.login(t, ownerPort) // LIO ended the session
	require.Eventually(t, func() bool {
		evs, _ := d.Events.Since(0)
		for _, e := range evs {
			if e.Kind == api.EventLogout && e.Initiator == h1 && e.TargetPort == ownerPort {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)
	_, err = d.Inject(api.Fault{Kind: api.FaultClear})
	require.NoError(t, err)
	require.Equal(t, "1", l.fs.Value(tpgEnable))

	// Stop: nothing of aluad's is left in configfs.
	require.NoError(t, d.Stop(5*time.Second))
	require.False(t, l.fs.Exists(filepath.Join(l.root, "core", "user_7")))
	for _, n := range d.Array.Nodes {
		require.False(t, l.fs.Exists(filepath.Join(l.root, "iscsi", d.fabricCfg.NodeTarget(cfg.Target, n.Name))))
	}
}
