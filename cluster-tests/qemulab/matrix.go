package qemulab

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/qualify"
)

// The interoperability matrix: aluad qualify's matrix schedule against
// guests of every release, each multipath configuration declared with the
// host type the array should be told and, as a second row, a wrong one.
// Several guests share a lab run; every row runs Runs times; the cells
// are the medians and spreads over those runs (pkg/qualify's Matrix).

// MatrixConfig is one multipath configuration of the matrix.
type MatrixConfig struct {
	Name        string `json:"name"`
	Conf        string `json:"multipath_conf"` // cluster-tests/guest/<Conf>
	NoMultipath bool   `json:"no_multipath"`
	// Right is the host type to declare for it ("": none is; the
	// configuration is the thing to change) and Wrong a plausible
	// mistake, the second row. With no right type both rows are
	// declarations, and neither is recommended.
	Right string `json:"right_type"`
	Wrong string `json:"wrong_type"`
	Desc  string `json:"desc"`
}

// MatrixConfigs are the configurations a matrix runs, in its row order.
// The right types are the array's advice as measured so far
// (docs/qualify.md, docs/ownership.md): linux-dmmp for dm-multipath
// (at its defaults it leaves a path only when it fails; with failback
// immediate it follows a STANDBY hand-off at once, an ANO change only at
// its priority check); legacy for a host without multipath (its LUNs
// stay where its one path is); none for multibus, which spreads I/O
// over both nodes whatever the array says.
var MatrixConfigs = []MatrixConfig{
	{Name: "defaults", Conf: "multipath-pure.conf", Right: "linux-dmmp", Wrong: "linux",
		Desc: "multipath-tools at its pure defaults (no section); the admin's multipath -a on each path"},
	{Name: "alua-immediate", Conf: "multipath-alua.conf", Right: "linux-dmmp", Wrong: "linux",
		Desc: "prio alua, group_by_prio, failback immediate, queue_if_no_path"},
	{Name: "followover", Conf: "multipath-followover.conf", Right: "linux-dmmp", Wrong: "linux",
		Desc: "prio alua, group_by_prio, failback followover, no_path_retry 30, queue-length"},
	{Name: "multibus-rr", Conf: "multipath-multibus-rr.conf", Wrong: "linux",
		Desc: "multibus, round-robin"},
	{Name: "multibus-ql", Conf: "multipath-multibus-ql.conf", Wrong: "linux",
		Desc: "multibus, queue-length"},
	{Name: "multibus-st", Conf: "multipath-multibus-st.conf", Wrong: "linux",
		Desc: "multibus, service-time"},
	{Name: "no-multipath", Conf: "multipath-none.conf", NoMultipath: true, Right: "legacy", Wrong: "linux-dmmp",
		Desc: "no multipath (multipathd not running), scsi_dh_alua attached at scan: one path per LUN"},
}

// MatrixConfigByName finds a configuration.
func MatrixConfigByName(name string) (MatrixConfig, error) {
	for _, c := range MatrixConfigs {
		if c.Name == name {
			return c, nil
		}
	}
	var names []string
	for _, c := range MatrixConfigs {
		names = append(names, c.Name)
	}
	return MatrixConfig{}, fmt.Errorf("no configuration %q (have %s)", name, strings.Join(names, ", "))
}

// MatrixOptions configure a matrix.
type MatrixOptions struct {
	Root, Out string
	Releases  []string       // default: Releases
	Configs   []MatrixConfig // default: MatrixConfigs
	NoWrong   bool           // only the right host type's rows
	Runs      int            // each row's repetitions (default 3)
	PerRun    int            // guests per lab run (default 4)
	Schedule  string         // qualify's built-in schedule (default matrix)
	// Budget: no lab run starts after it has passed (0: none); the matrix
	// is built from the runs that ran.
	Budget time.Duration
	Log    func(string, ...any)
}

