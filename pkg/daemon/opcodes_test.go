package daemon

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/scsi"
)

// listedCommand is one entry of REPORT SUPPORTED OPERATION CODES.
type listedCommand struct {
	op     byte
	sa     uint16
	hasSA  bool
	cdbLen int
}

func reportedCommands(t *testing.T, d *Daemon, n scsi.Nexus) []listedCommand {
	t.Helper()
	cdb := []byte{0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0}
	r := d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb})
	require.Equal(t, scsi.StatusGood, r.Status)
	b := r.Data[4 : 4+binary.BigEndian.Uint32(r.Data)]
	var out []listedCommand
	for ; len(b) >= 8; b = b[8:] {
		out = append(out, listedCommand{op: b[0], sa: binary.BigEndian.Uint16(b[2:]), hasSA: b[5]&0x01 != 0,
			cdbLen: int(binary.BigEndian.Uint16(b[6:]))})
	}
	return out
}

// servedCDB builds a well-formed command for a listed opcode and service
// action, with the data-out it needs: what a host would send.
func servedCDB(c listedCommand) (cdb, data []byte) {
	cdb = make([]byte, c.cdbLen)
	cdb[0] = c.op
	if c.hasSA {
		cdb[1] = byte(c.sa)
	}
	block := make([]byte, 512)
	switch c.cdbLen { // one block, or an allocation length of 255
	case 6:
		cdb[4] = 1
	case 10:
		cdb[8] = 1
	case 12:
		cdb[9] = 1
	case 16:
		cdb[13] = 1
	}
	switch c.op {
	case 0x00, 0x1e, 0x35, 0x91, 0x16, 0x17: // TUR, PREVENT ALLOW, SYNC CACHE, RESERVE/RELEASE(6): no length
		cdb = make([]byte, c.cdbLen)
		cdb[0] = c.op
	case 0x03, 0x12, 0x1a: // REQUEST SENSE, INQUIRY, MODE SENSE(6)
		cdb[4] = 255
		if c.op == 0x1a {
			cdb[2] = 0x3f
		}
	case 0x0a, 0x2a, 0xaa, 0x8a, 0x2e, 0xae, 0x8e, 0x41, 0x93, 0x8b: // writes of one block
		data = block
	case 0x2f, 0xaf, 0x8f: // VERIFY without BYTCHK: no data
	case 0x89: // COMPARE AND WRITE of one block: verify and write data
		data = make([]byte, 1024)
	case 0x15, 0x55, 0x42, 0x1d: // MODE SELECT, UNMAP, SEND DIAGNOSTIC with no parameter data
		cdb = make([]byte, c.cdbLen)
		cdb[0] = c.op
		if c.op == 0x15 || c.op == 0x55 {
			cdb[1] = 0x10 // PF
		}
		if c.op == 0x1d {
			cdb[1] = 0x04 // SELFTEST
		}
	case 0x1b: // START STOP UNIT: start
		cdb[4] = 1
	case 0x4d: // LOG SENSE: supported pages, cumulative
		cdb[2], cdb[8] = 0x40, 255
	case 0x5a: // MODE SENSE(10)
		cdb[2], cdb[8] = 0x3f, 255
	case 0x5e: // PERSISTENT RESERVE IN
		cdb[8] = 255
	case 0x5f: // PERSISTENT RESERVE OUT: a zero key's parameter list
		cdb[2], cdb[8] = 0x01, 24
		data = make([]byte, 24)
		if c.sa == 7 { // REGISTER AND MOVE: with a TransportID
			tid := append([]byte{0x05, 0, 0, 24}, []byte("iqn.2026-11.org.example:other,i,0x1\x00")...)
			for len(tid)%4 != 0 {
				tid = append(tid, 0)
			}
			binary.BigEndian.PutUint16(tid[2:], uint16(len(tid)-4))
			data = append(make([]byte, 24), tid...)
			binary.BigEndian.PutUint32(data[20:], uint32(len(tid)))
			cdb[8] = byte(len(data))
		}
	case 0x25: // READ CAPACITY(10)
		cdb = make([]byte, 10)
		cdb[0] = c.op
	case 0x37: // READ DEFECT DATA(10)
		cdb[8] = 255
	case 0xb7: // READ DEFECT DATA(12)
		cdb[9] = 255
	case 0x9e, 0xa0, 0xa3: // READ CAPACITY(16), GET LBA STATUS, REPORT LUNS, MAINTENANCE IN
		l := len(cdb)
		binary.BigEndian.PutUint32(cdb[l-6:], 255)
		if c.op != 0x9e {
			binary.BigEndian.PutUint32(cdb[6:], 255)
			cdb[10] = 0
		}
	case 0xa4: // SET TARGET PORT GROUPS with no descriptor
		binary.BigEndian.PutUint32(cdb[6:], 0)
	}
	return cdb, data
}

// Every command REPORT SUPPORTED OPERATION CODES lists is served: sent
// well-formed, none answers INVALID COMMAND OPERATION CODE or INVALID
// FIELD IN CDB (a listed command the device server does not carry out).
func TestEveryListedCommandIsServed(t *testing.T) {
	for _, mode := range []string{"implicit", "explicit"} {
		t.Run(mode, func(t *testing.T) {
			cfg := config.Loopback(t.TempDir(), 1<<20)
			cfg.ALUA = mode
			d, err := New(cfg, Options{Logger: quiet()})
			require.NoError(t, err)
			defer d.Array.Close()
			port := d.Array.LUN(0).Owner().Ports[0].RelativeID
			n := scsi.Nexus{InitiatorName: "iqn.2026-11.org.example:rsoc", InitiatorPort: "iqn.2026-11.org.example:rsoc,i,0x1",
				TargetPort: port}
			d.SCSI.NexusUp(n)
			d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: make([]byte, 6)}) // the power-on UA
			listed := reportedCommands(t, d, n)
			require.Greater(t, len(listed), 40)
			for _, c := range listed {
				cdb, data := servedCDB(c)
				r := d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb, Data: data})
				if r.Status != scsi.StatusCheckCondition {
					continue
				}
				ps, err := scsi.ParseSense(r.Sense)
				require.NoError(t, err)
				if ps.Key == scsi.KeyUnitAttention { // a UA this command raised for the next
					r = d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb, Data: data})
					if r.Status != scsi.StatusCheckCondition {
						continue
					}
					ps, err = scsi.ParseSense(r.Sense)
					require.NoError(t, err)
				}
				bad := ps.Key == scsi.KeyIllegalRequest && (ps.ASC == 0x20 || ps.ASC == 0x24)
				require.False(t, bad, "listed %02x/%02x (CDB % x) answered %02x/%02x/%02x", c.op, c.sa, cdb, ps.Key, ps.ASC, ps.ASCQ)
			}
		})
	}
}
