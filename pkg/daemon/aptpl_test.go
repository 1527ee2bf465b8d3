package daemon

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/scsi"
)

// Registrations and the reservation made with APTPL=1 survive a restart
// of the array (as a power loss); with APTPL=0 they do not.
func TestReservationsPersistThroughRestart(t *testing.T) {
	state := t.TempDir()
	cfg := config.Loopback(t.TempDir(), 1<<20)
	a := scsi.Nexus{InitiatorName: "iqn.2026-11.org.example:a", InitiatorPort: "iqn.2026-11.org.example:a,i,0x00023d000001", TargetPort: 1}
	b := scsi.Nexus{InitiatorName: "iqn.2026-11.org.example:b", InitiatorPort: "iqn.2026-11.org.example:b,i,0x00023d000001", TargetPort: 3}
	open := func() *Daemon {
		d, err := New(cfg, Options{Logger: quiet(), StateDir: state})
		require.NoError(t, err)
		require.NoError(t, d.openState(state))
		for _, n := range []scsi.Nexus{a, b} {
			d.SCSI.NexusUp(n)
			d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: make([]byte, 6)})
		}
		return d
	}
	prout := func(d *Daemon, n scsi.Nexus, sa, typ byte, key, saKey uint64, flags byte) scsi.Status {
		cdb := []byte{0x5f, sa, typ, 0, 0, 0, 0, 0, 24, 0}
		p := make([]byte, 24)
		binary.BigEndian.PutUint64(p, key)
		binary.BigEndian.PutUint64(p[8:], saKey)
		p[20] = flags
		return d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb, Data: p}).Status
	}
	write := func(d *Daemon, n scsi.Nexus) scsi.Status {
		cdb := []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0}
		return d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb, Data: make([]byte, 512)}).Status
	}
	restart := func(d *Daemon) *Daemon {
		require.NoError(t, d.SaveState())
		require.NoError(t, d.Stop(5*time.Second))
		return open()
	}

	d := open()
	require.Equal(t, scsi.StatusGood, prout(d, a, 0, 0, 0, 0xa1, 0x01)) // REGISTER, APTPL
	require.Equal(t, scsi.StatusGood, prout(d, b, 0, 0, 0, 0xb2, 0x01))
	require.Equal(t, scsi.StatusGood, prout(d, a, 1, 1, 0xa1, 0, 0)) // RESERVE, Write Exclusive
	require.Equal(t, scsi.StatusReservationConflict, write(d, b))

	d = restart(d)
	require.Equal(t, scsi.StatusReservationConflict, write(d, b), "the reservation came back")
	require.Equal(t, scsi.StatusGood, write(d, a), "held by a")
	r := d.SCSI.Execute(&scsi.Command{Nexus: b, CDB: []byte{0x5e, 0, 0, 0, 0, 0, 0, 0, 255, 0}})
	require.Equal(t, scsi.StatusGood, r.Status)
	require.Equal(t, uint32(16), binary.BigEndian.Uint32(r.Data[4:]), "both keys came back")

	// A REGISTER with APTPL=0: the next restart forgets everything.
	require.Equal(t, scsi.StatusGood, prout(d, b, 0, 0, 0xb2, 0xb3, 0x00))
	d = restart(d)
	defer d.Stop(5 * time.Second)
	require.Equal(t, scsi.StatusGood, write(d, b), "no reservation after a restart without APTPL")
}
