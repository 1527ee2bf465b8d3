// Package cluster owns cluster mode's shared state, kept in etcd: the
// membership of the controllers, the ownership table and the election of
// the controller that runs the ownership core. High-rate data (I/O
// statistics, forwarded I/O, mirror writes) never goes here; it goes over
// the interlink.
//
//   - Membership: each controller holds a lease and, under it, the key
//     members/<node>. A lost lease is that controller down for everyone
//     else. The controller itself keeps a local deadline, the send time of
//     its last renewal that etcd granted plus the lease's TTL: etcd cannot
//     have expired the lease before it, so a controller that stops serving
//     as owner at its deadline has stopped before anyone could take over.
//   - The ownership table: one record per LUN (owners/<lun>: its owner,
//     and the destination while a move runs). Every change is a
//     transaction conditioned on the record's previous revision, and that
//     revision is the fencing token: a controller serves a LUN as owner
//     only while its lease is valid and the record it last read names it;
//     forwarded I/O and mirror traffic carry the token, and a stale one is
//     refused.
//   - The election: the controller that runs the ownership core is elected
//     under its membership lease, so a controller that loses its lease
//     loses the leadership with it.
//
// Everything is under /aluad/<array id>/ so one etcd cluster can hold
// several arrays.
//
// The store runs on kv.Backend (package kv, which owns the interface and
// an in-memory store with etcd's semantics for the simulation): over an
// etcd client here (etcdkv.go), or over kv.Mem. The election is
// concurrency.Election's code over that interface (election.go), so
// both backends run it.
package cluster
