package daemon

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/media"
	"github.com/aluad/aluad/pkg/state"
)

// stateDaemon starts a daemon with a state directory, host h1 declared.
func stateDaemon(t *testing.T, dataDir, stateDir string, wrap func(uint64, media.Store) media.Store) *Daemon {
	t.Helper()
	cfg := testConfig(dataDir)
	cfg.Hosts = []array.HostConfig{{Name: "h1", Initiators: []string{hostIQN}}, {Name: "h2", Initiators: []string{unknownIQN}}}
	require.NoError(t, cfg.Validate())
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1, StateDir: stateDir, WrapStore: wrap})
	require.NoError(t, err)
	return d
}

// comparable strips the save time.
func comparable(s state.State) state.State {
	s.Saved = time.Time{}
	return s
}

// TestStateSurvivesRestart: owners and generations, the LUN map, node
// capacities and the report history are the same after a restart.
func TestStateSurvivesRestart(t *testing.T) {
	data, stateDir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	d := stateDaemon(t, data, stateDir, nil)
	_, err := d.Array.Move([]uint64{0, 2}, "b", alua.CauseManual)
	require.NoError(t, err)
	_, err = d.Array.Move([]uint64{2}, "a", alua.CauseManual)
	require.NoError(t, err)
	_, err = d.Map(array.MappingConfig{LUN: 3, Host: "h1"}, "test")
	require.NoError(t, err)
	require.NoError(t, d.SetNodeCapacity("b", 42))
	d.recordReport(api.ReportInfo{Condition: string(ownership.HostRedundancyLost), Raised: true, Host: "h1", Node: "a"})
	d.recordReport(api.ReportInfo{Condition: string(ownership.HostRedundancyLost), Raised: false, Host: "h1", Node: "a"})
	before := comparable(d.Snapshot())
	require.NoError(t, d.Stop(5*time.Second))
	require.Equal(t, "b", before.Owners["0"].Node)
	require.Equal(t, uint64(2), before.Owners["2"].Gen)

	d2 := stateDaemon(t, data, stateDir, nil)
	defer d2.Stop(5 * time.Second)
	require.Equal(t, before, comparable(d2.Snapshot()))
	require.Equal(t, "b", d2.Array.LUN(0).Owner().Name, "the array serves LUN 0 from b again")
	require.Empty(t, d2.Status().State.LoadError)
	require.Len(t, d2.ReportHistory(), 2)
	require.Equal(t, map[uint64]uint64{3: 3}, d2.Array.LUNMap().Sees(hostIQN))
}

// TestStateAfterCrashMidTransition: the state on disk while a move is in
// its flush phase is the state before the move; an array started from it
// (as after a crash at that instant) has every LUN where it was before,
// and a consistent map.
func TestStateAfterCrashMidTransition(t *testing.T) {
	data, stateDir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	var mu sync.Mutex
	stores := map[uint64]*faultStore{}
	d := stateDaemon(t, data, stateDir, func(l uint64, s media.Store) media.Store {
		fs := &faultStore{Store: s}
		mu.Lock()
		stores[l] = fs
		mu.Unlock()
		return fs
	})
	_, err := d.Map(array.MappingConfig{LUN: 1, Host: "h1", HostLUN: u64p(9)}, "test")
	require.NoError(t, err)
	require.NoError(t, d.SaveState())
	before := comparable(d.Snapshot())

	// LUN 0 moves a -> b; its flush blocks, so the move stops mid-way.
	hold, entered := make(chan struct{}), make(chan struct{})
	mu.Lock()
	stores[0].hold, stores[0].entered = hold, entered
	mu.Unlock()
	done := make(chan error, 1)
	go func() { _, err := d.Array.Move([]uint64{0}, "b", alua.CauseManual); done <- err }()
	<-entered
	require.Equal(t, "a", d.Array.LUN(0).Owner().Name, "mid-way: flushing, not yet switched")
	require.NoError(t, d.SaveState()) // what the saver writes when it runs mid-move

	// The crash: what is on disk now is all a restart has.
	crashed := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.MkdirAll(crashed, 0o700))
	for _, f := range []string{"state.json", "state.json.prev"} {
		if b, err := os.ReadFile(filepath.Join(stateDir, f)); err == nil {
			require.NoError(t, os.WriteFile(filepath.Join(crashed, f), b, 0o600))
		}
	}
	// A torn temporary file from a save cut short is ignored.
	require.NoError(t, os.WriteFile(filepath.Join(crashed, "state.json.tmp-123"), []byte(`{"format":"alu`), 0o600))

	d2 := stateDaemon(t, t.TempDir(), crashed, nil)
	require.Equal(t, before, comparable(d2.Snapshot()), "the state from before the move")
	require.Equal(t, "a", d2.Array.LUN(0).Owner().Name)
	require.False(t, d2.Array.LUN(0).Moving())
	require.Empty(t, d2.Status().State.LoadError)
	require.NoError(t, d2.Stop(5*time.Second))

	close(hold)
	require.NoError(t, <-done)
	require.NoError(t, d.Stop(5*time.Second))
	// After the move completed and a clean stop, the file has it.
	d3 := stateDaemon(t, data, stateDir, nil)
	defer d3.Stop(5 * time.Second)
	require.Equal(t, "b", d3.Array.LUN(0).Owner().Name)
}

