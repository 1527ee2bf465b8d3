package daemon

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/stretchr/testify/require"
)

// BenchmarkIOPath measures READ(16) and WRITE(16) of 4 KiB through the
// real target of the default configuration (ownership core, statistics,
// write-back cache mirrored to the partner node) on the owner's port, from
// a client that allocates nothing per command: its PDUs are built once and
// rewritten in place. So allocs/op is what the array allocates per command
// (and what its background loops allocate meanwhile), and ns/op a round
// trip at queue depth 1 on loopback.
//
//	go test -run '^$' -bench IOPath -benchmem ./pkg/daemon
func BenchmarkIOPath(b *testing.B) {
	cfg := testConfig(b.TempDir())
	d, err := Start(cfg, Options{Logger: quiet()})
	require.NoError(b, err)
	defer d.Stop(5 * time.Second)
	p := d.Portals()[0] // node a's first port: LUN 0's owner
	c, err := rawLogin(p.Addr, p.Target, "iqn.2026-11.org.example:iopath")
	require.NoError(b, err)
	defer c.nc.Close()
	for i := 0; i < 8; i++ { // the unit attentions of a new nexus
		if st, err := c.do(opTUR, 0, nil); err == nil && st == 0 {
			break
		}
	}
	blocks := uint64(cfg.LUNs[0].Size) / 4096
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i)
	}
	for _, bc := range []struct {
		name string
		op   byte
		data []byte
	}{{"read4k", 0x88, nil}, {"write4k", 0x8a, data}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(4096)
			lba := uint64(0)
			for i := 0; i < 64; i++ { // warm: pools, workers, the cache's pages
				if _, err := c.do(bc.op, lba, bc.data); err != nil {
					b.Fatal(err)
				}
				lba = (lba + 7919) % blocks * 8 % (blocks * 8)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				st, err := c.do(bc.op, lba, bc.data)
				if err != nil || st != 0 {
					b.Fatalf("%s at LBA %d: status %#x, %v", bc.name, lba, st, err)
				}
				lba = (lba + 7919*8) % (blocks * 8)
			}
		})
	}
}

const opTUR = 0x00

// rawClient is an iSCSI initiator reduced to one session and one command
// at a time, with its buffers allocated once.
type rawClient struct {
	nc     net.Conn
	cmdSN  uint32
	statSN uint32
	itt    uint32
	pdu    [iscsi.BHSLen + 4096]byte
	in     [iscsi.BHSLen]byte
	data   [64 << 10]byte
}

func rawLogin(addr, target, name string) (*rawClient, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &rawClient{nc: nc, cmdSN: 1, itt: 1}
	var h iscsi.BHS
	h.SetOpcode(iscsi.OpLoginReq)
	h[0] |= iscsi.FlagImmediate
	h.SetFlags(iscsi.FlagTransit | 1<<2 | 3) // operational -> full feature
	h.SetISID([6]byte{0x80, 0, 0, 0, 0, 9})
	h.SetCmdSN(c.cmdSN)
	kvs := []iscsi.KV{{Key: "InitiatorName", Value: name}, {Key: "TargetName", Value: target},
		{Key: "SessionType", Value: "Normal"}, {Key: "HeaderDigest", Value: "None"}, {Key: "DataDigest", Value: "None"},
		{Key: "ImmediateData", Value: "Yes"}, {Key: "InitialR2T", Value: "No"},
		{Key: "MaxRecvDataSegmentLength", Value: "65536"}, {Key: "FirstBurstLength", Value: "65536"},
		{Key: "MaxBurstLength", Value: "262144"}, {Key: "ErrorRecoveryLevel", Value: "0"}}
	for step := 0; step < 4; step++ {
		p := &iscsi.PDU{BHS: h, Data: iscsi.AppendText(nil, kvs)}
		if _, err := nc.Write(iscsi.AppendPDU(nil, p, iscsi.Digests{})); err != nil {
			nc.Close()
			return nil, err
		}
		r, err := iscsi.ReadPDU(nc, iscsi.Digests{}, 1<<20, nil)
		if err != nil {
			nc.Close()
			return nil, err
		}
		if r.BHS[36] != 0 {
			nc.Close()
			return nil, fmt.Errorf("login refused: status %#x/%#x", r.BHS[36], r.BHS[37])
		}
		c.statSN = r.BHS.StatSN() + 1
		if r.BHS.Transit() && r.BHS.NSG() == 3 {
			h.SetTSIH(r.BHS.TSIH())
			return c, nil
		}
		kvs = nil
	}
	nc.Close()
	return nil, fmt.Errorf("login did not reach full feature phase")
}

// do runs one command (READ(16), WRITE(16) with data as immediate data,
// or TEST UNIT READY) on LUN 0 and returns its status.
func (c *rawClient) do(op byte, lba uint64, data []byte) (byte, error) {
	h := (*iscsi.BHS)(c.pdu[:iscsi.BHSLen])
	*h = iscsi.BHS{}
	h.SetOpcode(iscsi.OpSCSICmd)
	flags := byte(iscsi.FlagFinal | 1) // simple task attribute
	edtl := uint32(0)
	switch op {
	case 0x88:
		flags |= iscsi.FlagRead
		edtl = 4096
	case 0x8a:
		flags |= iscsi.FlagWrite
		edtl = uint32(len(data))
	}
	h.SetFlags(flags)
	h.SetITT(c.itt)
	c.itt++
	h.SetExpectedDataLen(edtl)
	h.SetCmdSN(c.cmdSN)
	c.cmdSN++
	h.SetExpStatSN(c.statSN)
	cdb := h.CDB()
	cdb[0] = op
	if op != opTUR {
		binary.BigEndian.PutUint64(cdb[2:], lba)
		binary.BigEndian.PutUint32(cdb[10:], 8) // 8 blocks of 512
	}
	h.SetDataLen(len(data))
	n := iscsi.BHSLen + copy(c.pdu[iscsi.BHSLen:], data)
	if _, err := c.nc.Write(c.pdu[:n]); err != nil {
		return 0, err
	}
	for {
		if _, err := io.ReadFull(c.nc, c.in[:]); err != nil {
			return 0, err
		}
		r := (*iscsi.BHS)(c.in[:])
		if dl := iscsi.Pad4(r.DataLen()); dl > 0 {
			if dl > len(c.data) {
				return 0, fmt.Errorf("data segment of %d bytes", dl)
			}
			if _, err := io.ReadFull(c.nc, c.data[:dl]); err != nil {
				return 0, err
			}
		}
		switch r.Opcode() {
		case iscsi.OpSCSIResp:
			c.statSN = r.StatSN() + 1
			return r[3], nil
		case iscsi.OpDataIn:
			if r.Flags()&iscsi.FlagStatus != 0 {
				c.statSN = r.StatSN() + 1
				return r[3], nil
			}
		case iscsi.OpNOPIn, iscsi.OpAsync:
		default:
			return 0, fmt.Errorf("unexpected %v", r.Opcode())
		}
	}
}
