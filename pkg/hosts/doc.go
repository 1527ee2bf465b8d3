// Package hosts owns the emulated host multipath stacks of the lab: a
// Host is one server with one I_T nexus per target port it logs in to,
// and a Personality that reacts to ALUA the way a real stack does.
//
// The personalities follow the documented behaviour of the stacks they
// are named after; each knob says where a real default comes from:
//
//   - linux-dmmp: scsi_dh_alua (RTPG at attach and on UNIT ATTENTION
//     2A/06, 2A/07 and 29/00; 04/0A retried every second until the
//     transition timeout of RTPG byte 5, 60 s when it is 0; I/O to a
//     STANDBY or UNAVAILABLE path fails that path) under multipathd
//     (group_by_prio with prio alua, failback immediate, a path checker
//     every polling_interval that grows to max_polling_interval while a
//     path is unchanged, queue_if_no_path or no_path_retry). The kernel
//     learns the new states from the UA at once, but the path group in
//     use changes only when multipathd re-reads the priorities: I/O goes
//     on over a path that became active/non-optimized until the next check.
//   - windows: Round Robin with Subset over the active/optimized
//     paths; on 2A/06 one RTPG in flight per LUN and the subset follows at
//     once; 04/0A and 04/0C are retried on another group, every second.
//   - vmware: VMW_SATP_ALUA with VMW_PSP_MRU (stay on the path in use
//     while it is active/optimized, follow-over to the new AO path on a
//     state change) or VMW_PSP_RR with iops=1000.
//   - explicit-alua: a host that owns the decision: it sends SET TARGET
//     PORT GROUPS to make a group it reaches active/optimized when it has
//     no AO path, and to its preferred group (the AO group it first saw)
//     at each check when that group is reachable (failback by the host).
//   - naive: round robin over every path, never reads RTPG.
//
// A command that outlives the stack's command timeout is ended at the
// target before it is retried on any path, as the Linux SCSI error
// handler does before dm-multipath may retry it: ABORT TASK on its
// nexus, then LOGICAL UNIT RESET, each waited for, and the nexus dropped
// when neither is answered (Nexus.EndTask). A late copy of a retried
// write could otherwise land after a newer one acknowledged elsewhere.
//
// Path selectors (reference 000): round-robin, best-path (bytes pending
// weighted by an error weight from the rolling average latency),
// least-queue-depth and service-time. Every path keeps the counters of
// reference 000 4.1, split by reads and writes.
//
// The package talks to a target through the Nexus interface, so tests
// drive a personality against a scripted target under testing/synctest
// and the lab drives it against aluad over real iSCSI (NewSessionNexus).
package hosts
