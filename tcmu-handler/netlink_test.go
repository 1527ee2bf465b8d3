package tcmu

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// kernelEvent builds a datagram as tcmu_netlink_event_init does.
func kernelEvent(family uint16, cmd byte, device string, minor, id uint32) []byte {
	var a []byte
	a = appendAttr(a, AttrDevice, append([]byte(device), 0))
	a = appendAttr(a, AttrMinor, binary.LittleEndian.AppendUint32(nil, minor))
	a = appendAttr(a, AttrDeviceID, binary.LittleEndian.AppendUint32(nil, id))
	return genlMessage(family, 0, 0, cmd, familyVer, a)
}

func TestParseMessages(t *testing.T) {
	ev := kernelEvent(0x1a, CmdAddedDevice, "tcm-user/7712/aluad_l0_p1/aluad/lun0/port1", 3, 42)
	other := genlMessage(0x1b, 0, 0, 1, 1, nil)
	evs, err := ParseMessages(append(append([]byte(nil), ev...), other...), 0x1a)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	e := evs[0]
	require.Equal(t, byte(CmdAddedDevice), e.Cmd)
	require.Equal(t, uint32(3), e.Minor)
	require.True(t, e.HasID)
	require.Equal(t, uint32(42), e.DeviceID)
	require.Equal(t, "aluad_l0_p1", e.Name())
	lun, port, ok := ParseDeviceName(e.Name())
	require.True(t, ok)
	require.Equal(t, uint64(0), lun)
	require.Equal(t, uint16(1), port)

	// A kernel error comes back as an error.
	nack := make([]byte, 20)
	binary.LittleEndian.PutUint32(nack, 20)
	binary.LittleEndian.PutUint16(nack[4:], nlmError)
	binary.LittleEndian.PutUint32(nack[16:], uint32(0xffffffff-1)) // -2
	_, err = ParseMessages(nack, 0x1a)
	require.ErrorContains(t, err, "kernel error 2")

	for _, bad := range [][]byte{ev[:10], ev[:len(ev)-3]} {
		_, err := ParseMessages(bad, 0x1a)
		require.Error(t, err)
	}
}

// The reply names the done command and carries the status and device id,
// as tcmu_genl_cmd_done reads them.
func TestReplyMessage(t *testing.T) {
	for _, tc := range []struct{ cmd, done byte }{
		{CmdAddedDevice, CmdAddedDeviceDone}, {CmdRemovedDevice, CmdRemovedDeviceDone}, {CmdReconfigDevice, CmdReconfigDeviceDone},
	} {
		b, err := ReplyMessage(0x1a, 9, Event{Cmd: tc.cmd, DeviceID: 42, HasID: true}, -5)
		require.NoError(t, err)
		require.Equal(t, uint16(0x1a), binary.LittleEndian.Uint16(b[4:]))
		require.Equal(t, tc.done, b[nlmsgHdrLen])
		got := map[uint16][]byte{}
		require.NoError(t, nlAttrs(b[nlmsgHdrLen+genlHdrLen:], func(typ uint16, v []byte) error { got[typ] = v; return nil }))
		require.Equal(t, int32(-5), int32(binary.LittleEndian.Uint32(got[AttrCmdStatus])))
		require.Equal(t, uint32(42), binary.LittleEndian.Uint32(got[AttrDeviceID]))
	}
	_, err := ReplyMessage(0x1a, 1, Event{Cmd: CmdSetFeatures, HasID: true}, 0)
	require.Error(t, err)
	_, err = ReplyMessage(0x1a, 1, Event{Cmd: CmdAddedDevice}, 0)
	require.ErrorContains(t, err, "no device id")
}

func TestParseFamily(t *testing.T) {
	var grp []byte
	grp = appendAttr(grp, ctrlAttrMcastGrpName, []byte("config\x00"))
	grp = appendAttr(grp, ctrlAttrMcastGrpID, binary.LittleEndian.AppendUint32(nil, 11))
	var groups []byte
	groups = appendAttr(groups, 1, grp)
	var a []byte
	a = appendAttr(a, ctrlAttrFamilyName, []byte(FamilyName+"\x00"))
	a = appendAttr(a, ctrlAttrFamilyID, binary.LittleEndian.AppendUint16(nil, 0x1a))
	a = appendAttr(a, ctrlAttrMcastGroups|0x8000, groups)
	id, g, err := parseFamily(genlMessage(genlIDCtrl, 0, 1, 1, 2, a))
	require.NoError(t, err)
	require.Equal(t, uint16(0x1a), id)
	require.Equal(t, uint32(11), g[ConfigGroup])
}

func TestSplitUIOName(t *testing.T) {
	tests := []struct {
		in, hba, name, cfg string
		ok                 bool
	}{
		{"tcm-user/7712/aluad_l1_p3/aluad/lun1/port3", "7712", "aluad_l1_p3", "aluad/lun1/port3", true},
		{"tcm-user/1/disk", "1", "disk", "", true},
		{"tcm-user/1", "", "", "", false},
		{"uio-other/1/x", "", "", "", false},
	}
	for _, tc := range tests {
		hba, name, cfg, ok := SplitUIOName(tc.in)
		require.Equal(t, tc.ok, ok, tc.in)
		if ok {
			require.Equal(t, []string{tc.hba, tc.name, tc.cfg}, []string{hba, name, cfg})
		}
	}
	// Only aluad's own device names parse: tcmu-runner's are left alone.
	for _, n := range []string{"disk", "aluad_l1", "aluad_l1_p3x", "aluad_l-1_p3"} {
		_, _, ok := ParseDeviceName(n)
		require.False(t, ok, n)
	}
}

func FuzzParseMessages(f *testing.F) {
	f.Add(kernelEvent(0x1a, CmdAddedDevice, "tcm-user/1/d/cfg", 1, 2), uint16(0x1a))
	f.Fuzz(func(t *testing.T, b []byte, fam uint16) {
		_, _ = ParseMessages(b, fam)
		_, _, _ = parseFamily(b)
	})
}

func TestParseDynamicSessions(t *testing.T) {
	require.Equal(t, []string{"iqn.a:1", "iqn.b:2"}, ParseDynamicSessions("iqn.a:1\n\x00iqn.b:2\n\x00"))
	require.Empty(t, ParseDynamicSessions(""))
}
