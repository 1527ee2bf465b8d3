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
	// Right is the host type to declare for it; Wrong a plausible
	// mistake, the second row.
	Right string `json:"right_type"`
	Wrong string `json:"wrong_type"`
	Desc  string `json:"desc"`
}

// MatrixConfigs are the configurations a matrix runs, in its row order.
var MatrixConfigs = []MatrixConfig{
	{Name: "defaults", Conf: "multipath-pure.conf", Right: "linux-dmmp", Wrong: "linux",
		Desc: "multipath-tools at its pure defaults (no section); the admin's multipath -a on each path"},
	{Name: "alua-immediate", Conf: "multipath-alua.conf", Right: "linux", Wrong: "linux-dmmp",
		Desc: "prio alua, group_by_prio, failback immediate, queue_if_no_path"},
	{Name: "followover", Conf: "multipath-followover.conf", Right: "linux-dmmp", Wrong: "linux",
		Desc: "prio alua, group_by_prio, failback followover, no_path_retry 30, queue-length"},
	{Name: "multibus-rr", Conf: "multipath-multibus-rr.conf", Right: "linux", Wrong: "linux-dmmp",
		Desc: "multibus, round-robin"},
	{Name: "multibus-ql", Conf: "multipath-multibus-ql.conf", Right: "linux", Wrong: "linux-dmmp",
		Desc: "multibus, queue-length"},
	{Name: "multibus-st", Conf: "multipath-multibus-st.conf", Right: "linux", Wrong: "linux-dmmp",
		Desc: "multibus, service-time"},
	{Name: "no-multipath", Conf: "multipath-none.conf", NoMultipath: true, Right: "linux", Wrong: "linux-dmmp",
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
	Error   string               `json:"error,omitempty"`
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
				rows = append(rows, qualify.MatrixRow{Release: rel, Config: c.Name, Type: c.Right, Right: true})
				if wrong {
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
	if _, err := qualify.LoadBuiltin(o.Schedule); err != nil {
		return qualify.Matrix{}, err
	}
	plan := matrixPlan(o.Releases, o.Configs, !o.NoWrong, o.Runs, o.PerRun)
	start := time.Now()
	for i, mr := range plan {
		if o.Budget > 0 && time.Since(start) > o.Budget {
			o.Log("matrix: budget %v spent after %d of %d lab runs", o.Budget, i, len(plan))
			break
		}
		if ctx.Err() != nil {
			break
		}
		dir := filepath.Join(o.Out, fmt.Sprintf("run-%02d", i+1))
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
		t := time.Now()
		res, err := Run(ctx, Options{Scenario: sc, Root: o.Root, Out: dir, Log: o.Log})
		if err != nil {
			mr.Error = err.Error()
			o.Log("matrix: lab run %d: %v", i+1, err)
		}
		if res != nil {
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
		o.Log("matrix: lab run %d took %v", i+1, time.Since(t).Round(time.Second))
	}
	m, err := ReadMatrix(o.Out, o.Releases)
	if err != nil {
		return m, err
	}
	return m, WriteMatrix(o.Out, filepath.Join(o.Root, "cluster-tests", "guest"), m)
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
// recommendation per release: its configuration file from guestDir,
// cluster-tests/guest) and junit.xml.
func WriteMatrix(dir, guestDir string, m qualify.Matrix) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	qualify.WriteMatrixMarkdown(&md, m)
	WriteRecommendations(&md, guestDir, qualify.Recommend(m))
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
// and the host type to declare, with its multipath.conf (comments
// dropped), or why no configuration passed every cell.
func WriteRecommendations(w io.Writer, guestDir string, recs []qualify.Recommendation) {
	for _, r := range recs {
		fmt.Fprintf(w, "\n### %s\n\n", r.Release)
		if r.Green {
			fmt.Fprintf(w, "Use %s, declared `%s`: every cell passed in every run.\n", r.Row.Config, r.Row.Type)
		} else {
			fmt.Fprintf(w, "No configuration passed every cell. The closest: %s, declared `%s`; it failed %s.\n",
				r.Row.Config, r.Row.Type, strings.Join(r.Failing, "; "))
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
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				keep = append(keep, l)
			}
		}
		conf := strings.TrimSpace(strings.Join(keep, "\n"))
		if conf == "" {
			conf = "# (none: multipath-tools' own defaults)"
		}
		fmt.Fprintf(w, "\n/etc/multipath.conf (%s):\n\n```\n%s\n```\n", c.Desc, conf)
	}
}
