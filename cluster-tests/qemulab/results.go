package qemulab

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Write writes results.json and results.md to dir.
func (r *Results) Write(dir string) error { return WriteResults(dir, r, r.Markdown()) }

// WriteResults writes a lab run's results to dir (made if missing): v as
// results.json, md as results.md.
func WriteResults(dir string, v any, md string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(md), 0o644)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

// Markdown renders the results for a person.
func (r *Results) Markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "# aluad QEMU lab: %s (%s)\n\n", r.Scenario, verdict)
	fmt.Fprintf(&b, "Run %s, %v in all (image %v). Real Linux guests (Debian, QEMU TCG; each client's release below) on a lab network; "+
		"aluad on the host. Times are taken at the array: the move's commit (UA queued), the host's first 2A/06, "+
		"and when its READs/WRITEs left the old owner and ran only on the new one (10 ms polling).\n\n",
		r.Started.Format(time.RFC3339), r.Elapsed.Round(time.Second), (time.Duration(r.ImageMS) * time.Millisecond).Round(time.Second))
	if r.Pace > 0 {
		fmt.Fprintf(&b, "The guests came up %.2fx slower than on a quiet machine; the waits on their own timers were scaled by that: %v.\n\n", r.Pace, r.Waits)
	}
	if p := r.Polling; p.Polls > 0 {
		fmt.Fprintf(&b, "The array's counters were read %d times, every %v on average, the longest gap %v (%d failed reads): "+
			"the resolution of the first-I/O-at-the-new-owner times.\n\n", p.Polls, p.Mean.Round(time.Millisecond),
			p.Longest.Round(time.Millisecond), p.Errors)
	}
	b.WriteString("## Clients\n\n| client | release | stack and configuration | declared as | boot | set-up | maps x paths | AO group on owner | fio I/Os | fio errors | dm errors | path errors retried |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Clients {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f s | %.1f s | %d x %d | %v | %d | %d | %d | %d |\n", c.Spec.Name, cmp.Or(c.Stack, c.Spec.release()), c.Spec.Desc, c.Spec.HostType,
			c.Booted.Seconds(), c.SetUp.Seconds(), c.Maps, c.Paths/max(c.Maps, 1), c.AOOnOwner, c.FioIOs, c.FioErrors, c.KernelDMErrors, c.KernelPathErrors)
	}
	for _, st := range r.Steps {
		fmt.Fprintf(&b, "\n## Step: %s\n\n", st.Name)
		if st.Err != "" {
			fmt.Fprintf(&b, "**Error:** %s\n\n", st.Err)
		}
		for _, c := range st.Changes {
			fmt.Fprintf(&b, "- %s\n", c)
		}
		if st.Owners != nil {
			fmt.Fprintf(&b, "\nOwners at the end of the step: %v.\n", st.Owners)
		}
		for _, n := range st.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		bullets(&b, "Reports raised or cleared during the step", st.Raised)
		bullets(&b, "Reports standing at the end of the step", st.Reports)
		if len(st.IOErrLogs) > 0 {
			b.WriteString("\nI/O error lines in the guests' kernel logs during the step:\n\n```\n")
			for _, r := range st.IOErrLogs {
				fmt.Fprintf(&b, "%s\n", r)
			}
			b.WriteString("```\n")
		}
		b.WriteString("\n| client | LUN | move | cause | I/O held | move -> UA | UA -> switch | move -> switch |\n|---|---|---|---|---|---|---|---|\n")
		for _, f := range st.Follows {
			ua, uaSw, sw := "no UA", "-", "not within the window"
			if !f.UA.IsZero() {
				ua = ms(f.UA.Sub(f.Moved))
			}
			if f.Already {
				sw = "already there"
			} else if f.Done() {
				sw = ms(f.MoveToSwitch())
				if !f.UA.IsZero() {
					uaSw = ms(f.UAToSwitch())
				}
			}
			fmt.Fprintf(&b, "| %s | %d | %s -> %s | %s | %s | %s | %s | %s |\n", f.Host, f.LUN, f.From, f.To, f.Cause,
				f.Stop.Round(time.Microsecond), ua, uaSw, sw)
		}
	}
	if len(r.Qualify) > 0 {
		b.WriteString("\n## aluad qualify against the guests' own measurements\n\nArray side: qualify's command trace. Guest side: the guest's disk counters read every 10 ms when it gets the CPU (the multipath device's for the stall, each path's for the follow), moved onto the lab's clock by the guest's measured clock offset; a guest figure is a range when a count rose between two reads more than 1 ms apart. Verdict: multipathd's topology at the end of each step (`multipathd show topology`, multipath -ll's format): is the LUN's active path group on its owner. Agreement: within 20% or 100 ms, whichever is larger, of the guest's range.\n\n")
		b.WriteString("| client | step | stall array / guest (ms) | follow array / guest (ms) | active group on the owner | agree |\n|---|---|---|---|---|---|\n")
		for _, a := range r.Qualify {
			fmt.Fprintf(&b, "| %s | %d %s | %.0f / %s | %s / %s | %s | %v |\n", a.Host, a.Step, a.Name, a.ArrayStall, a.GuestStall,
				fptr(a.ArrayFollow), a.GuestFollow, strings.Join(a.Topology, ", "), a.StallOK && a.FollowOK && a.VerdictOK)
		}
		for _, c := range r.Clients {
			for i := 1; i < len(r.Topology[c.Spec.Name])+1; i++ {
				if out, ok := r.Topology[c.Spec.Name][i]; ok {
					fmt.Fprintf(&b, "\n%s after qualify step %d (multipathd show topology):\n\n```\n%s```\n", c.Spec.Name, i, out)
				}
			}
		}
	}
	b.WriteString("\n## Checks\n\n")
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "- `%s` %s: %s\n", mark, c.Name, c.Detail)
	}
	for _, c := range r.Clients {
		fmt.Fprintf(&b, "\n## %s: multipath -ll\n\nBefore the steps:\n\n```\n%s```\n", c.Spec.Name, c.Before)
		for _, st := range r.Steps {
			if out, ok := st.MultipathLL[c.Spec.Name]; ok {
				fmt.Fprintf(&b, "\nAfter step %s:\n\n```\n%s```\n", st.Name, out)
			}
		}
		fmt.Fprintf(&b, "\nAt the end:\n\n```\n%s```\n", c.After)
	}
	if len(r.Clients) > 0 {
		c := r.Clients[0]
		fmt.Fprintf(&b, "\n## %s: sg_rtpg and sg_inq on one path\n\n```\n%s\n%s```\n", c.Spec.Name, c.RTPG, c.Inquiry)
	}
	return b.String()
}

// bullets writes a titled list, if it has items.
func bullets(b *strings.Builder, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:\n\n", title)
	for _, r := range items {
		fmt.Fprintf(b, "- %s\n", r)
	}
}
