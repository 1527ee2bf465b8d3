// Package conformance runs external SCSI/iSCSI conformance suites
// (libiscsi's iscsi-test-cu) against aluad and summarises their output.
package conformance

import (
	"regexp"
	"strings"
)

// Summary counts iscsi-test-cu results. The suite prints a skipped test
// as "[SKIPPED]" and then counts it as passed; Skipped separates them.
type Summary struct {
	Passed, Skipped, Failed int
	Failures                []string
}

var testRe = regexp.MustCompile(`(?m)^  Test: (\S+) \.\.\.`)

// Summarize parses iscsi-test-cu output.
func Summarize(out string) Summary {
	var s Summary
	idx := testRe.FindAllStringSubmatchIndex(out, -1)
	for i, m := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		body := out[m[1]:end]
		if k := strings.Index(body, "\nSuite: "); k >= 0 {
			body = body[:k]
		}
		if k := strings.Index(body, "\nRun Summary"); k >= 0 {
			body = body[:k]
		}
		name := out[m[2]:m[3]]
		switch {
		case regexp.MustCompile(`(?m)^FAILED`).MatchString(body) || strings.HasSuffix(strings.TrimSpace(body), "FAILED"):
			s.Failed++
			s.Failures = append(s.Failures, name)
		case strings.Contains(body, "[SKIPPED]"):
			s.Skipped++
		default:
			s.Passed++
		}
	}
	return s
}
