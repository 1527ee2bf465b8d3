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
	"strings"
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
		Preferred: map[string]string{}, Mappings: cfg.Mappings, Reports: []api.ReportRecord{}, Hosts: SaveHosts(cfg.Hosts)}
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
	// Hosts and mappings go together (mappings name hosts and groups):
	// both from the state file, or, if the config file's hosts or
	// mappings changed since it was saved, both from the config file. A
	// saved pair that does not build a LUN map any more falls back to the
	// config file's too: the owners, reservations and reports it keeps
	// are not lost over it.
	hosts, mappings := cfg.Hosts, cfg.Mappings
	switch {
	case !reflect.DeepEqual(normMappings(s.ConfigMappings), normMappings(cfg.Mappings)):
		log.Warn("the config file's mappings changed since the state was saved: using the config file's hosts and mappings; host and mapping changes made live since are dropped")
	case s.Hosts != nil && !slices.EqualFunc(s.ConfigHosts, SaveHosts(cfg.Hosts), SavedHost.equal):
		log.Warn("the config file's hosts changed since the state was saved: using the config file's hosts and mappings; host and mapping changes made live since are dropped")
	default:
		if s.Hosts != nil { // a file from before hosts were kept has the config's
			hosts = restoreHosts(s.Hosts, cfg.Hosts)
		}
		mappings = s.Mappings
	}
	check := cfg
	check.Mappings, check.Hosts = mappings, hosts
	if _, err := array.BuildLUNMap(check); err != nil {
		log.Warn("the saved hosts and mappings do not fit the config file's LUNs: using the config file's", "err", err)
		hosts, mappings = cfg.Hosts, cfg.Mappings
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
	if err := arr.RestoreAccess(hosts, mappings); err != nil {
		log.Warn("the saved hosts and mappings were refused: using the config file's", "err", err)
		if err := arr.RestoreAccess(cfg.Hosts, cfg.Mappings); err != nil {
			return err
		}
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

// SavedHost is a declared host as the state file keeps it. CHAP
// credentials are not kept there: they come from the config file, by the
// host's name.
type SavedHost struct {
	Name       string   `json:"name"`
	Type       string   `json:"type"`
	Initiators []string `json:"initiators"`
	Group      string   `json:"group,omitempty"`
}

func (h SavedHost) equal(o SavedHost) bool {
	return h.Name == o.Name && h.Type == o.Type && h.Group == o.Group && slices.Equal(h.Initiators, o.Initiators)
}

// SaveHosts is hosts as the state file keeps them, in name order.
func SaveHosts(hs []array.HostConfig) []SavedHost {
	out := []SavedHost{}
	for _, h := range hs {
		out = append(out, SavedHost{Name: h.Name, Type: h.Type, Initiators: slices.Clone(h.Initiators), Group: h.Group})
	}
	slices.SortFunc(out, func(a, b SavedHost) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// restoreHosts is the saved hosts, each with the config file's CHAP
// credentials for its name.
func restoreHosts(saved []SavedHost, cfg []array.HostConfig) []array.HostConfig {
	chap := map[string]*array.CHAPConfig{}
	for _, h := range cfg {
		chap[h.Name] = h.CHAP
	}
	out := []array.HostConfig{}
	for _, h := range saved {
		out = append(out, array.HostConfig{Name: h.Name, Type: h.Type, Initiators: slices.Clone(h.Initiators), Group: h.Group,
			CHAP: chap[h.Name]})
	}
	return out
}
