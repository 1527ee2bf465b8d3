package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/scsi"
)

// cachingPage reads LUN 0's caching mode page for page control pc
// (0 current, 1 changeable, 3 saved) and returns MODE SELECT(6) data
// carrying it back.
func cachingPage(t *testing.T, d *Daemon, n scsi.Nexus, pc byte) []byte {
	t.Helper()
	r := d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: []byte{0x1a, 0x08, pc<<6 | 0x08, 0, 255, 0}})
	require.Equal(t, scsi.StatusGood, r.Status, "MODE SENSE(6) pc=%d", pc)
	return append([]byte{0, 0, 0, 0}, r.Data[4:]...)
}

// WCE=0 makes writes write-through: GOOD only with the data on the
// media, none of it waiting in the write-back cache or its mirror. A
// page saved with SP=1 survives a restart of the array; a page set
// without SP lasts until then.
func TestWriteCacheDisable(t *testing.T) {
	data := t.TempDir()
	state := t.TempDir()
	cfg := config.Loopback(data, 1<<20)
	n := scsi.Nexus{InitiatorName: "iqn.2026-11.org.example:wce", InitiatorPort: "iqn.2026-11.org.example:wce,i,0x1", TargetPort: 1}
	open := func() *Daemon {
		d, err := New(cfg, Options{Logger: quiet(), StateDir: state})
		require.NoError(t, err)
		require.NoError(t, d.openState(state))
		d.SCSI.NexusUp(n)
		d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: make([]byte, 6)}) // the power-on UA
		return d
	}
	write := func(d *Daemon, lba byte) {
		cdb := []byte{0x2a, 0, 0, 0, 0, lba, 0, 0, 8, 0}
		r := d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb, Data: make([]byte, 8*512)})
		require.Equal(t, scsi.StatusGood, r.Status)
	}
	owner := func(d *Daemon) *array.Node { return d.Array.LUN(0).Owner() }

	d := open()
	require.Equal(t, byte(0x04), cachingPage(t, d, n, 1)[4+2]&0x04, "WCE is changeable")
	require.Equal(t, byte(0x80), cachingPage(t, d, n, 0)[4]&0x80, "PS: the page can be saved (Linux sd saves with SP=PS)")
	write(d, 0)
	st := owner(d).Cache.Stats()
	require.Positive(t, st.Dirty, "WCE=1: the write waits in the cache")
	back := st.WritesBack

	// WCE=0, saved.
	page := cachingPage(t, d, n, 0)
	page[4+2] &^= 0x04
	r := d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: []byte{0x15, 0x11, 0, 0, byte(len(page)), 0}, Data: page})
	require.Equal(t, scsi.StatusGood, r.Status)
	require.Zero(t, cachingPage(t, d, n, 0)[4+2]&0x04, "current WCE=0")
	require.Zero(t, cachingPage(t, d, n, 3)[4+2]&0x04, "saved WCE=0")
	require.NoError(t, d.SaveState())
	write(d, 64)
	st = owner(d).Cache.Stats()
	require.Equal(t, back, st.WritesBack, "WCE=0: no write completes from the write-back cache")
	require.Positive(t, st.WritesThrough)
	d.Stop(5 * time.Second)

	// A restart keeps the saved WCE=0 and serves it.
	d = open()
	require.Zero(t, cachingPage(t, d, n, 0)[4+2]&0x04, "WCE=0 after a restart")
	back = owner(d).Cache.Stats().WritesBack
	write(d, 128)
	require.Equal(t, back, owner(d).Cache.Stats().WritesBack)

	// WCE=1 without saving: write-back again, until the next restart.
	page = cachingPage(t, d, n, 0)
	page[4+2] |= 0x04
	r = d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: []byte{0x15, 0x10, 0, 0, byte(len(page)), 0}, Data: page})
	require.Equal(t, scsi.StatusGood, r.Status)
	write(d, 192)
	require.Greater(t, owner(d).Cache.Stats().WritesBack, back)
	require.NoError(t, d.SaveState())
	d.Stop(5 * time.Second)
	d = open()
	defer d.Stop(5 * time.Second)
	require.Zero(t, cachingPage(t, d, n, 0)[4+2]&0x04, "not saved: the saved WCE=0 is back")
}
