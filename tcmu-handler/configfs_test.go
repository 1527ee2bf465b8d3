package tcmu

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func testLayout() Layout {
	return Layout{Root: "/t", HBA: 5, Subtype: "aluad",
		Targets: []TargetSpec{
			{Node: "a", IQN: "iqn.2026-11.org.aluad:x.a", TPGs: []TPGSpec{{Port: "a0", TPGT: 1, Portal: "10.0.0.1:3260"}}},
			{Node: "b", IQN: "iqn.2026-11.org.aluad:x.b", TPGs: []TPGSpec{{Port: "b0", TPGT: 3, Portal: "10.0.0.2:3260"}}},
		},
		LUNs: []LUNSpec{{ID: 0, Size: 1 << 20, BlockSize: 512}, {ID: 4, Size: 2 << 20, BlockSize: 4096}}}
}

// Create builds every device before exporting it, sets the kernel ALUA
// knobs, and Remove takes it all down again, also when a crashed aluad
// left it behind.
func TestLayoutCreateRemove(t *testing.T) {
	l := testLayout()
	fs := NewMemFS()
	fs.MkdirAll("/t")
	require.NoError(t, l.Create(fs))
	require.Equal(t, "dev_config=aluad/lun4/port3,dev_size=2097152,hw_block_size=4096,hw_max_sectors=256,nl_reply_supported=-1",
		fs.Value("/t/core/user_5/aluad_l4_p3/control"))
	require.Equal(t, "1", fs.Value("/t/core/user_5/aluad_l0_p1/enable"))
	for _, k := range []string{"nonop_delay_msecs", "trans_delay_msecs"} {
		require.Equal(t, "0", fs.Value("/t/core/user_5/aluad_l0_p1/alua/default_tg_pt_gp/"+k))
	}
	require.True(t, fs.Exists("/t/iscsi/iqn.2026-11.org.aluad:x.b/tpgt_3/np/10.0.0.2:3260"))
	require.True(t, fs.Exists("/t/iscsi/iqn.2026-11.org.aluad:x.b/tpgt_3/lun/lun_4/aluad"))
	require.False(t, fs.Exists("/t/iscsi/iqn.2026-11.org.aluad:x.a/tpgt_3"), "a port belongs to its node's target only")
	all := strings.Join(fs.Writes, "\n")
	require.Less(t, strings.Index(all, "aluad_l4_p3/enable"), strings.Index(all, "tpgt_1/enable"), "devices before TPGs")

	require.NoError(t, l.SetState(fs, 4, 3, 2))
	require.Equal(t, "2", fs.Value("/t/core/user_5/aluad_l4_p3/alua/default_tg_pt_gp/alua_access_state"))
	require.NoError(t, l.SetPortEnabled(fs, "iqn.2026-11.org.aluad:x.a", 1, false))
	require.Equal(t, "0", fs.Value("/t/iscsi/iqn.2026-11.org.aluad:x.a/tpgt_1/enable"))

	// Someone else's backstore in the same HBA is not aluad's to remove.
	require.NoError(t, fs.Mkdir("/t/core/user_5/otherdisk"))
	require.Error(t, l.Remove(fs), "the HBA still holds a foreign device")
	require.True(t, fs.Exists("/t/core/user_5/otherdisk"))
	require.False(t, fs.Exists("/t/core/user_5/aluad_l0_p1"))
	require.False(t, fs.Exists("/t/iscsi/iqn.2026-11.org.aluad:x.a"))
	require.NoError(t, fs.Remove("/t/core/user_5/otherdisk"))
	require.NoError(t, l.Remove(fs))
	require.False(t, fs.Exists("/t/core/user_5"))
	// Nothing left: removing again is not an error.
	require.NoError(t, l.Remove(fs))
}

func TestDeviceNames(t *testing.T) {
	for _, tc := range []struct {
		lun  uint64
		tpgt uint16
	}{{0, 1}, {7, 4}, {1 << 40, 65535}} {
		lun, tpgt, ok := ParseDeviceName(DeviceName(tc.lun, tc.tpgt))
		require.True(t, ok)
		require.Equal(t, tc.lun, lun)
		require.Equal(t, tc.tpgt, tpgt)
	}
}
