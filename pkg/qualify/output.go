package qualify

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints the verdicts: one row per host and step, then what
// failed with what to change.
func WriteTable(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tTYPE\tSTEP\tFOLLOW\tSTALL\tCHECK COND\tTMF\tDROPS/LOGINS\tRTPG\tVERDICT")
	for _, res := range rep.Results {
		st := rep.Steps[res.Step]
		follow := "-"
		if res.FollowMs != nil {
			follow = fmtMs(*res.FollowMs)
		}
		stall := "-"
		if st.Class != ClassDiscovery && len(res.LUNs) > 0 {
			stall = fmtMs(res.StallMs)
		}
		cc, tmf := "-", "-"
		if n := total(res.Checks); n > 0 {
			cc = fmt.Sprintf("%d (%s)", n, shortSense(res.Checks))
		}
		if n := total(res.TMFs); n > 0 {
			tmf = summary(res.TMFs)
		}
		rtpg := res.RTPG
		if rtpg == "" {
			rtpg = "-"
		}
		verdict := strings.ToUpper(res.Verdict)
		fmt.Fprintf(tw, "%s\t%s\t%d %s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", res.Host, res.Type, st.Index, st.Name, follow, stall, cc, tmf,
			res.Drops, res.Relogins, rtpg, verdict)
	}
	tw.Flush()
	for _, c := range rep.Array {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "%s array: %s: %s\n", mark, c.Name, c.Detail)
	}
	if len(rep.Findings) > 0 {
		fmt.Fprintln(w, "\nWhat failed, and what to change:")
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "- %s (%s), step %d %s: %s: %s\n  -> %s\n", f.Host, f.Type, f.Step, f.StepName, f.Check, f.Observed, f.Advice)
		}
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "\nThe run ended early: %s\n", rep.Error)
		if len(rep.NotRun) > 0 {
			fmt.Fprintf(w, "Not run: %s\n", strings.Join(rep.NotRun, "; "))
		}
		for _, x := range rep.Restored {
			fmt.Fprintf(w, "Restored: %s\n", x)
		}
	}
	verdict := "PASS"
	if !rep.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n%s: %d hosts, %d steps, %d findings, %v\n", verdict, len(rep.Hosts), len(rep.Steps)-1, len(rep.Findings),
		rep.End.Sub(rep.Start).Round(time.Second))
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func shortSense(m map[string]int) string {
	keys := sortedHosts(m)
	if len(keys) > 2 {
		keys = append(keys[:2], "...")
	}
	return strings.Join(keys, " ")
}

