// Package reports owns what a storage admin reads when the array raises a
// connectivity or ownership condition: the catalog (one entry per
// condition the ownership core raises: code, title, severity, what the
// condition means, and the recovery procedure) and the Recovery Guru
// rendering of a raised report (reference 002: summary, details, what
// caused the problem, recovery procedure). It holds no state; the daemon
// fills a Report from the core's raised conditions and the array's
// topology.
package reports

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
)

// Severity orders reports.
type Severity string

// Severities, most urgent first.
const (
	Critical Severity = "critical" // I/O is at risk: one more failure stops it
	Major    Severity = "major"    // redundancy or performance is reduced
	Minor    Severity = "minor"    // a configuration or a component to correct
)

func (s Severity) rank() int {
	switch s {
	case Critical:
		return 0
	case Major:
		return 1
	}
	return 2
}

// Entry is one condition of the catalog.
type Entry struct {
	Condition ownership.Condition `json:"condition"`
	Code      string              `json:"code"`
	Title     string              `json:"title"`
	Severity  Severity            `json:"severity"`
	// Meaning says what the condition is, whoever it concerns.
	Meaning string `json:"meaning"`
	// Procedure is the recovery procedure, in steps.
	Procedure []string `json:"procedure"`
}

// Catalog holds every condition the ownership core raises, by condition.
var Catalog = map[ownership.Condition]Entry{
	ownership.HostRedundancyLost: {
		Code: "HRL", Title: "Host Redundancy Lost", Severity: Critical,
		Meaning: "The host can reach the array through one node only. Its I/O runs, but the loss of that node, " +
			"a port on it or the last cable would stop it.",
		Procedure: []string{
			"Check the host's links to the node named in the details: cables, switch ports and zoning, or the VLAN and IP routes for iSCSI.",
			"On the host, check the iSCSI sessions to that node's portals (iscsiadm -m session) and log in again if they are gone.",
			"Check that the host's multipath driver sees the paths again (multipath -ll on Linux, mpclaim -s -d on Windows).",
			"The array moves the host's LUNs back to their preferred owner by itself once the paths have stayed up for the failback window.",
		},
	},
	ownership.VolumeNotOnPreferred: {
		Code: "VNP", Title: "Volume Not On Preferred Path", Severity: Major,
		Meaning: "The LUN is owned by a node other than its preferred owner, so the preferred node's hosts' I/O is forwarded " +
			"or has moved away from the planned layout.",
		Procedure: []string{
			"Look for an earlier report that explains the move (Host Redundancy Lost, Node Offline) and recover that first.",
			"If every host reaches the preferred owner again, the array moves the LUN back after its failback window; no action is needed.",
			"If an operator moved the LUN on purpose, make the new owner the preferred owner, or move it back with aluad move.",
		},
	},
	ownership.MultipathNotDiscovering: {
		Code: "MND", Title: "Multipath Not Discovering Paths", Severity: Major,
		Meaning: "The host has logged in on paths to the array but neither reads the ALUA state (REPORT TARGET PORT GROUPS) " +
			"on them nor sends media I/O through them: its multipath driver is not managing those paths, so it cannot fail " +
			"over or follow ownership. A disk scan (INQUIRY, TEST UNIT READY, READ CAPACITY, a partition-table read) on every " +
			"path, which every OS does with or without multipath, does not count as using a path.",
		Procedure: []string{
			"Check that the host's multipath software is installed and running (multipathd on Linux, the MPIO feature with the Microsoft DSM on Windows).",
			"Check that the array's LUNs are claimed by it: a multipath.conf device section for vendor ALUAD (prio alua, hardware_handler \"1 alua\"), or mpclaim on Windows.",
			"Check the host type the host is declared with on the array: it must be one that follows ALUA.",
			"Rescan on the host, then check that every path shows in the multipath device.",
		},
	},
	ownership.ConnectedToOneNodeOnly: {
		Code: "C1N", Title: "Initiator Connected To One Node Only", Severity: Major,
		Meaning: "An initiator has sessions to one node of the array and none to another. Unless the host reaches the other " +
			"node through another initiator, it has no redundancy.",
		Procedure: []string{
			"Check that the host has discovered every portal of the array (iscsiadm -m discovery -t st, or the iSCSI initiator's Discovery tab).",
			"Log in to the other node's portals and make the sessions persistent.",
			"Check the host's network to the other node's ports (VLAN, routes, firewall).",
		},
	},
	ownership.NodeOffline: {
		Code: "NOF", Title: "Node Offline", Severity: Critical,
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
	ownership.PathDegraded: {
		Code: "PDG", Title: "Path Degraded", Severity: Minor,
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
	ownership.PathFlapping: {
		Code: "PFL", Title: "Path Flapping (Excessive Failovers)", Severity: Major,
		Meaning: "The LUN has failed over again and again within the damping window: a host's paths to its preferred owner " +
			"keep going down and coming back. Each failover and failback holds the LUN's I/O and makes every host switch " +
			"paths, so the array holds the LUN on the node the hosts reach and stops failing it back while this is raised.",
		Procedure: []string{
			"The details name the host and the target ports whose paths flapped: check those links (cables, optics, switch port error counters, NIC firmware).",
			"Check the host's iSCSI timeouts and NOP settings (node.conn[0].timeo.noop_out_interval and _timeout): too short a timeout on a busy link looks like a flap.",
			"Once the paths are fixed the array fails the LUN back by itself after they have stayed up for the clear window, or clear the report at once with aluad report clear --condition path-flapping --lun N.",
		},
	},
	ownership.HostTypeIncorrect: {
		Code: "HTI", Title: "Host Type Incorrect", Severity: Major,
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
	ownership.OwnershipThrash: {
		Code: "OTD", Title: "Ownership Thrash Detected", Severity: Major,
		Meaning: "The LUN's ownership has moved back and forth several times in a short window. Each move holds its I/O briefly, " +
			"and hosts that follow the moves keep switching paths.",
		Procedure: []string{
			"Look for hosts that drive ownership against each other: explicit ALUA (STPG) hosts with different path views, or a host whose paths to one node are failing intermittently.",
			"Check the host types declared for the LUN's hosts and their multipath settings (failback policy).",
			"Fix the flapping path, or declare the offending host's type so the array stops moving the LUN for it.",
		},
	},
}

func init() {
	for c, e := range Catalog {
		e.Condition = c
		Catalog[c] = e
	}
}

// Lookup returns the catalog entry of a condition.
func Lookup(c ownership.Condition) (Entry, bool) {
	e, ok := Catalog[c]
	return e, ok
}

// Report is a raised condition as an admin reads it.
type Report struct {
	Entry
	Host  string    `json:"host,omitempty"`
	Node  string    `json:"node,omitempty"`
	Ports []string  `json:"ports,omitempty"`
	LUNs  []uint64  `json:"luns,omitempty"`
	Cause string    `json:"cause"`
	Since time.Time `json:"since,omitempty"`
}

// Summary is the report's one-line summary.
func (r Report) Summary() string {
	var who []string
	if r.Host != "" {
		who = append(who, "host "+r.Host)
	}
	if r.Node != "" {
		who = append(who, "node "+r.Node)
	}
	if r.Host == "" && len(r.LUNs) == 1 {
		who = append(who, fmt.Sprintf("LUN %d", r.LUNs[0]))
	}
	if len(who) == 0 {
		return r.Title
	}
	return r.Title + ": " + strings.Join(who, ", ")
}

// Sort orders reports by severity, then title, host, node.
func Sort(rs []Report) {
	sort.SliceStable(rs, func(i, j int) bool {
		a, b := rs[i], rs[j]
		if a.Severity.rank() != b.Severity.rank() {
			return a.Severity.rank() < b.Severity.rank()
		}
		if a.Title != b.Title {
			return a.Title < b.Title
		}
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.Node < b.Node
	})
}

// Render writes reports as Recovery Guru pages: summary, details, what
// caused the problem, recovery procedure.
func Render(w io.Writer, rs []Report, now time.Time) error {
	if len(rs) == 0 {
		_, err := fmt.Fprintln(w, "No problems: every host has redundant paths and every LUN is where it should be.")
		return err
	}
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s [%s, %s]\n", strings.ToUpper(r.Summary()), r.Severity, r.Code)
		b.WriteString("  Details\n")
		if r.Host != "" {
			fmt.Fprintf(&b, "    Host:     %s\n", r.Host)
		}
		if r.Node != "" {
			fmt.Fprintf(&b, "    Node:     %s\n", r.Node)
		}
		if len(r.Ports) > 0 {
			fmt.Fprintf(&b, "    Ports:    %s\n", strings.Join(r.Ports, ", "))
		}
		if len(r.LUNs) > 0 {
			ls := make([]string, len(r.LUNs))
			for i, l := range r.LUNs {
				ls[i] = fmt.Sprint(l)
			}
			fmt.Fprintf(&b, "    LUNs:     %s\n", strings.Join(ls, ", "))
		}
		if !r.Since.IsZero() {
			fmt.Fprintf(&b, "    Since:    %s (%s ago)\n", r.Since.Format(time.RFC3339), now.Sub(r.Since).Round(time.Second))
		}
		fmt.Fprintf(&b, "  What caused the problem\n    %s\n    %s\n", r.Cause, r.Meaning)
		b.WriteString("  Recovery procedure\n")
		for i, s := range r.Procedure {
			fmt.Fprintf(&b, "    %d. %s\n", i+1, s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
