// Package ownership is the array's control core: it decides which node
// owns each LUN. It is a pure, deterministic state machine in the style of
// etcd's raft (CONVENTIONS 1): Step feeds it one event, Ready returns what
// it decided (ownership transfer batches and report changes), Advance says
// the decisions were taken. Time is logical: a Tick event advances it by
// one tick, and every window, cooldown and debounce is a number of ticks.
//
// It imports no net, os, time, sync or goroutines (a test enforces this),
// so a week of faults replays in milliseconds with the same answer every
// time. The array runs it from one goroutine and feeds it the event feed
// of pkg/daemon (logins, logouts, RTPGs, per-interval I/O) plus node and
// port faults.
//
// Its parts (DESIGN.md "The control path"; reference 002):
//
//   - connectivity.go: per host and node, protocol connectivity (a logged
//     in nexus), multipath discovery (commands that keep arriving on that
//     nexus, media I/O that proves use, or the RTPG of a host known to run
//     multipath) and I/O seen; the derived host states.
//   - handoff.go: the STANDBY hand-off (a STANDBY-type host's non-owner
//     paths report ANO for the LUNs of a node it does not reach).
//   - crashloop.go: nodes that keep failing get no failback until stable.
//   - workload.go: rolling averages a*old + (1-a)*new of I/O per LUN and
//     node, node utilisation, the expansion factor (response time over the
//     best observed, reference 004) and whether the array is stressed.
//   - planner.go: owners that balance aggregate load with the fewest moves,
//     under connectivity constraints; the ROI check; cooldowns.
//   - failover.go: immediate failover, failback only after a full and
//     stable recovery, and I/O-shipping moves.
//   - batch.go: moves grouped by LUN class under a stop-time budget.
//   - reports.go: the Recovery-Guru style conditions, raised and cleared
//     with debounce.
//   - records.go: cluster mode's decisions about the ownership records
//     (a gone or restarted controller's LUNs taken over by the holder of
//     its mirror copies, once fenced; a move left half done; the failback
//     when the core is off), made by the elected leader each round.
//   - explicit.go: a model of hosts that drive ownership themselves with
//     SET TARGET PORT GROUPS, the baseline the core is measured against.
package ownership
