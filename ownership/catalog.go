package ownership

// The report catalog (DESIGN "Reports", reference 002 and its Recovery
// Guru screenshot): one typed entry per condition the core raises, as
// tailscale's health.Warnable, holding everything about it in one place:
// its code, title and severity, the conditions that explain it away, how
// long it must hold before it is visible, how the array detects it, what
// it means and the recovery procedure. The core reads DependsOn and
// TimeToVisible; pkg/reports renders the rest; pkg/mgmt serves it.

// Condition names a report.
type Condition string

// The catalog's conditions.
const (
	HostRedundancyLost      Condition = "host-redundancy-lost"
	VolumeNotOnPreferred    Condition = "volume-not-on-preferred-path"
	MultipathNotDiscovering Condition = "multipath-not-discovering-paths"
	ConnectedToOneNodeOnly  Condition = "initiator-connected-to-one-node-only"
	OwnershipThrash         Condition = "ownership-thrash-detected"
	NodeOffline             Condition = "node-offline"
	PathDegraded            Condition = "path-degraded"
	// PathFlapping: a LUN failed over DampCount times within DampWindow
	// and is held on its reachable owner (excessive failovers).
	PathFlapping Condition = "path-flapping"
	// HostTypeIncorrect: a host does not behave as its declared type
	// says (it does not follow moves, or never reads RTPG).
	HostTypeIncorrect Condition = "host-type-incorrect"
	// NodeUnstable: a node keeps failing (a crash loop); failback to it
	// waits until it has been stable.
	NodeUnstable Condition = "node-unstable"
)

// Severity orders reports.
type Severity string

// Severities, most urgent first.
const (
	Critical Severity = "critical" // I/O is at risk: one more failure stops it
	Major    Severity = "major"    // redundancy or performance is reduced
	Minor    Severity = "minor"    // a configuration or a component to correct
)

// Rank orders severities, most urgent first (0).
func (s Severity) Rank() int {
	switch s {
	case Critical:
		return 0
	case Major:
		return 1
	}
	return 2
}

// Warnable is one condition of the catalog.
type Warnable struct {
	Condition Condition `json:"condition"`
	Code      string    `json:"code"`
	Title     string    `json:"title"`
	Severity  Severity  `json:"severity"`
	// DependsOn lists the conditions that explain this one away: while one
	// of them holds for the node this one concerns (for a LUN condition,
	// the LUN's preferred owner), this one is not raised. Only node
	// conditions can be dependencies, and only a condition whose holds
	// name the node they are on (evaluateReports) can have any:
	// TestCatalog keeps both.
	DependsOn []Condition `json:"depends_on,omitempty"`
	// TimeToVisible is how many ticks the condition must hold (or have
	// ended) before it is raised (or cleared); 0 means the array's alert
	// delay (Config.Debounce). Config.Debounces overrides both.
	TimeToVisible int `json:"time_to_visible_ticks,omitempty"`
	// Detection says what the array observes to raise it.
	Detection string `json:"detection"`
	// Meaning says what the condition is, whoever it concerns.
	Meaning string `json:"meaning"`
	// Procedure is the recovery procedure, in steps.
	Procedure []string `json:"procedure"`
}

// Catalog returns every entry, in the order the core evaluates them.
func Catalog() []Warnable { return append([]Warnable(nil), catalog...) }

// Lookup returns the catalog entry of a condition.
func Lookup(c Condition) (Warnable, bool) {
	if i, ok := catalogIndex[c]; ok {
		return catalog[i], true
	}
	return Warnable{}, false
}

// Conditions lists every condition the core raises, in catalog order.
var Conditions = func() []Condition {
	out := make([]Condition, len(catalog))
	for i, w := range catalog {
		out[i] = w.Condition
	}
	return out
}()

var catalogIndex = func() map[Condition]int {
	m := make(map[Condition]int, len(catalog))
	for i, w := range catalog {
		m[w.Condition] = i
	}
	return m
}()