// matrixRun is one lab run of the matrix, as written to its directory.
type matrixRun struct {
	Release string               `json:"release"`
	Rep     int                  `json:"rep"`
	Hosts   []qualify.MatrixHost `json:"hosts"`
	// Pace: how much slower than on a quiet machine the guests came up
	// (the lab's own measure): a run far above 1 measured a starved host.
	Pace  float64 `json:"pace,omitempty"`
	Error string  `json:"error,omitempty"`
}

const matrixRunFile = "matrix-run.json"

// matrixPlan lays the rows out into lab runs: for each repetition, each
// release's rows in batches of perRun guests. The repetitions go outer,
// so a matrix cut short by its budget has every release's rows.
func matrixPlan(releases []string, configs []MatrixConfig, wrong bool, runs, perRun int) []matrixRun {
	var plan []matrixRun
	for rep := 1; rep <= runs; rep++ {
		for _, rel := range releases {
			var rows []qualify.MatrixRow
			for _, c := range configs {
				if c.Right != "" {
					rows = append(rows, qualify.MatrixRow{Release: rel, Config: c.Name, Type: c.Right, Right: true})
				}
				if wrong || c.Right == "" {
					rows = append(rows, qualify.MatrixRow{Release: rel, Config: c.Name, Type: c.Wrong})
				}
			}
			for i := 0; i < len(rows); i += perRun {
				mr := matrixRun{Release: rel, Rep: rep}
				for j, r := range rows[i:min(i+perRun, len(rows))] {
					mr.Hosts = append(mr.Hosts, qualify.MatrixHost{Host: fmt.Sprintf("m%d", j+1), Row: r})
				}
				plan = append(plan, mr)
			}
		}
	}
	return plan
}

// clients are the run's guests.
func (mr matrixRun) clients() ([]ClientSpec, error) {
	var out []ClientSpec
	for _, h := range mr.Hosts {
		c, err := MatrixConfigByName(h.Row.Config)
		if err != nil {
			return nil, err
		}
		out = append(out, ClientSpec{Name: h.Host, Conf: c.Conf, HostType: h.Row.Type, NoMultipath: c.NoMultipath,
			Release: mr.Release, Desc: c.Desc})
	}
	return out, nil
}

