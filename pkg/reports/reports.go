// Package reports owns how a storage admin reads a raised connectivity or
// ownership condition: the Recovery Guru rendering of a report (reference
// 002: summary, details, what caused the problem, recovery procedure) and
// their order. The condition's catalog entry (code, title, severity,
// dependencies, time to visible, detection, meaning, procedure) is one
// typed ownership.Warnable, next to the core that raises it. It holds no
// state; pkg/mgmt fills a Report from the core's raised conditions and the
// array's topology.
package reports

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
)

// Report is a raised condition as an admin reads it.
type Report struct {
	ownership.Warnable
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
		if a.Severity.Rank() != b.Severity.Rank() {
			return a.Severity.Rank() < b.Severity.Rank()
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
		// The condition's title in capitals; names as written, so an IQN
		// can be pasted back into a command.
		fmt.Fprintf(&b, "%s%s [%s, %s]\n", strings.ToUpper(r.Title), strings.TrimPrefix(r.Summary(), r.Title), r.Severity, r.Code)
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
