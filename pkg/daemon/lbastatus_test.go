package daemon

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/scsi"
)

type lbaRun struct {
	lba, n uint64
	mapped bool
}

// GET LBA STATUS reports what the sparse backing file and the cache hold:
// a new LUN is deallocated, a write waiting in the cache is mapped before
// it reaches the file, and an UNMAP of whole allocation units deallocates
// them again.
func TestGetLBAStatus(t *testing.T) {
	const size = 4 << 20
	d, err := New(config.Loopback(t.TempDir(), size), Options{Logger: quiet()})
	require.NoError(t, err)
	defer d.Array.Close()
	n := scsi.Nexus{InitiatorName: "iqn.2026-11.org.example:gls", InitiatorPort: "iqn.2026-11.org.example:gls,i,0x1",
		TargetPort: d.Array.LUN(0).Owner().Ports[0].RelativeID}
	d.SCSI.NexusUp(n)
	d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: make([]byte, 6)})
	bs := uint64(d.Array.LUN(0).BlockSize)
	blocks := uint64(size) / bs
	status := func(lba uint64) []lbaRun {
		cdb := make([]byte, 16)
		cdb[0], cdb[1] = 0x9e, 0x12
		binary.BigEndian.PutUint64(cdb[2:], lba)
		binary.BigEndian.PutUint32(cdb[10:], 8+16*8)
		r := d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb})
		require.Equal(t, scsi.StatusGood, r.Status)
		var runs []lbaRun
		for b := r.Data[8:]; len(b) >= 16; b = b[16:] {
			runs = append(runs, lbaRun{binary.BigEndian.Uint64(b), uint64(binary.BigEndian.Uint32(b[8:])), b[12]&0x0f == 0})
		}
		require.NotEmpty(t, runs)
		require.Equal(t, lba, runs[0].lba, "the first descriptor starts at the LBA asked")
		for i := 1; i < len(runs); i++ {
			require.Equal(t, runs[i-1].lba+runs[i-1].n, runs[i].lba, "consecutive runs")
			require.NotEqual(t, runs[i-1].mapped, runs[i].mapped, "runs alternate")
		}
		return runs
	}
	exec := func(cdb, data []byte) {
		require.Equal(t, scsi.StatusGood, d.SCSI.Execute(&scsi.Command{Nexus: n, CDB: cdb, Data: data}).Status)
	}

	require.Equal(t, []lbaRun{{0, blocks, false}}, status(0), "a new LUN holds nothing")
	// 8 blocks at 1 MiB: mapped while they wait in the write-back cache.
	at := uint64(1<<20) / bs
	w := []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 8, 0}
	binary.BigEndian.PutUint32(w[2:], uint32(at))
	exec(w, make([]byte, 8*bs))
	require.Positive(t, d.Array.LUN(0).Owner().Cache.Stats().Dirty, "still in the cache")
	runs := status(0)
	require.Equal(t, lbaRun{0, at, false}, runs[0])
	require.True(t, runs[1].mapped)
	require.Equal(t, at, runs[1].lba)
	// On the media after SYNCHRONIZE CACHE: still mapped.
	exec([]byte{0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}, nil)
	require.True(t, status(at)[0].mapped)
	// UNMAP of that whole MiB: deallocated again.
	u := make([]byte, 24)
	binary.BigEndian.PutUint16(u, 22)
	binary.BigEndian.PutUint16(u[2:], 16)
	binary.BigEndian.PutUint64(u[8:], at)
	binary.BigEndian.PutUint32(u[16:], uint32((1<<20)/bs))
	exec([]byte{0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0}, u)
	require.Equal(t, []lbaRun{{0, blocks, false}}, status(0))
}
