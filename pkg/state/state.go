// Package state owns what an aluad keeps across restarts in its state
// directory: the array's identity (the id every LUN's WWID derives from),
// the claim on its data and state directories (one array per directory,
// claim.go), and the state file (owners and their generations, the
// declared hosts and the LUN map as changed live, node capacities, the
// report history, saved mode pages and reservations),
// written whole and atomically with a checksum, and loaded with a safe
// fallback when it is damaged. What goes into the file and how it is
// applied is the daemon's; this package keeps it.
package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
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

// Version is the state file's format version.
const Version = 1

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
	// Hosts are the declared hosts as they stand (changed live by the
	// operator); ConfigHosts the config file's at the time, so an edited
	// config file is told from live changes. Null in a file from before
	// hosts were kept: the config file's hosts then.
	Hosts       []SavedHost `json:"hosts"`
	ConfigHosts []SavedHost `json:"config_hosts"`
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

// HistoryLen bounds the saved report history.
const HistoryLen = 1000

// stateEnvelope is the file: the payload and its checksum.
type stateEnvelope struct {
	Format  string          `json:"format"`
	SHA256  string          `json:"sha256"`
	Payload json.RawMessage `json:"payload"`
}

const stateFormat = "aluad-state"

// Encode serialises a state with its checksum.
func Encode(s State) ([]byte, error) {
	p, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(p)
	return json.MarshalIndent(stateEnvelope{Format: stateFormat, SHA256: hex.EncodeToString(sum[:]), Payload: p}, "", " ")
}

// Decode parses and checks a state file.
func Decode(b []byte) (State, error) {
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
	if s.Version != Version {
		return State{}, fmt.Errorf("state version %d, this aluad reads %d", s.Version, Version)
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

// Store keeps one state directory: changes mark it dirty and Run writes
// the newest snapshot; it also holds what the file carries that the
// array does not (the report history, node capacities set at run time,
// the config file's mappings when loaded).
type Store struct {
	dir string
	log *slog.Logger
	now func() time.Time
	// wake: a save is wanted.
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
	// configMappings and configHosts are the config file's.
	configMappings []array.MappingConfig
	configHosts    []SavedHost
	saves          int
}

// Open makes the state directory (if need be) and a store on it.
func Open(dir string, cfg array.Config, log *slog.Logger, now func() time.Time) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	configMappings := cfg.Mappings
	if configMappings == nil {
		configMappings = []array.MappingConfig{}
	}
	return &Store{dir: dir, log: log, now: now, wake: make(chan struct{}, 1), configMappings: configMappings,
		configHosts: SaveHosts(cfg.Hosts)}, nil
}

func (s *Store) path() string { return filepath.Join(s.dir, "state.json") }

// Load applies the newest good state file: state.json, else its previous
// generation. A file that does not decode, or that apply refuses (all or
// nothing), is moved aside (state.json.corrupt-<time>) and said so; the
// problems are returned ("" when none) and shown by Info until restart.
// With no good file the config alone decides.
func (s *Store) Load(apply func(State) error) string {
	var problems []string
	for _, name := range []string{"state.json", "state.json.prev"} {
		p := filepath.Join(s.dir, name)
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil {
			var st State
			if st, err = Decode(b); err == nil {
				err = apply(st)
			}
			if err == nil {
				s.mu.Lock()
				s.reports = append([]api.ReportRecord{}, st.Reports...)
				s.capacity = st.Capacity
				s.mu.Unlock()
			}
		}
		if err == nil {
			if len(problems) > 0 {
				s.log.Error("state restored from the previous generation", "file", p)
			}
			break
		}
		aside := fmt.Sprintf("%s.corrupt-%d", p, s.now().Unix())
		os.Rename(p, aside)
		problems = append(problems, fmt.Sprintf("%s: %v (moved to %s)", p, err, filepath.Base(aside)))
		s.log.Error("state file rejected", "file", p, "err", err, "moved_to", aside)
	}
	if len(problems) == 0 {
		return ""
	}
	s.mu.Lock()
	s.loadErr = fmt.Sprint(problems)
	s.mu.Unlock()
	return s.loadErr
}

// Dirty asks Run to save.
func (s *Store) Dirty() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run saves whenever the store is dirty, until done.
func (s *Store) Run(done <-chan struct{}, snapshot func() State) {
	for {
		select {
		case <-done:
			return
		case <-s.wake:
			s.Save(snapshot)
		}
	}
}

// Fill adds to st what the store holds: the report history, the node
// capacities, the config file's mappings.
func (s *Store) Fill(st *State) {
	s.mu.Lock()
	st.Reports = append(st.Reports, s.reports...)
	if len(s.capacity) > 0 {
		st.Capacity = maps.Clone(s.capacity)
	}
	st.ConfigMappings = s.configMappings
	st.ConfigHosts = s.configHosts
	s.mu.Unlock()
}

// Save writes the state snapshot returns now (one save at a time, so an
// older snapshot never overwrites a newer one).
func (s *Store) Save(snapshot func() State) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b, err := Encode(snapshot())
	if err == nil {
		err = WriteFileAtomic(s.path(), b, s.path()+".prev")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.saveErr = err.Error()
		s.log.Error("saving state failed", "dir", s.dir, "err", err)
		return err
	}
	s.saveErr = ""
	s.saves++
	return nil
}

// Record adds a raise or clear to the report history (the newest
// HistoryLen are kept) and marks the store dirty.
func (s *Store) Record(r api.ReportInfo) {
	s.mu.Lock()
	s.reports = append(s.reports, api.ReportRecord{Time: s.now().UTC(), ReportInfo: r})
	if n := len(s.reports); n > HistoryLen {
		s.reports = slices.Clone(s.reports[n-HistoryLen:])
	}
	s.mu.Unlock()
	s.Dirty()
}

// History is the report history, oldest first.
func (s *Store) History() []api.ReportRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.ReportRecord{}, s.reports...)
}

// Capacities are the node capacities set at run time.
func (s *Store) Capacities() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.capacity)
}

// SetCapacity keeps a node's capacity and marks the store dirty.
func (s *Store) SetCapacity(node string, c float64) {
	s.mu.Lock()
	if s.capacity == nil {
		s.capacity = map[string]float64{}
	}
	s.capacity[node] = c
	s.mu.Unlock()
	s.Dirty()
}

// Info is the store's health for the status view.
func (s *Store) Info() *api.StateInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &api.StateInfo{Dir: s.dir, LoadError: s.loadErr, SaveError: s.saveErr, Saves: s.saves}
}