func u64p(v uint64) *uint64 { return &v }

// TestCorruptState: a damaged file is moved aside and said so (status,
// event), the previous generation is used; with both damaged the array
// starts from the config, still saying so: never a silent reset.
func TestCorruptState(t *testing.T) {
	data, stateDir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	d := stateDaemon(t, data, stateDir, nil)
	_, err := d.Array.Move([]uint64{0}, "b", alua.CauseManual)
	require.NoError(t, err)
	require.NoError(t, d.SaveState())
	_, err = d.Array.Move([]uint64{2}, "b", alua.CauseManual)
	require.NoError(t, err)
	require.NoError(t, d.Stop(5*time.Second)) // state.json: 0,2 on b; .prev: 0 on b

	cur := filepath.Join(stateDir, "state.json")
	b, err := os.ReadFile(cur)
	require.NoError(t, err)
	pb, err := os.ReadFile(cur + ".prev")
	require.NoError(t, err)
	prev, err := state.Decode(pb)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x20
	require.NoError(t, os.WriteFile(cur, b, 0o600))

	d2 := stateDaemon(t, data, stateDir, nil)
	st := d2.Status()
	require.Contains(t, st.State.LoadError, "state.json:")
	require.Equal(t, prev.Owners, d2.Snapshot().Owners, "restored from the previous generation")
	require.Equal(t, "b", d2.Array.LUN(0).Owner().Name)
	ev, _ := d2.Events.Since(0)
	require.Equal(t, "state", ev[0].Kind)
	aside, _ := filepath.Glob(filepath.Join(stateDir, "state.json.corrupt-*"))
	require.Len(t, aside, 1, "the damaged file is kept for inspection")
	require.NoError(t, d2.Stop(5*time.Second))

	for _, f := range []string{"state.json", "state.json.prev"} {
		require.NoError(t, os.WriteFile(filepath.Join(stateDir, f), []byte("garbage"), 0o600))
	}
	d3 := stateDaemon(t, data, stateDir, nil)
	defer d3.Stop(5 * time.Second)
	st = d3.Status()
	require.Contains(t, st.State.LoadError, "state.json.prev:")
	require.Equal(t, "a", d3.Array.LUN(0).Owner().Name, "both damaged: the config's owners")
}

// TestStateConfigMappingsEdited: when the config file's mappings changed
// since the save, the config file's win.
func TestStateConfigMappingsEdited(t *testing.T) {
	data, stateDir := t.TempDir(), filepath.Join(t.TempDir(), "state")
	d := stateDaemon(t, data, stateDir, nil)
	_, err := d.Map(array.MappingConfig{LUN: 3, Host: "h1"}, "test")
	require.NoError(t, err)
	require.NoError(t, d.Stop(5*time.Second))

	cfg := testConfig(data)
	cfg.Hosts = []array.HostConfig{{Name: "h1", Initiators: []string{hostIQN}}, {Name: "h2", Initiators: []string{unknownIQN}}}
	cfg.Mappings = []array.MappingConfig{{LUN: 4, Host: "h2"}}
	require.NoError(t, cfg.Validate())
	d2, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1, StateDir: stateDir})
	require.NoError(t, err)
	defer d2.Stop(5 * time.Second)
	require.Equal(t, []array.MappingConfig{{LUN: 4, Host: "h2"}}, d2.Array.Mappings())
}
