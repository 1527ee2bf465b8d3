package state

// What goes into the state file from the array and the device server, and
// how a loaded file is checked against the config and applied.
//
// A crash in the middle of a move leaves the last completed owners on
// file (the state is saved after each switch), so the restart puts the
// LUN back where it was before the move began; both nodes share the back
// end, so nothing written is on the wrong side.

import (
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/scsi"
)

// Take is the array's and the device server's state as it stands now
// (without what a Store holds: see Fill).
func Take(arr *array.Array, srv *scsi.Server, now time.Time) State {
	cfg := arr.Config()
	s := State{Version: Version, Saved: now.UTC(), Target: cfg.Target, Owners: map[string]array.SavedOwner{},
		Preferred: map[string]string{}, Mappings: arr.Mappings(), Reports: []api.ReportRecord{}}
	for _, l := range arr.LUNs {
		id := strconv.FormatUint(l.ID, 10)
		s.Owners[id] = array.SavedOwner{Node: l.Owner().Name, Gen: l.Generation()}
		s.Preferred[id] = l.Preferred.Name
		if lu := srv.LU(l.ID); lu != nil {
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
	if s.Mappings == nil {
		s.Mappings = []array.MappingConfig{}
	}
	if s.ConfigMappings == nil {
		s.ConfigMappings = []array.MappingConfig{}
	}
	return s
}

// Apply checks a decoded state against the array's config and applies
// it to the array and the device server: all or nothing.
func Apply(arr *array.Array, srv *scsi.Server, log *slog.Logger, s State) error {
	cfg := arr.Config()
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
		if arr.LUN(id) == nil || arr.Node(o.Node) == nil {
			log.Warn("saved owner no longer applies (the config changed); the LUN starts on its preferred owner",
				"lun", id, "saved_owner", o.Node)
			continue
		}
		owners[id] = o
	}
	for id, n := range s.Capacity {
		if n <= 0 {
			return fmt.Errorf("capacity entry for %q: not positive", id)
		}
		if arr.Node(id) == nil {
			delete(s.Capacity, id)
		}
	}
	mappings := s.Mappings
	if !reflect.DeepEqual(normMappings(s.ConfigMappings), normMappings(cfg.Mappings)) {
		log.Warn("the config file's mappings changed since the state was saved: using the config file's; mapping changes made through the API since are dropped")
		mappings = cfg.Mappings
	}
	check := cfg
	check.Mappings = mappings
	if _, err := array.BuildLUNMap(check); err != nil {
		return fmt.Errorf("saved mappings: %w", err)
	}
	for _, l := range arr.LUNs {
		if p, ok := s.Preferred[strconv.FormatUint(l.ID, 10)]; ok && p != l.Preferred.Name {
			log.Warn("the config file changed a preferred owner since the state was saved; the config file decides",
				"lun", l.ID, "saved", p, "config", l.Preferred.Name)
		}
	}
	modes, err := perLU(srv, "mode", s.Mode)
	if err != nil {
		return err
	}
	prs, err := perLU(srv, "reservation", s.PR)
	if err != nil {
		return err
	}
	if err := arr.RestoreOwners(owners); err != nil {
		return err
	}
	for id, m := range modes {
		srv.LU(id).RestoreMode(m)
	}
	for id, pr := range prs {
		srv.LU(id).RestorePR(pr)
	}
	if _, err := arr.SetMappings(mappings); err != nil {
		return err
	}
	log.Info("state restored", "saved", s.Saved, "luns", len(owners), "mappings", len(mappings), "reports", len(s.Reports))
	return nil
}

// perLU reads a saved per-LUN map keyed by LUN id, keeping the LUNs the
// device server still has (a LUN the config dropped is not an error).
func perLU[T any](srv *scsi.Server, what string, m map[string]T) (map[uint64]T, error) {
	out := map[uint64]T{}
	for k, v := range m {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s entry %q: not a LUN id", what, k)
		}
		if srv.LU(id) != nil {
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
