package daemon

// The daemon's part of the saved state (pkg/state keeps the directory):
// what goes into the file, and how a loaded file is checked against the
// config and applied, all or nothing.
//
// A crash in the middle of a move leaves the last completed owners on
// file (the state is saved after each switch), so the restart puts the
// LUN back where it was before the move began; both nodes share the back
// end, so nothing written is on the wrong side.

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
	"github.com/aluad/aluad/pkg/state"
)

// stateDirty asks the saver to write the state.
func (d *Daemon) stateDirty() {
	if d.state != nil {
		d.state.Dirty()
	}
}

// Snapshot is the state as it stands now.
func (d *Daemon) Snapshot() state.State {
	cfg := d.Array.Config()
	s := state.State{Version: state.Version, Saved: d.now().UTC(), Target: cfg.Target, Owners: map[string]array.SavedOwner{},
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
	if d.state != nil {
		d.state.Fill(&s)
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
	if d.state == nil {
		return nil
	}
	return d.state.Save(d.Snapshot)
}

// recordReport adds a raise or clear to the history.
func (d *Daemon) recordReport(r api.ReportInfo) {
	if d.state != nil {
		d.state.Record(r)
	}
}

// ReportHistory returns the saved report history.
func (d *Daemon) ReportHistory() []api.ReportRecord {
	if d.state == nil {
		return []api.ReportRecord{}
	}
	return d.state.History()
}

// openState loads dir's state into the array before anything is served.
// A damaged or inconsistent file is moved aside and reported; the
// previous generation is tried next, then the config alone.
func (d *Daemon) openState(dir string) error {
	st, err := state.Open(dir, d.Array.Config().Mappings, d.log, d.now)
	if err != nil {
		return err
	}
	d.state = st
	if problems := st.Load(d.applyState); problems != "" {
		d.Events.Add(api.Event{Kind: api.EventState, Reason: "state file rejected: " + problems})
	}
	return nil
}

// applyState checks a decoded state against the config and applies it:
// all or nothing.
func (d *Daemon) applyState(s state.State) error {
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
