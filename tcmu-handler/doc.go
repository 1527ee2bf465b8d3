// Package tcmu is aluad's LIO front end: it serves the array's LUNs as
// target_core_user (TCMU) backstores behind LIO's iSCSI target, on Linux
// hosts that have LIO.
//
// It owns the TCMU userspace protocol in Go, with no tcmu-runner and no
// cgo: the shared region (mailbox, command ring, data area) as the
// kernel's uapi target_core_user.h lays it out, walked and answered by
// Ring (ParseEntry trusts nothing it reads, and is fuzzed); the UIO device
// that maps it and signals it; the TCM-USER generic netlink family (device
// added / removed / reconfigured events, and the reply messages); and the
// configfs layout: one LIO target per storage node, one TPG per controller
// port, one user backstore per (LUN, port), kernel ALUA driven by the
// array (Frontend.ALUAChanged), logins read from each TPG's
// dynamic_sessions and the declared hosts' explicit node ACLs, and which
// host sent a ring command told from LIO's per-ACL command counts
// (attribute.go).
//
// The SCSI semantics stay in pkg/scsi and pkg/array: a Frontend hands
// every command from a ring to a scsi.Handler with the nexus it can know
// (the port from the device, the initiator from the port's one session or
// from LIO's counts). What the TCMU mode can and cannot know compared with the
// pure-Go fabric is listed in docs/tcmu.md ("What the TCMU mode can and
// cannot know").
//
// FakeRegion, FakeDevice and MemFS play the kernel's side in tests.
package tcmu
