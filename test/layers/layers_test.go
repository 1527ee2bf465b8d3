// Package layers checks the module's import graph against its layers:
// every package may import only the aluad packages listed for it here, so
// a new dependency (or a new package) is a decision made in this table,
// not an accident. docs/architecture.md draws the same graph.
package layers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/aluad/aluad/"

// allowed lists, for every package of the module (by directory), the
// aluad packages its non-test sources may import. Lower layers first.
var allowed = map[string][]string{
	// The shared vocabulary of ALUA, the injected clock and the
	// configuration file's value types: leaves.
	"pkg/alua":  nil,
	"pkg/clock": nil,
	"pkg/units": nil,
	// The in-memory network tests run daemons and hosts on in a
	// testing/synctest bubble.
	"pkg/memnet": nil,
	// Leaves: the pure ownership core, the device server, the media.
	"ownership": {"pkg/alua"},
	"pkg/scsi":  {"pkg/alua"},
	"pkg/media": nil,
	// What every front end reports, and the front ends.
	"pkg/fabric":   {"pkg/scsi"},
	"pkg/iscsi":    {"pkg/clock", "pkg/fabric", "pkg/scsi", "pkg/units"},
	"tcmu-handler": {"pkg/alua", "pkg/fabric", "pkg/scsi"},
	// The array and its view for the device server.
	"pkg/cache":     {"pkg/clock", "pkg/media"},
	"pkg/array":     {"pkg/clock", "pkg/alua", "pkg/cache", "pkg/media", "pkg/units"},
	"pkg/arrayview": {"pkg/alua", "pkg/array", "pkg/scsi"},
	"pkg/reports":   {"ownership"},
	// The management surface's types, client and feed.
	"pkg/api": {"pkg/array", "pkg/reports"},
	// Hosts: the Go initiator and the emulated multipath stacks.
	"pkg/initiator": {"pkg/alua", "pkg/iscsi", "pkg/scsi"},
	"pkg/hosts":     {"pkg/alua", "pkg/initiator", "pkg/scsi"},
	// What survives a restart: the array id and the state file.
	"pkg/state": {"pkg/api", "pkg/array", "pkg/scsi"},
	// The control path: the one driver of the core over the array (its
	// decisions carried out, unit attentions), and around it the
	// observations in and the feed out.
	"pkg/drive": {"pkg/alua", "ownership", "pkg/array", "pkg/scsi"},
	// The control path tests' array (imported by tests only).
	"pkg/drive/drivetest": {"pkg/array", "pkg/media", "pkg/scsi"},
	"pkg/control":         {"pkg/clock", "ownership", "pkg/api", "pkg/array", "pkg/drive", "pkg/fabric", "pkg/scsi"},
	// Cluster mode: the state in etcd, and the link between controllers.
	"pkg/cluster": {"pkg/clock", "pkg/cluster/kv", "pkg/fence"},
	// The store's key-value interface and its in-memory backend (no etcd:
	// a simulation takes it alone).
	"pkg/cluster/kv": {"pkg/clock"},
	"pkg/interlink":  {"pkg/clock"},
	// Network faults for tests on loopback.
	"pkg/faultnet": nil,
	// STONITH: a controller process's identity and its fencers.
	"pkg/fence": nil,
	// The configuration file: the sections their packages own, composed.
	"pkg/config": {"pkg/array", "pkg/cluster", "pkg/control", "pkg/fabric", "pkg/iscsi"},
	// The management surface: views, handlers, transports, metrics.
	"pkg/mgmt": {"ownership", "pkg/api", "pkg/array", "pkg/control", "pkg/fabric", "pkg/reports", "pkg/scsi"},
	// Wiring: the daemon, and the simulation (which wires the same parts
	// without a fabric).
	"pkg/daemon": {"pkg/clock", "pkg/alua", "ownership", "pkg/api", "pkg/array", "pkg/arrayview", "pkg/config", "pkg/control", "pkg/fabric", "pkg/iscsi",
		"pkg/media", "pkg/mgmt", "pkg/scsi", "pkg/state", "tcmu-handler"},
	"pkg/sim": {"pkg/alua", "ownership", "pkg/array", "pkg/arrayview", "pkg/drive", "pkg/media", "pkg/scsi", "pkg/units"},
	// Runs that start a daemon and drive hosts against it.
	"pkg/lab": {"pkg/alua", "pkg/api", "pkg/array", "pkg/config", "pkg/control", "pkg/daemon", "pkg/hosts", "pkg/initiator",
		"pkg/units"},
	"pkg/stress": {"pkg/alua", "pkg/api", "pkg/array", "pkg/config", "pkg/daemon", "pkg/initiator", "pkg/iscsi"},
	// Host qualification: an API client of a running array, as an
	// administrator's tool is.
	"pkg/qualify": {"pkg/alua", "pkg/api"},
	// One controller of a cluster: a daemon for its node, wired to etcd
	// and the interlink; the leader runs the ownership core on its
	// control path.
	"pkg/controller": {"pkg/alua", "ownership", "pkg/api", "pkg/array", "pkg/cache", "pkg/cluster", "pkg/cluster/kv", "pkg/config", "pkg/control", "pkg/fence", "pkg/media",
		"pkg/daemon", "pkg/interlink"},
	// The real controllers of a cluster in one synctest bubble, under
	// scripted faults (the cluster seeds).
	"pkg/clustersim": {"pkg/cluster", "pkg/cluster/kv", "pkg/config", "pkg/controller", "pkg/daemon", "pkg/fence", "pkg/initiator",
		"pkg/lab", "pkg/memnet", "pkg/clock"},
	"cmd/aluad": {"ownership", "pkg/alua", "pkg/api", "pkg/array", "pkg/cluster", "pkg/clustersim", "pkg/config", "pkg/controller", "pkg/daemon", "pkg/lab", "pkg/qualify", "pkg/reports", "pkg/sim",
		"pkg/state", "pkg/stress"},
	// The QEMU lab talks to the array through the API only (qualify is
	// an API client).
	"cluster-tests/agentproto":        nil,
	"cluster-tests/agent":             {"cluster-tests/agentproto"},
	"cluster-tests/qemulab":           {"cluster-tests/agentproto", "pkg/api", "pkg/qualify"},
	"cluster-tests/cmd/qemulab":       {"cluster-tests/qemulab", "pkg/qualify"},
	"cluster-tests/cmd/qemu-boot":     {"cluster-tests/qemulab"},
	"cluster-tests/vagrantlab":        {"cluster-tests/qemulab", "pkg/api"},
	"cluster-tests/cmd/vagrant-smoke": {"cluster-tests/vagrantlab"},
	// Independent checks and benchmarks.
	"test/conformance":     nil,
	"test/bench/writeload": {"pkg/initiator"},
}