var catalog = []Warnable{
	{
		Condition: HostRedundancyLost, Code: "HRL", Title: "Host Redundancy Lost", Severity: Critical,
		DependsOn: []Condition{NodeOffline},
		Detection: "A host that has reached a node (a login, an RTPG or media I/O on a path to it) has no usable path to it left: every session there is gone or its port is down. A host that logged out of every path (shut down, rebooting) and one still in its discovery window are not counted.",
		Meaning: "The host can reach the array through one node only. Its I/O runs, but the loss of that node, " +
			"a port on it or the last cable would stop it.",
		Procedure: []string{
			"Check the host's links to the node named in the details: cables, switch ports and zoning, or the VLAN and IP routes for iSCSI.",
			"On the host, check the iSCSI sessions to that node's portals (iscsiadm -m session) and log in again if they are gone.",
			"Check that the host's multipath driver sees the paths again (multipath -ll on Linux, mpclaim -s -d on Windows).",
			"The array moves the host's LUNs back to their preferred owner by itself once the paths have stayed up for the failback window.",
		},
	},
	{
		Condition: VolumeNotOnPreferred, Code: "VNP", Title: "Volume Not On Preferred Path", Severity: Major,
		DependsOn: []Condition{NodeOffline},
		Detection: "The LUN was moved off its preferred owner by a failover or a host-driven move, and that owner is up again.",
		Meaning: "The LUN is owned by a node other than its preferred owner, so the preferred node's hosts' I/O is forwarded " +
			"or has moved away from the planned layout.",
		Procedure: []string{
			"Look for an earlier report that explains the move (Host Redundancy Lost, Node Offline) and recover that first.",
			"If every host reaches the preferred owner again, the array moves the LUN back after its failback window; no action is needed.",
			"If an operator moved the LUN on purpose, make the new owner the preferred owner, or move it back with aluad move.",
		},
	},
	{
		Condition: MultipathNotDiscovering, Code: "MND", Title: "Multipath Not Discovering Paths", Severity: Major,
		DependsOn: []Condition{NodeOffline},
		Detection: "The host is logged in to the node but, for the discovery window, commands have not kept arriving on any of its paths there (a multipath checker's probes: TEST UNIT READY or REPORT TARGET PORT GROUPS every few seconds) and no media I/O has completed GOOD through them (a disk scan, or the one RTPG a kernel reads on every path at scan, does not count).",
		Meaning: "The host has logged in on paths to the array but nothing keeps probing them and no I/O goes through " +
			"them: no multipath stack manages those paths, so the host cannot fail over to them or follow ownership, and " +
			"loses its LUNs when the paths it does use fail. A multipath stack probes every path all the time " +
			"(multipathd's checker every 5-20 s, MSDSM and NMP likewise); a kernel without one still scans every path " +
			"(INQUIRY, TEST UNIT READY, READ CAPACITY, a partition-table read) and, where scsi_dh_alua is built in, reads " +
			"REPORT TARGET PORT GROUPS once on each, which does not count. The details say whether the host shows a " +
			"multipath stack at all (it uses one node only) or one that leaves this node's paths out.",
		Procedure: []string{
			"Check that the host's multipath software is installed and running (multipathd on Linux, the MPIO feature with the Microsoft DSM on Windows); a host that is meant to run without it should log out of the paths it does not use.",
			"Check that the array's LUNs are claimed by it: a multipath.conf device section for vendor ALUAD (prio alua, hardware_handler \"1 alua\"), or mpclaim on Windows.",
			"Check the host type the host is declared with on the array: it must be one that follows ALUA.",
			"Rescan on the host, then check that every path shows in the multipath device.",
		},
	},
	{
		Condition: ConnectedToOneNodeOnly, Code: "C1N", Title: "Initiator Connected To One Node Only", Severity: Major,
		DependsOn: []Condition{NodeOffline},
		Detection: "With more than one node up, the host has only ever logged in to one node and reaches that one only.",
		Meaning: "An initiator has sessions to one node of the array and none to another. Unless the host reaches the other " +
			"node through another initiator, it has no redundancy.",
		Procedure: []string{
			"Check that the host has discovered every portal of the array (iscsiadm -m discovery -t st, or the iSCSI initiator's Discovery tab).",
			"Log in to the other node's portals and make the sessions persistent.",
			"Check the host's network to the other node's ports (VLAN, routes, firewall).",
		},
	},
	{
		Condition: NodeOffline, Code: "NOF", Title: "Node Offline", Severity: Critical,
		Detection: "The node is down: crashed, powered off or halted by the fault API, or its heartbeat is lost.",
		Meaning: "A storage node (controller) is not serving. Its LUNs have failed over to the surviving nodes, which now " +
			"carry all the I/O with no partner to fail over to, and every host's paths to the node are down. While the node " +
			"is offline, the path, redundancy and preferred-path reports it explains are not raised.",
		Procedure: []string{
			"Check the node's state and its event log (aluad events, kind fault and alua) for why it went down.",
			"Bring the node back (aluad fault restart --node NODE in the emulator; on real hardware, reseat or replace the controller).",
			"Check that the hosts log in to the node's ports again (aluad hosts, aluad paths).",
			"The array moves the failed-over LUNs back once every host using them reaches the node for the failback window; if it does not, see Volume Not On Preferred Path.",
		},
	},
	{
		Condition: PathDegraded, Code: "PDG", Title: "Path Degraded", Severity: Minor,
		DependsOn: []Condition{NodeOffline},
		Detection: "At each statistics interval with enough exchanges, the path's exchange time over its best interval (its latency expansion) exceeds path_degraded_factor, exceeds by that factor the expansion of its node and of the host's other paths, and its exchanges take at least path_degraded_min (1 ms) longer than its best: a slowdown no host notices (a loopback path on a busy machine going from tens of microseconds to a few hundred) is not a path fault; a path whose best is under 1 ms is raised only once it adds that much.",
		Meaning: "One path from a host to the array answers much more slowly than it used to (its latency expansion factor: the " +
			"exchange time over the best it has shown), while the node and the host's other paths do not. The fault is on the " +
			"path: a cable, an optic, a switch port, a congested link or a misconfigured NIC. Multipath drivers that spread I/O " +
			"over paths slow down with it.",
		Procedure: []string{
			"Compare the path's latency with its peers (aluad paths): the port and initiator named in the details are the slow pair.",
			"Check the link's error counters on the host NIC and the switch port (CRC errors, drops, retransmits) and its speed and duplex.",
			"Replace the cable or optic, or move the link to another switch port.",
			"If the slow path cannot be fixed now, take it out of the host's multipath map so its I/O uses the healthy paths.",
		},
	},
	{
		Condition: PathFlapping, Code: "PFL", Title: "Path Flapping (Excessive Failovers)", Severity: Major,
		Detection: "The LUN failed over damp_count times within the damping window because its hosts' paths to its owner went away; the core then holds it on the node the hosts reach.",
		Meaning: "The LUN has failed over again and again within the damping window: a host's paths to its preferred owner " +
			"keep going down and coming back. Each failover and failback holds the LUN's I/O and makes every host switch " +
			"paths, so the array holds the LUN on the node the hosts reach and stops failing it back while this is raised.",
		Procedure: []string{
			"The details name the host and the target ports whose paths flapped: check those links (cables, optics, switch port error counters, NIC firmware).",
			"Check the host's iSCSI timeouts and NOP settings (node.conn[0].timeo.noop_out_interval and _timeout): too short a timeout on a busy link looks like a flap.",
			"Once the paths are fixed the array fails the LUN back by itself after they have stayed up for the clear window, or clear the report at once with aluad report clear --condition path-flapping --lun N.",
		},
	},
	{
		Condition: HostTypeIncorrect, Code: "HTI", Title: "Host Type Incorrect", Severity: Major,
		Detection: "After a planned move of one of the host's LUNs, the host's I/O stayed on the old owner's paths for the follow window; or the host sends media I/O but has never read REPORT TARGET PORT GROUPS.",
		Meaning: "The host does not behave as the host type it is declared with says: its I/O stayed on the old owner's " +
			"paths after the array moved one of its LUNs (its multipath stack does not follow ALUA changes the way the type " +
			"expects), or it sends I/O but never reads REPORT TARGET PORT GROUPS. Its I/O is forwarded between nodes; the " +
			"array ships its LUNs to where its I/O arrives and no longer moves them for balance, but the layout stays off plan.",
		Procedure: []string{
			"Read the details: they say what the host did and the host type that fits it (from its behaviour, its initiator name and its RTPG pattern).",
			"Change the host's type in the array's configuration to the one suggested (for dm-multipath at its defaults, linux-dmmp: non-owner paths report STANDBY, so the host leaves them at once), or change the host's multipath settings to match its type (failback immediate).",
			"The array never changes a declared host type by itself. After the change, clear the report with aluad report clear --condition host-type-incorrect --host H; the next planned move is watched again.",
		},
	},
	{
		Condition: NodeUnstable, Code: "NUS", Title: "Node Unstable (Repeated Failures)", Severity: Critical,
		Detection: "The node went down crash_count times within the crash window; it stays unstable until it has been up without a break for the stable window.",
		Meaning: "A storage node (controller) keeps failing and coming back: a recurring firmware fault, a failing " +
			"component or power. Failing its LUNs back after each restart would put the hosts' I/O on it just in time for " +
			"its next failure, so the array leaves them on the surviving nodes: no automatic failback to the node, and no " +
			"balance or shipping move onto it, while this is raised. Failover off it is never held back.",
		Procedure: []string{
			"Read the details: they name the node, when it failed and the LUNs held off it.",
			"Find why the node fails (aluad events, kind fault; on real hardware the controller's logs, its power and its temperature), and repair or replace it.",
			"The array fails the LUNs back by itself once the node has stayed up for the stable window; once it is repaired, clear the report at once with aluad report clear --condition node-unstable --node NODE.",
		},
	},
	{
		Condition: OwnershipThrash, Code: "OTD", Title: "Ownership Thrash Detected", Severity: Major,
		Detection: "The LUN changed owner thrash_count times within the thrash window.",
		Meaning: "The LUN's ownership has moved back and forth several times in a short window. Each move holds its I/O briefly, " +
			"and hosts that follow the moves keep switching paths.",
		Procedure: []string{
			"Look for hosts that drive ownership against each other: explicit ALUA (STPG) hosts with different path views, or a host whose paths to one node are failing intermittently.",
			"Check the host types declared for the LUN's hosts and their multipath settings (failback policy).",
			"Fix the flapping path, or declare the offending host's type so the array stops moving the LUN for it.",
		},
	},
}
