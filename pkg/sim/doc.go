// Package sim is the deterministic simulation of the whole array
// (CONVENTIONS 13, the FoundationDB / TigerBeetle VOPR discipline): the
// real pkg/array, pkg/cache, pkg/media (in memory), the pkg/scsi device
// server and the ownership core, driven by the daemon's own control-path
// driver (pkg/drive), run on one goroutine under a virtual clock, driven by simulated hosts that send real CDBs on their I_T
// nexuses and keep a model of every acknowledged write. A script (one
// event a line, see script.go) says everything that happens: the
// topology, host I/O, ticks, destage slices, node crashes and restarts,
// port and path faults, orderly logouts, reboots, scans, operator moves,
// capacity changes, media faults and interlink delay. An event tagged
// with a move phase (@flush, @hold, @destage, @switch, @takeover) runs in
// the middle of the next move that reaches that point.
//
// Each host runs a kind of multipath stack (kinds.go: dm-multipath at
// its defaults or with prio alua, scsi_dh_alua alone, no handler, MSDSM,
// NMP), modelled by what the array can observe of it.
//
// A seed generates a script (gen.go); running it checks the invariants
// (invariants.go; the balance/shipping ping-pong in pingpong.go) after
// every event; a failing script is shrunk to a minimal one that still
// fails the same invariant (shrink.go), in the form the regression tests
// in testdata/ replay. The same script always gives
// a byte-identical event log.
//
// Where the simulation is coarser than the running array: commands are
// executed one at a time (a command sent while a move holds its LUN is
// delivered when the hold ends); background destaging runs as explicit
// events; the iSCSI layer is not in the loop (a path fault ends the
// session at once, as a NOP timeout would later).
//
// It imports the array, cache, media, scsi, arrayview, drive and
// ownership packages; nothing imports it but cmd/aluad and its tests.
package sim
