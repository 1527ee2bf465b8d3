package alua

import "sort"

// The host types: how the array reports ALUA to a host's OS and multipath
// stack. One name per type everywhere: the array's configuration and
// reports, the ownership core's advice, the lab's emulated stack that
// models it, and the docs.
const (
	HostDefault      = "default"
	HostLinux        = "linux"
	HostLinuxStandby = "linux-standby"
	HostLinuxDMMP    = "linux-dmmp"
	HostWindows      = "windows"
	HostVMware       = "vmware"
	HostLegacy       = "legacy"
)

// HostType is what the array knows about a host's OS and multipath stack:
// the state it reports to that host for a non-owner group, and whether the
// stack follows ALUA at all (only such hosts' LUNs may be moved for load
// balance).
type HostType struct {
	Name string
	// NonOwner is the state reported for a group that is up but does not
	// own the LUN: ANO (I/O is forwarded) or STANDBY (I/O fails with 04/0B
	// and the host moves to the owner at once). STANDBY is reported only
	// while the ownership core pushes the host after a move (its
	// hand-offs, pkg/array HandedOff); ANO otherwise.
	NonOwner AccessState
	// TPGS: the host's multipath stack reads RTPG and follows UA 2A/06.
	TPGS bool
	Doc  string
}

// Standby reports whether non-owner paths report STANDBY to the host, so
// its I/O must leave them after a move.
func (t HostType) Standby() bool { return t.NonOwner == Standby }

// HostTypes are the built-in host types.
var HostTypes = map[string]HostType{
	HostDefault: {Name: HostDefault, NonOwner: ActiveNonOptimized, TPGS: true,
		Doc: "any ALUA-aware multipath stack; non-owner paths are ANO"},
	HostLinux: {Name: HostLinux, NonOwner: ActiveNonOptimized, TPGS: true,
		Doc: "Linux dm-multipath with scsi_dh_alua; non-owner paths are ANO"},
	HostLinuxStandby: {Name: HostLinuxStandby, NonOwner: Standby, TPGS: true,
		Doc: "Linux dm-multipath; after a move, non-owner paths report STANDBY until the host follows (I/O leaves them on the next command); ANO otherwise, so a host without a path to the owner keeps its I/O"},
	// The name storage admins know from arrays' host type lists.
	HostLinuxDMMP: {Name: HostLinuxDMMP, NonOwner: Standby, TPGS: true,
		Doc: "Linux DM-MP (same as linux-standby): dm-multipath at its defaults moves to the new owner within a second of a move instead of at its next path check"},
	HostWindows: {Name: HostWindows, NonOwner: ActiveNonOptimized, TPGS: true,
		Doc: "Windows MSDSM (Round Robin with Subset); non-owner paths are ANO"},
	HostVMware: {Name: HostVMware, NonOwner: ActiveNonOptimized, TPGS: true,
		Doc: "VMware NMP with SATP_ALUA; non-owner paths are ANO"},
	HostLegacy: {Name: HostLegacy, NonOwner: ActiveNonOptimized, TPGS: false,
		Doc: "a multipath stack that ignores ALUA; its LUNs are never moved for balance"},
}

// HostTypeNames lists the host type names in order.
func HostTypeNames() []string {
	out := make([]string, 0, len(HostTypes))
	for n := range HostTypes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
