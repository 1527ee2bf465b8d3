package daemon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	stdmaps "maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// Persistent state: what an array must come back with after a restart or
// a crash. Owners and their generations, the LUN map, node capacities
// set at run time and the history of raised and cleared reports.
//
// The file is written whole and atomically: a new file beside it, synced,
// the current one kept as state.json.prev, the new one renamed over it,
// the directory synced. A crash at any point leaves a complete current or
// previous file. Each file carries the SHA-256 of its payload; on load a
// file that fails the check, or names a LUN or node the config lacks, is
// moved aside (state.json.corrupt-<time>), said so loudly (log, event,
// status) and the previous file is tried, then the config alone: a safe
// start that never silently resets.
//
// A crash in the middle of a move leaves the last completed owners on
// file (the state is saved after each switch), so the restart puts the
// LUN back where it was before the move began; both nodes share the back
// end, so nothing written is on the wrong side.

// StateVersion is the state file's format version.
const StateVersion = 1

// State is the saved state.
type State struct {
	Version int       `json:"version"`
	Saved   time.Time `json:"saved"`
	Target  string    `json:"target"`
	// Owners per LUN id.
	Owners map[string]array.SavedOwner `json:"owners"`
	// Preferred owners as configured when saved (the config decides them).
	Preferred map[string]string `json:"preferred"`
	// Mappings is the live LUN map; ConfigMappings the config file's at
	// the time, so an edited config file is told from API changes.
	Mappings       []array.MappingConfig `json:"mappings"`
	ConfigMappings []array.MappingConfig `json:"config_mappings"`
	// Capacity per node, where set at run time.
	Capacity map[string]float64 `json:"capacity,omitempty"`
	// Reports is the report history (raised and cleared), oldest first.
	Reports []api.ReportRecord `json:"reports"`
	// Mode holds, per LUN id, the mode parameters a host saved (MODE
	// SELECT with SP=1), where they differ from the defaults.
	Mode map[string]scsi.ModeParams `json:"mode,omitempty"`
	// PR holds, per LUN id, the persistent reservations registered with
	// APTPL=1 (kept through a restart, as through a power loss).
	PR map[string]scsi.SavedPR `json:"pr,omitempty"`
}

// reportHistoryLen bounds the saved report history.
const reportHistoryLen = 1000

// stateEnvelope is the file: the payload and its checksum.
type stateEnvelope struct {
	Format  string          `json:"format"`
	SHA256  string          `json:"sha256"`
	Payload json.RawMessage `json:"payload"`
}

const stateFormat = "aluad-state"

// EncodeState serialises a state with its checksum.
func EncodeState(s State) ([]byte, error) {
	p, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(p)
	return json.MarshalIndent(stateEnvelope{Format: stateFormat, SHA256: hex.EncodeToString(sum[:]), Payload: p}, "", " ")
}

// DecodeState parses and checks a state file.
func DecodeState(b []byte) (State, error) {
	var env stateEnvelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return State{}, fmt.Errorf("not a state file: %w", err)
	}
	if env.Format != stateFormat {
		return State{}, fmt.Errorf("not a state file (format %q)", env.Format)
	}
	// The checksum is over the payload's compact form, whatever the
	// indentation it was written with.
	var compact bytes.Buffer
	if err := json.Compact(&compact, env.Payload); err != nil {
		return State{}, fmt.Errorf("payload: %w", err)
	}
	sum := sha256.Sum256(compact.Bytes())
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return State{}, errors.New("checksum mismatch: the file is damaged")
	}
	var s State
	dec = json.NewDecoder(bytes.NewReader(compact.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return State{}, fmt.Errorf("payload: %w", err)
	}
	if s.Version != StateVersion {
		return State{}, fmt.Errorf("state version %d, this aluad reads %d", s.Version, StateVersion)
	}
	return s, nil
}