// RunMatrix runs the plan and writes the matrix to o.Out: matrix.html,
// matrix.json, matrix.md and junit.xml, and each lab run under
// o.Out/run-NN (its own results and qualify report).
func RunMatrix(ctx context.Context, o MatrixOptions) (qualify.Matrix, error) {
	if len(o.Releases) == 0 {
		o.Releases = Releases
	}
	if len(o.Configs) == 0 {
		o.Configs = MatrixConfigs
	}
	if o.Runs < 0 || o.PerRun < 0 {
		return qualify.Matrix{}, fmt.Errorf("runs and guests per run must be positive")
	}
	o.Runs, o.PerRun, o.Schedule = cmp.Or(o.Runs, 3), cmp.Or(o.PerRun, 4), cmp.Or(o.Schedule, "matrix")
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	for _, r := range o.Releases {
		if err := ValidRelease(r); err != nil {
			return qualify.Matrix{}, err
		}
	}
	if hasDup(o.Releases) {
		return qualify.Matrix{}, fmt.Errorf("a release is named twice: %v", o.Releases)
	}
	var names []string
	for _, c := range o.Configs {
		names = append(names, c.Name)
	}
	if hasDup(names) {
		return qualify.Matrix{}, fmt.Errorf("a configuration is named twice: %v", names)
	}
	// An earlier matrix's run-NN would be read as this one's.
	if old, _ := filepath.Glob(filepath.Join(o.Out, "run-*")); len(old) > 0 {
		return qualify.Matrix{}, fmt.Errorf("%s holds an earlier matrix's lab runs: give a new --out (or --matrix-from %s to rebuild it)", o.Out, o.Out)
	}
	if _, err := qualify.LoadBuiltin(o.Schedule); err != nil {
		return qualify.Matrix{}, err
	}
	plan := matrixPlan(o.Releases, o.Configs, !o.NoWrong, o.Runs, o.PerRun)
	start := time.Now()
	for i, mr := range plan {
		if o.Budget > 0 && time.Since(start) > o.Budget {
			o.Log("matrix: budget %v spent after %d of %d lab runs; not run: %d", o.Budget, i, len(plan), len(plan)-i)
			break
		}
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(o.Out, fmt.Sprintf("run-%03d", i+1))
		var rows []string
		for _, h := range mr.Hosts {
			rows = append(rows, h.Host+"="+h.Row.Config+"/"+h.Row.Type)
		}
		o.Log("matrix: lab run %d of %d: %s, repetition %d: %s", i+1, len(plan), mr.Release, mr.Rep, strings.Join(rows, " "))
		specs, err := mr.clients()
		if err != nil {
			return qualify.Matrix{}, err
		}
		sc := Scenario{Name: fmt.Sprintf("matrix-%s-%d", mr.Release, i+1), Clients: specs, Qualify: o.Schedule}
		// A run killed before it ends is read as one that did not finish.
		started := mr
		started.Error = "the lab run did not finish"
		if err := writeJSON(filepath.Join(dir, matrixRunFile), started); err != nil {
			return qualify.Matrix{}, err
		}
		t := time.Now()
		res, err := Run(ctx, Options{Scenario: sc, Root: o.Root, Out: dir, Log: o.Log})
		if err != nil {
			mr.Error = err.Error()
			o.Log("matrix: lab run %d: %v", i+1, err)
		}
		if res != nil {
			mr.Pace = res.Pace
			for j := range mr.Hosts {
				for _, c := range res.Clients {
					if c.Spec.Name == mr.Hosts[j].Host {
						mr.Hosts[j].Row.Stack = c.Stack
					}
				}
			}
		}
		if err := writeJSON(filepath.Join(dir, matrixRunFile), mr); err != nil {
			return qualify.Matrix{}, err
		}
		o.Log("matrix: lab run %d took %v (guests' pace %.2fx)", i+1, time.Since(t).Round(time.Second), mr.Pace)
	}
	m, err := ReadMatrix(o.Out, o.Releases)
	if err != nil {
		return m, err
	}
	return m, WriteMatrix(o.Out, filepath.Join(o.Root, "cluster-tests", "guest"), m, o.Runs)
}

// ReadMatrix builds the matrix from the lab runs under dir (run-*/, each
// with its matrix-run.json and qualify/results.json).
func ReadMatrix(dir string, releases []string) (qualify.Matrix, error) {
	runDirs, err := filepath.Glob(filepath.Join(dir, "run-*"))
	if err != nil {
		return qualify.Matrix{}, err
	}
	sort.Strings(runDirs)
	var runs []qualify.MatrixRun
	for _, d := range runDirs {
		var mr matrixRun
		b, err := os.ReadFile(filepath.Join(d, matrixRunFile))
		if err != nil {
			continue // a run that did not get as far as its record
		}
		if err := json.Unmarshal(b, &mr); err != nil {
			return qualify.Matrix{}, fmt.Errorf("%s: %w", d, err)
		}
		run := qualify.MatrixRun{Hosts: mr.Hosts, Dir: d}
		if b, err := os.ReadFile(filepath.Join(d, "qualify", "results.json")); err == nil {
			var rep qualify.Report
			if err := json.Unmarshal(b, &rep); err != nil {
				return qualify.Matrix{}, fmt.Errorf("%s: %w", d, err)
			}
			for _, h := range mr.Hosts {
				for _, rh := range rep.Hosts {
					if rh.Name == h.Host && rh.Type != h.Row.Type {
						return qualify.Matrix{}, fmt.Errorf("%s: host %s was declared %s, but its record says %s: a report of another matrix?", d, h.Host, rh.Type, h.Row.Type)
					}
				}
			}
			run.Report = &rep
			if mr.Error != "" && rep.Error == "" {
				rep.Error = mr.Error
			}
		} else if mr.Error != "" {
			run.Report = qualify.Failed("", fmt.Errorf("%s", mr.Error))
		}
		runs = append(runs, run)
	}
	if len(runs) == 0 {
		return qualify.Matrix{}, fmt.Errorf("no lab run of a matrix under %s", dir)
	}
	if releases == nil {
		releases = Releases
	}
	return qualify.BuildMatrix(runs, releases), nil
}