// WriteJSON writes the report as JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// The JUnit XML schema as CI systems read it (Jenkins, GitLab, GitHub
// actions' reporters): testsuites of testcases, a failure element per
// failed case, skipped for a step that did not apply.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Hostname   string          `xml:"hostname,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Skipped   *junitMessage `xml:"skipped"`
	Errors    []junitFail   `xml:"error"`
	Failures  []junitFail   `xml:"failure"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
}

type junitFail struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

func secs(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// WriteJUnit writes the report as JUnit XML: a test suite per host, a test
// case per step; a failed check is a failure with the advice as its text.
func WriteJUnit(w io.Writer, rep *Report) error {
	out := junitSuites{Name: "aluad qualify " + rep.Schedule, Time: secs(rep.End.Sub(rep.Start))}
	for _, h := range rep.Hosts {
		s := junitSuite{Name: h.Name, Timestamp: rep.Start.UTC().Format("2006-01-02T15:04:05"), Hostname: h.Name,
			Time: secs(rep.End.Sub(rep.Start)), Properties: []junitProperty{{"host_type", h.Type}, {"array", rep.Target},
				{"schedule", rep.Schedule}, {"luns", fmt.Sprint(h.LUNs)}}}
		for _, res := range rep.Results {
			if res.Host != h.Name {
				continue
			}
			st := rep.Steps[res.Step]
			c := junitCase{Name: fmt.Sprintf("%02d %s", st.Index, st.Name), Classname: "aluad.qualify." + h.Type + "." + h.Name,
				Time: secs(st.End.Sub(st.Start)), SystemOut: caseOut(res, st)}
			switch res.Verdict {
			case "n/a":
				c.Skipped = &junitMessage{Message: "the host uses no LUN in this step"}
				s.Skipped++
			case "fail":
				for _, f := range rep.Findings {
					if f.Host == h.Name && f.Step == st.Index {
						c.Failures = append(c.Failures, junitFail{Message: f.Check + ": " + f.Observed, Type: f.Check, Body: f.Advice})
					}
				}
				s.Failures++
			}
			s.Tests++
			s.Cases = append(s.Cases, c)
		}
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Suites = append(out.Suites, s)
	}
	// The array's own checks, and the run's error and the steps it did
	// not run: a CI gate fails on these too.
	arr := junitSuite{Name: "array", Timestamp: rep.Start.UTC().Format("2006-01-02T15:04:05"), Time: secs(rep.End.Sub(rep.Start)),
		Properties: []junitProperty{{"array", rep.Target}, {"schedule", rep.Schedule}}}
	for _, c := range rep.Array {
		jc := junitCase{Name: c.Name, Classname: "aluad.qualify.array", Time: "0", SystemOut: c.Detail}
		if !c.OK {
			jc.Failures = []junitFail{{Message: c.Name, Type: "array", Body: c.Detail}}
			arr.Failures++
		}
		arr.Tests++
		arr.Cases = append(arr.Cases, jc)
	}
	if rep.Error != "" {
		body := rep.Error
		if len(rep.NotRun) > 0 {
			body += "\nnot run: " + strings.Join(rep.NotRun, "; ")
		}
		if len(rep.Restored) > 0 {
			body += "\nrestored: " + strings.Join(rep.Restored, "; ")
		}
		arr.Cases = append(arr.Cases, junitCase{Name: "the schedule ran to the end", Classname: "aluad.qualify.array", Time: "0",
			Errors: []junitFail{{Message: rep.Error, Type: "error", Body: body}}})
		arr.Tests++
		arr.Errors++
	}
	out.Tests += arr.Tests
	out.Failures += arr.Failures
	out.Errors += arr.Errors
	out.Suites = append(out.Suites, arr)
	return encodeJUnit(w, out)
}

// encodeJUnit writes the XML header and the suites, indented.
func encodeJUnit(w io.Writer, out junitSuites) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func caseOut(res Result, st Step) string {
	var b strings.Builder
	for _, lr := range res.LUNs {
		fmt.Fprintf(&b, "LUN %d: stall %s", lr.LUN, fmtMs(lr.StallMs))
		if lr.Moved {
			fmt.Fprintf(&b, ", moved %s->%s, follow %s, UA %v, RTPG after UA %v", lr.From, lr.To, fmtMs(deref(lr.FollowMs)), lr.UA, lr.RTPG)
		}
		if len(lr.Checks) > 0 {
			fmt.Fprintf(&b, ", CHECK CONDITION %s", summary(lr.Checks))
		}
		if len(lr.TMFs) > 0 {
			fmt.Fprintf(&b, ", TMF %s", summary(lr.TMFs))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "session drops %d, logouts %d, logins %d\n", res.Drops, res.Logouts, res.Relogins)
	if st.Note != "" {
		b.WriteString("array: " + st.Note + "\n")
	}
	return b.String()
}

// WriteFiles writes report.html, results.json and junit.xml to dir.
func WriteFiles(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, o := range []struct {
		name string
		w    func(io.Writer, *Report) error
	}{{"report.html", WriteHTML}, {"results.json", WriteJSON}, {"junit.xml", WriteJUnit}} {
		f, err := os.Create(filepath.Join(dir, o.name))
		if err != nil {
			return err
		}
		err = o.w(f, rep)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", o.name, err)
		}
	}
	return nil
}
