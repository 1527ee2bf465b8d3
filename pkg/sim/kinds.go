package sim

import (
	"fmt"
	"slices"
	"strings"
)

// A host kind is the multipath stack (or the lack of one) a simulated
// host runs, modelled by what the array can observe of it: its logins,
// the commands on each nexus (a checker's probes, RTPGs) and the paths
// its media I/O takes. Every kind's behaviour is in this one table (and
// in docs/simulation.md); a script names it with kind= on a host line.
//
//	kind             stack                          checker  RTPG reads                    media I/O
//	auto (default)   the host type's own stack      TUR      login, UA                     best state, round robin (follows)
//	dmmp-defaults    dm-multipath at its defaults   TUR      login, scan, UA (scsi_dh)     the path in use (sticks)
//	dmmp-alua        prio alua, failback immediate  TUR      login, scan, UA, every round  best state, round robin (follows)
//	dmmp-followover  prio alua, failback followover TUR      login, scan, UA, every round  the group in use; a group back from failing, if AO
//	dh-alua-nomp     scsi_dh_alua, no multipath     none     login, scan, UA on its path   one path device (sticks)
//	nohandler        no handler, no multipath       none     never                         one path device (sticks)
//	win-rr           MSDSM Round Robin              none     login, scan, UA               every AO and ANO path, round robin
//	win-rrws         MSDSM Round Robin with Subset  none     login, scan, UA               AO paths, round robin (follows)
//	vmw-mru          NMP MRU, SATP_ALUA             none     login, scan, UA               the path in use (sticks)
//	vmw-rr           NMP RR, SATP_ALUA              none     login, scan, UA               AO paths, round robin (follows)
//
// The details, as each stack behaves:
//
//   - checker: dm-multipath probes every logged-in path every tick with
//     a TEST UNIT READY (multipathd's path checker every 5-20 s), for
//     the host's first LUN; a unit attention it meets is read as the
//     kind's RTPG rule says. MSDSM and NMP at their defaults probe no
//     idle path (MSDSM's path verification is off; NMP evaluates paths
//     every 300 s, beyond the simulation's windows): the array knows
//     their stacks by the RTPG they read on every path as they claim it,
//     under their initiators' default names (iqn.1991-05.com.microsoft,
//     iqn.1998-01.com.vmware). A kind without multipath probes nothing.
//   - RTPG (only to a host type with TPGS: a legacy-type host's kernel
//     sees no ALUA and reads none): "login" is scsi_dh_alua attaching to
//     each new path device (MSDSM and SATP_ALUA claiming it), for every
//     LUN; "scan" a rescan, which re-reads it on every path; "UA" the
//     path where a 2A/06 (or a STANDBY or UNAVAILABLE sense) was met;
//     "every round" prio alua, which reads RTPG for every LUN on every
//     path at each checker round. scsi_dh_alua without multipath meets
//     unit attentions only on the one path it uses.
//   - media I/O: "best state" goes to the paths in the best state the host
//     last read (AO, then ANO, then unknown), so it follows a move at the
//     next RTPG; "sticks" (failback manual, path_grouping_policy failover
//     at dm-multipath's defaults: one path a group; MRU) keeps the path
//     in use while it answers and is not STANDBY, UNAVAILABLE or
//     TRANSITIONING, then takes the best; "the group in use" keeps the
//     node (one ALUA group) in use the same way, round robin within it,
//     and switches when a path logs in again to a node it had no session
//     to and reads AO there (failback followover: the first path of a
//     group that failed comes back). "every AO and ANO path" spreads I/O
//     over all nodes' paths alike, leaving only STANDBY and UNAVAILABLE
//     ones. "one path device": one block device, no failover software; it
//     stays on that path while that path works, whatever comes back
//     (a real host cannot switch); a command its path refuses (STANDBY,
//     UNAVAILABLE) fails; the simulation lets it go on through the first
//     usable path when that path fails (a remount), and it never
//     reads the states.
//
// Old scripts keep working: mp=none is nohandler and mp=sticky is
// dmmp-defaults (the same behaviour as before, scans aside).
type hostKind struct {
	name, doc string
	// multipath: a multipath stack; probeIdle: its checker probes every
	// path every tick, used or idle (multipathd's). MSDSM and NMP at
	// their defaults send nothing on an idle path (MSDSM's path
	// verification is off; NMP evaluates paths every 300 s, beyond the
	// simulation's windows): they show their stack by the RTPG they read
	// on each path as they claim it, under their initiators' own names.
	multipath, probeIdle bool
	// rtpgLogin, rtpgScan, rtpgUA, rtpgPoll: when it reads RTPG.
	rtpgLogin, rtpgScan, rtpgUA, rtpgPoll bool
	io                                    ioPolicy
	// followover: a group back from failing takes I/O if AO.
	followover bool
}