// WriteFileAtomic writes path so that a crash leaves the old or the new
// content, never a mix: a temporary file in the same directory, synced,
// renamed over path, and the directory synced. keep, if set, receives the
// old file first (its previous generation).
func WriteFileAtomic(path string, data []byte, keep string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if keep != "" {
		if err := os.Link(path, keep+".new"); err == nil {
			if err := os.Rename(keep+".new", keep); err != nil {
				return err
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// stateStore saves the daemon's state in the background: changes mark it
// dirty, one goroutine writes the newest snapshot.
type stateStore struct {
	dir  string
	wake chan struct{}
	// wmu serialises saves (snapshot and write), so a newer snapshot is
	// never overwritten by an older one.
	wmu sync.Mutex
	mu  sync.Mutex // guards the fields below
	// loadErr is what went wrong on load (shown in status until restart).
	loadErr string
	// saveErr is the last save failure ("" when the last save worked).
	saveErr  string
	reports  []api.ReportRecord
	capacity map[string]float64
	// configMappings are the config file's mappings.
	configMappings []array.MappingConfig
	saves          int
}

func (s *stateStore) path() string { return filepath.Join(s.dir, "state.json") }

// stateDirty asks the saver to write the state.
func (d *Daemon) stateDirty() {
	if d.state == nil {
		return
	}
	select {
	case d.state.wake <- struct{}{}:
	default:
	}
}

// Snapshot is the state as it stands now.
func (d *Daemon) Snapshot() State {
	cfg := d.Array.Config()
	s := State{Version: StateVersion, Saved: d.now().UTC(), Target: cfg.Target, Owners: map[string]array.SavedOwner{},
		Preferred: map[string]string{}, Mappings: d.Array.Mappings(), Reports: []api.ReportRecord{}}
	for _, l := range d.Array.LUNs {
		id := strconv.FormatUint(l.ID, 10)
		s.Owners[id] = array.SavedOwner{Node: l.Owner().Name, Gen: l.Generation()}
		s.Preferred[id] = l.Preferred.Name
		if lu := d.SCSI.LU(l.ID); lu != nil {
			if m := lu.SavedMode(); m != scsi.DefaultModeParams() {
				if s.Mode == nil {
					s.Mode = map[string]scsi.ModeParams{}
				}
				s.Mode[id] = m
			}
			if pr := lu.SavedPR(); pr != nil {
				if s.PR == nil {
					s.PR = map[string]scsi.SavedPR{}
				}
				s.PR[id] = *pr
			}
		}
	}
	if st := d.state; st != nil {
		st.mu.Lock()
		s.Reports = append(s.Reports, st.reports...)
		if len(st.capacity) > 0 {
			s.Capacity = stdmaps.Clone(st.capacity)
		}
		s.ConfigMappings = st.configMappings
		st.mu.Unlock()
	}
	if s.Mappings == nil {
		s.Mappings = []array.MappingConfig{}
	}
	if s.ConfigMappings == nil {
		s.ConfigMappings = []array.MappingConfig{}
	}
	return s
}

// SaveState writes the state now.
func (d *Daemon) SaveState() error {
	st := d.state
	if st == nil {
		return nil
	}
	st.wmu.Lock()
	defer st.wmu.Unlock()
	b, err := EncodeState(d.Snapshot())
	if err == nil {
		err = WriteFileAtomic(st.path(), b, st.path()+".prev")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.saveErr = err.Error()
		d.log.Error("saving state failed", "dir", st.dir, "err", err)
		return err
	}
	st.saveErr = ""
	st.saves++
	return nil
}

func (d *Daemon) stateLoop() {
	defer d.wg.Done()
	for {
		select {
		case <-d.done:
			return
		case <-d.state.wake:
			d.SaveState()
		}
	}
}

// recordReport adds a raise or clear to the history.
func (d *Daemon) recordReport(r api.ReportInfo) {
	if d.state == nil {
		return
	}
	d.state.mu.Lock()
	d.state.reports = append(d.state.reports, api.ReportRecord{Time: d.now().UTC(), ReportInfo: r})
	if n := len(d.state.reports); n > reportHistoryLen {
		d.state.reports = slices.Clone(d.state.reports[n-reportHistoryLen:])
	}
	d.state.mu.Unlock()
	d.stateDirty()
}

// ReportHistory returns the saved report history.
func (d *Daemon) ReportHistory() []api.ReportRecord {
	if d.state == nil {
		return []api.ReportRecord{}
	}
	d.state.mu.Lock()
	defer d.state.mu.Unlock()
	return append([]api.ReportRecord{}, d.state.reports...)
}

// openState loads dir's state into the array before anything is served.
// A damaged or inconsistent file is moved aside and reported; the
// previous generation is tried next, then the config alone.
func (d *Daemon) openState(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	st := &stateStore{dir: dir, wake: make(chan struct{}, 1), configMappings: d.Array.Config().Mappings}
	if st.configMappings == nil {
		st.configMappings = []array.MappingConfig{}
	}
	d.state = st
	var problems []string
	for _, name := range []string{"state.json", "state.json.prev"} {
		p := filepath.Join(dir, name)
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			var s State
			if s, err = DecodeState(b); err == nil {
				err = d.applyState(s)
			}
		}
		if err == nil {
			if len(problems) > 0 {
				d.log.Error("state restored from the previous generation", "file", p)
			}
			break
		}
		aside := fmt.Sprintf("%s.corrupt-%d", p, d.now().Unix())
		os.Rename(p, aside)
		problems = append(problems, fmt.Sprintf("%s: %v (moved to %s)", p, err, filepath.Base(aside)))
		d.log.Error("state file rejected", "file", p, "err", err, "moved_to", aside)
	}
	if len(problems) > 0 {
		st.loadErr = fmt.Sprint(problems)
		d.Events.Add(api.Event{Kind: api.EventState, Reason: "state file rejected: " + st.loadErr})
	}
	return nil
}

// applyState checks a decoded state against the config and applies it:
// all or nothing.
func (d *Daemon) applyState(s State) error {
	cfg := d.Array.Config()
	if s.Target != cfg.Target {
		return fmt.Errorf("saved for target %s, this array is %s", s.Target, cfg.Target)
	}
	owners := map[uint64]array.SavedOwner{}
	for k, o := range s.Owners {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return fmt.Errorf("owner entry %q: not a LUN id", k)
		}
		// A LUN or node the config no longer has is a config edit, not
		// damage: the LUN starts on its preferred owner.
		if d.Array.LUN(id) == nil || d.Array.Node(o.Node) == nil {
			d.log.Warn("saved owner no longer applies (the config changed); the LUN starts on its preferred owner",
				"lun", id, "saved_owner", o.Node)
			continue
		}
		owners[id] = o
	}
	for id, n := range s.Capacity {
		if n <= 0 {
			return fmt.Errorf("capacity entry for %q: not positive", id)
		}
		if d.Array.Node(id) == nil {
			delete(s.Capacity, id)
		}
	}
	mappings := s.Mappings
	if !reflect.DeepEqual(normMappings(s.ConfigMappings), normMappings(cfg.Mappings)) {
		d.log.Warn("the config file's mappings changed since the state was saved: using the config file's; mapping changes made through the API since are dropped")
		mappings = cfg.Mappings
	}
	check := cfg
	check.Mappings = mappings
	if _, err := array.BuildLUNMap(check); err != nil {
		return fmt.Errorf("saved mappings: %w", err)
	}
	for _, l := range d.Array.LUNs {
		if p, ok := s.Preferred[strconv.FormatUint(l.ID, 10)]; ok && p != l.Preferred.Name {
			d.log.Warn("the config file changed a preferred owner since the state was saved; the config file decides",
				"lun", l.ID, "saved", p, "config", l.Preferred.Name)
		}
	}
	modes, err := perLU(d, "mode", s.Mode)
	if err != nil {
		return err
	}
	prs, err := perLU(d, "reservation", s.PR)
	if err != nil {
		return err
	}
	if err := d.Array.RestoreOwners(owners); err != nil {
		return err
	}
	for id, m := range modes {
		d.SCSI.LU(id).RestoreMode(m)
	}
	for id, pr := range prs {
		d.SCSI.LU(id).RestorePR(pr)
	}
	if _, err := d.Array.SetMappings(mappings); err != nil {
		return err
	}
	d.state.reports = append([]api.ReportRecord{}, s.Reports...)
	d.state.capacity = s.Capacity
	d.log.Info("state restored", "saved", s.Saved, "luns", len(owners), "mappings", len(mappings), "reports", len(s.Reports))
	return nil
}

// perLU reads a saved per-LUN map keyed by LUN id, keeping the LUNs the
// device server still has (a LUN the config dropped is not an error).
func perLU[T any](d *Daemon, what string, m map[string]T) (map[uint64]T, error) {
	out := map[uint64]T{}
	for k, v := range m {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s entry %q: not a LUN id", what, k)
		}
		if d.SCSI.LU(id) != nil {
			out[id] = v
		}
	}
	return out, nil
}

func normMappings(ms []array.MappingConfig) []array.MappingConfig {
	if len(ms) == 0 {
		return nil
	}
	out := slices.Clone(ms)
	slices.SortFunc(out, func(a, b array.MappingConfig) int {
		if a.LUN != b.LUN {
			return int(a.LUN) - int(b.LUN)
		}
		switch {
		case a.Target() < b.Target():
			return -1
		case a.Target() > b.Target():
			return 1
		}
		return 0
	})
	return out
}