// imports reads the aluad imports of every package directory under root
// (non-test sources; testdata and hidden directories skipped).
func imports(t *testing.T, root string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "results") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		if out[pkg] == nil {
			out[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, module) {
				out[pkg][strings.TrimPrefix(path, module)] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the module root")
	got := imports(t, root)
	require.GreaterOrEqual(t, len(got), 20, "the module's packages were not found")
	for pkg, imps := range got {
		may, known := allowed[pkg]
		if !known {
			t.Errorf("package %s is not in the layers table: place it (what may it import?)", pkg)
			continue
		}
		ok := map[string]bool{}
		for _, m := range may {
			ok[m] = true
		}
		var bad []string
		for imp := range imps {
			if !ok[imp] {
				bad = append(bad, imp)
			}
		}
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%s imports %v, which its layer does not allow", pkg, bad)
		}
	}
	for pkg := range allowed {
		if _, ok := got[pkg]; !ok {
			t.Errorf("the layers table names %s, which has no sources", pkg)
		}
	}
}

// The check itself: a package reaching up a layer is caught.
func TestLayersCatchAnUpwardImport(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "pkg/scsi"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pkg/scsi/a.go"),
		[]byte("package scsi\n\nimport _ \""+module+"pkg/array\"\n"), 0o644))
	got := imports(t, dir)
	require.True(t, got["pkg/scsi"]["pkg/array"])
	require.NotContains(t, allowed["pkg/scsi"], "pkg/array", "the table must refuse it")
}