// WriteMatrix writes matrix.html, matrix.json, matrix.md (with the
// recommendation per release, counting cells of runs runs or more: its
// configuration file from guestDir, cluster-tests/guest) and junit.xml.
func WriteMatrix(dir, guestDir string, m qualify.Matrix, runs int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	qualify.WriteMatrixMarkdown(&md, m)
	WriteRecommendations(&md, guestDir, qualify.Recommend(m, runs))
	if err := os.WriteFile(filepath.Join(dir, "matrix.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	for name, w := range map[string]func(*os.File) error{
		"matrix.html": func(f *os.File) error { return qualify.WriteMatrixHTML(f, m) },
		"matrix.json": func(f *os.File) error { return qualify.WriteMatrixJSON(f, m) },
		"junit.xml":   func(f *os.File) error { return qualify.WriteMatrixJUnit(f, m) },
	} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		werr := w(f)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return werr
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteRecommendations writes, per release, the configuration to use
// and the host type to declare, with the device section of its
// multipath.conf (the array's part of a host's file; the defaults section
// is the lab's), or why no configuration passed every cell.
func WriteRecommendations(w io.Writer, guestDir string, recs []qualify.Recommendation) {
	for _, r := range recs {
		fmt.Fprintf(w, "\n### %s\n\n", r.Release)
		switch {
		case r.Unmeasured:
			fmt.Fprintf(w, "Not measured enough: no configuration declared with its right type has every cell measured in the runs asked for.\n")
			if r.Instead != nil {
				fmt.Fprintf(w, "\n%s declared `%s`, the type thought wrong, passed every cell.\n", r.Instead.Config, r.Instead.Type)
			}
			continue
		case r.Green:
			fmt.Fprintf(w, "Use %s, declared `%s`: every cell passed in every run.\n", r.Row.Config, r.Row.Type)
		default:
			fmt.Fprintf(w, "No configuration passed every cell. The closest: %s, declared `%s`; it did not pass %s.\n",
				r.Row.Config, r.Row.Type, strings.Join(r.Failing, "; "))
		}
		if r.Instead != nil {
			fmt.Fprintf(w, "\n%s declared `%s`, the type thought wrong, passed every cell: the host type advice is off for it.\n", r.Instead.Config, r.Instead.Type)
		}
		c, err := MatrixConfigByName(r.Row.Config)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(guestDir, c.Conf))
		if err != nil {
			fmt.Fprintf(w, "\n(%s: %v)\n", c.Conf, err)
			continue
		}
		dev := deviceSection(string(b))
		switch {
		case c.NoMultipath:
			dev = "# no multipath: multipathd not running"
		case dev == "":
			dev = "# no device section: multipath-tools' built-in defaults"
		}
		fmt.Fprintf(w, "\n/etc/multipath.conf (%s):\n\n```\n%s\n```\n", c.Desc, dev)
		if c.Conf == "multipath-pure.conf" {
			fmt.Fprintf(w, "\nWhere find_multipaths is strict (the default here), add each new LUN's WWID: `multipath -a /dev/sdX`.\n")
		}
	}
}

// deviceSection is the devices { ... } section of a multipath.conf,
// comments dropped ("" if none).
func deviceSection(conf string) string {
	var out []string
	depth, in := 0, false
	for _, l := range strings.Split(conf, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") {
			continue
		}
		if depth == 0 && strings.HasPrefix(t, "devices") {
			in = true
		}
		if in {
			out = append(out, l)
		}
		depth += strings.Count(t, "{") - strings.Count(t, "}")
		if in && depth == 0 && strings.Contains(t, "}") {
			in = false
		}
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

func hasDup(xs []string) bool {
	seen := map[string]bool{}
	for _, x := range xs {
		if seen[x] {
			return true
		}
		seen[x] = true
	}
	return false
}
