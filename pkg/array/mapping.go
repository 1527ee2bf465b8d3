package array

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// The live LUN map. Mappings change at run time (the API, a restored
// state file); each change builds a new LUNMap from the whole set, so a
// bad change is refused whole and readers never see half of one.

// LUNMap returns the current map.
func (a *Array) LUNMap() *LUNMap { return a.lunMap.Load() }

// Mappings lists the current mappings in order (LUN, then target).
func (a *Array) Mappings() []MappingConfig {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	return append([]MappingConfig(nil), a.mappings...)
}

// SetMappings replaces every mapping at once. It returns the initiators
// whose view changed (the nexuses to tell with 3F/0E).
func (a *Array) SetMappings(ms []MappingConfig) ([]string, error) {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	return a.setMappingsLocked(ms)
}

// Map adds one mapping.
func (a *Array) Map(m MappingConfig) ([]string, error) {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	for _, o := range a.mappings {
		if o.LUN == m.LUN && o.Host == m.Host && o.Group == m.Group {
			return nil, fmt.Errorf("LUN %d is already mapped to %s (at LUN %d)", m.LUN, o.Target(), o.At())
		}
	}
	return a.setMappingsLocked(append(append([]MappingConfig(nil), a.mappings...), m))
}

// Unmap removes the mapping of lun to host, group, or (both empty) all
// hosts.
func (a *Array) Unmap(lun uint64, host, group string) ([]string, error) {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	var rest []MappingConfig
	found := false
	for _, o := range a.mappings {
		if o.LUN == lun && o.Host == host && o.Group == group {
			found = true
			continue
		}
		rest = append(rest, o)
	}
	if !found {
		return nil, fmt.Errorf("LUN %d is not mapped to %s", lun, MappingConfig{Host: host, Group: group}.Target())
	}
	return a.setMappingsLocked(rest)
}

func (a *Array) setMappingsLocked(ms []MappingConfig) ([]string, error) {
	cfg := a.cfg
	cfg.Mappings = ms
	nm, err := BuildLUNMap(cfg)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].LUN != ms[j].LUN {
			return ms[i].LUN < ms[j].LUN
		}
		return ms[i].Target() < ms[j].Target()
	})
	old := a.lunMap.Load()
	a.mappings = ms
	a.lunMap.Store(nm)
	return a.changedInitiators(old, nm), nil
}

// changedInitiators lists the declared initiators whose view differs
// between two maps, and "*" when undeclared initiators' view differs.
func (a *Array) changedInitiators(old, nm *LUNMap) []string {
	if old == nil {
		return nil
	}
	var out []string
	for in := range *a.hosts.Load() {
		if !maps.Equal(old.Sees(in), nm.Sees(in)) {
			out = append(out, in)
		}
	}
	const probe = "iqn.0000-00.invalid:undeclared"
	if !maps.Equal(old.Sees(probe), nm.Sees(probe)) {
		out = append(out, "*")
	}
	sort.Strings(out)
	return out
}

// Affected turns changedInitiators' answer into a test on initiator names.
func (a *Array) Affected(changed []string) func(initiator string) bool {
	set := map[string]bool{}
	for _, c := range changed {
		set[c] = true
	}
	return func(in string) bool {
		in = strings.ToLower(in)
		if set[in] {
			return true
		}
		_, declared := (*a.hosts.Load())[in]
		return !declared && set["*"]
	}
}

// SavedOwner is a LUN's owner and ownership generation as a state file
// keeps them.
type SavedOwner struct {
	Node string `json:"node"`
	Gen  uint64 `json:"generation"`
}

// RestoreOwners puts LUNs back on the owners a saved state names, before
// any host has logged in: no transition, no unit attention, no cache work
// (caches start empty). It refuses the whole set if one entry names an
// unknown LUN or node, or a LUN is moving.
func (a *Array) RestoreOwners(owners map[uint64]SavedOwner) error {
	for id, o := range owners {
		l := a.LUN(id)
		if l == nil {
			return fmt.Errorf("saved owner of LUN %d: no such LUN", id)
		}
		if a.Node(o.Node) == nil {
			return fmt.Errorf("saved owner of LUN %d: no node %q", id, o.Node)
		}
		if l.Moving() {
			return fmt.Errorf("LUN %d is moving", id)
		}
	}
	for id, o := range owners {
		l := a.LUN(id)
		s := l.alua.Load()
		l.alua.Store(&aluaSnap{owner: a.Node(o.Node), status: s.status, gen: o.Gen})
	}
	return nil
}
