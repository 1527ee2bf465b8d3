// Package api owns what the management surface speaks: the types of the
// daemon's HTTP API, control socket and event feed (status, hosts, paths,
// LUNs, events, faults, reports), the client that calls them, and the
// feed's ring of events (EventLog). The daemon serves these types; the
// CLI, the lab, the stress runs and the QEMU lab read them without
// importing the daemon.
package api
