package array

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/aluad/aluad/pkg/alua"
)

// The declared hosts change at run time (aluad host, the API): each change
// replaces the whole set, checked as the config file's hosts are, and
// rebuilds the LUN map with it (mappings name hosts and groups, and the
// login ACL admits their initiators), so a bad change is refused whole and
// no reader sees half of one.

// hostTable indexes hosts by lower-cased initiator name.
func hostTable(hs []HostConfig) *map[string]Host {
	t := map[string]Host{}
	for _, hc := range hs {
		h := Host{Name: hc.Name, Type: alua.HostTypes[hc.Type], Initiators: slices.Clone(hc.Initiators)}
		for _, in := range hc.Initiators {
			t[strings.ToLower(in)] = h
		}
	}
	return &t
}

// HostMove is an initiator whose host changed: From and To are host names,
// an undeclared initiator's being its own name (as HostOf gives it).
type HostMove struct {
	Initiator string
	From, To  string
}

// HostChange is what a change of the declared hosts did.
type HostChange struct {
	// Types: the hosts declared now whose type is new or changed.
	Types []Host
	// Moved: initiators that belong to another host now.
	Moved []HostMove
	// Retyped: initiators whose host type reports other access states
	// (its non-owner state or TPGS): their nexuses are told 2A/06.
	Retyped []string
	// Views: the initiators whose LUN view changed (told 3F/0E), "*" for
	// undeclared ones (Affected).
	Views []string
}

// SetHosts replaces the declared hosts. The set is checked as the config
// file's is (names, types, initiators, groups, CHAP), and the mappings
// must still name hosts and groups that exist: removing a host that has
// mappings is refused until they are removed.
func (a *Array) SetHosts(hs []HostConfig) (HostChange, error) {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	cfg := a.cfg
	cfg.Hosts = slices.Clone(hs)
	cfg.Mappings = a.mappings
	if err := cfg.validateHosts(); err != nil {
		return HostChange{}, err
	}
	nm, err := BuildLUNMap(cfg)
	if err != nil {
		return HostChange{}, err
	}
	oldT, newT := *a.hosts.Load(), *hostTable(cfg.Hosts)
	var ch HostChange
	oldByName := map[string]Host{}
	for _, h := range oldT {
		oldByName[h.Name] = h
	}
	for _, hc := range cfg.Hosts {
		if o, ok := oldByName[hc.Name]; !ok || o.Type.Name != hc.Type {
			ch.Types = append(ch.Types, Host{Name: hc.Name, Type: alua.HostTypes[hc.Type], Initiators: hc.Initiators})
		}
	}
	of := func(t map[string]Host, in string) Host {
		if h, ok := t[in]; ok {
			return h
		}
		return Host{Name: in, Type: alua.HostTypes[alua.HostDefault]}
	}
	ins := slices.Sorted(maps.Keys(oldT))
	for in := range newT {
		if _, ok := oldT[in]; !ok {
			ins = append(ins, in)
		}
	}
	for _, in := range ins {
		o, n := of(oldT, in), of(newT, in)
		if o.Name != n.Name {
			ch.Moved = append(ch.Moved, HostMove{Initiator: in, From: o.Name, To: n.Name})
		}
		if o.Type.NonOwner != n.Type.NonOwner || o.Type.TPGS != n.Type.TPGS {
			ch.Retyped = append(ch.Retyped, in)
		}
	}
	old := a.lunMap.Load()
	const probe = "iqn.0000-00.invalid:undeclared"
	for _, in := range ins {
		if !maps.Equal(old.Sees(in), nm.Sees(in)) {
			ch.Views = append(ch.Views, in)
		}
	}
	if !maps.Equal(old.Sees(probe), nm.Sees(probe)) {
		ch.Views = append(ch.Views, "*")
	}
	sort.Strings(ch.Views)
	sort.Strings(ch.Retyped)
	a.cfg.Hosts = cfg.Hosts
	a.hosts.Store(&newT)
	a.lunMap.Store(nm)
	return ch, nil
}

// HostConfigs lists the declared hosts as the config file gives them.
func (a *Array) HostConfigs() []HostConfig {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	out := make([]HostConfig, len(a.cfg.Hosts))
	for i, h := range a.cfg.Hosts {
		out[i] = h
		out[i].Initiators = slices.Clone(h.Initiators)
	}
	return out
}

// ErrNoHost is the error of a change to a host that is not declared.
var ErrNoHost = fmt.Errorf("no such host")

// RestoreAccess puts back the hosts and mappings a state file kept,
// before any host has logged in (no nexus to tell).
func (a *Array) RestoreAccess(hs []HostConfig, ms []MappingConfig) error {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	cfg := a.cfg
	cfg.Hosts = slices.Clone(hs)
	if err := cfg.validateHosts(); err != nil {
		return err
	}
	hosts, table := a.cfg.Hosts, a.hosts.Load()
	a.cfg.Hosts = cfg.Hosts
	a.hosts.Store(hostTable(cfg.Hosts))
	if _, err := a.setMappingsLocked(slices.Clone(ms)); err != nil {
		a.cfg.Hosts = hosts
		a.hosts.Store(table)
		return err
	}
	return nil
}