// ioPolicy: which paths carry a host's media I/O.
type ioPolicy int

const (
	ioBest       ioPolicy = iota // the best known state, round robin among equals
	ioStickPath                  // the path in use while usable, else the best
	ioStickGroup                 // the node in use while a path of it is usable, else the best
	ioAll                        // AO, ANO and unknown alike, round robin
	ioFirst                      // one path device: the one in use while that path works, else the first usable
)

var hostKinds = []hostKind{
	{name: "auto", multipath: true, probeIdle: true, rtpgLogin: true, rtpgUA: true, io: ioBest,
		doc: "the host type's own stack (follows ALUA as its type says)"},
	{name: "dmmp-defaults", multipath: true, probeIdle: true, rtpgLogin: true, rtpgScan: true, rtpgUA: true, io: ioStickPath,
		doc: "dm-multipath at its defaults: checker tur, prio sysfs, one path a group, failback manual"},
	{name: "dmmp-alua", multipath: true, probeIdle: true, rtpgLogin: true, rtpgScan: true, rtpgUA: true, rtpgPoll: true, io: ioBest,
		doc: "dm-multipath, group_by_prio, prio alua, failback immediate"},
	{name: "dmmp-followover", multipath: true, probeIdle: true, rtpgLogin: true, rtpgScan: true, rtpgUA: true, rtpgPoll: true,
		io: ioStickGroup, followover: true, doc: "dm-multipath, group_by_prio, prio alua, failback followover"},
	{name: "dh-alua-nomp", rtpgLogin: true, rtpgScan: true, rtpgUA: true, io: ioFirst,
		doc: "scsi_dh_alua without multipath: one path device in use"},
	{name: "nohandler", io: ioFirst, doc: "no device handler, no multipath: one path device in use"},
	{name: "win-rr", multipath: true, rtpgLogin: true, rtpgScan: true, rtpgUA: true, io: ioAll,
		doc: "Windows MSDSM Round Robin: every AO and ANO path"},
	{name: "win-rrws", multipath: true, rtpgLogin: true, rtpgScan: true, rtpgUA: true, io: ioBest,
		doc: "Windows MSDSM Round Robin with Subset: the AO paths"},
	{name: "vmw-mru", multipath: true, rtpgLogin: true, rtpgScan: true, rtpgUA: true, io: ioStickPath,
		doc: "VMware NMP Most Recently Used with SATP_ALUA"},
	{name: "vmw-rr", multipath: true, rtpgLogin: true, rtpgScan: true, rtpgUA: true, io: ioBest,
		doc: "VMware NMP Round Robin with SATP_ALUA: the AO paths"},
}

// kindNames lists the kinds a script may name.
func kindNames() []string {
	var out []string
	for _, k := range hostKinds {
		out = append(out, k.name)
	}
	return out
}

func kindOf(name string) (hostKind, bool) {
	i := slices.IndexFunc(hostKinds, func(k hostKind) bool { return k.name == name })
	if i < 0 {
		return hostKind{}, false
	}
	return hostKinds[i], true
}

// parseKind reads a host line's kind= and the older mp= (none, sticky).
func parseKind(host, kind, mp string) (string, error) {
	old := map[string]string{"": "", "none": "nohandler", "sticky": "dmmp-defaults"}
	fromMP, ok := old[mp]
	if !ok {
		return "", fmt.Errorf("host %s: mp is none or sticky, not %q", host, mp)
	}
	switch {
	case kind == "":
		kind = fromMP
	case fromMP != "" && fromMP != kind:
		return "", fmt.Errorf("host %s: mp=%s contradicts kind=%s", host, mp, kind)
	}
	if kind == "" {
		kind = "auto"
	}
	if _, ok := kindOf(kind); !ok {
		return "", fmt.Errorf("host %s: unknown kind %q (%s)", host, kind, strings.Join(kindNames(), ", "))
	}
	return kind, nil
}
