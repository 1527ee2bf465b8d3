package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/mgmt"
	"github.com/aluad/aluad/pkg/scsi"
)

// Hosts change live, as on SANtricity: a host added, its type or
// initiators changed, or removed, on a running array with no session
// dropped. The nexuses a change affects are told as a real array tells
// them: 2A/06 ASYMMETRIC ACCESS STATE CHANGED where the host type reports
// other access states, 3F/0E REPORTED LUNS DATA HAS CHANGED where the
// LUNs an initiator sees change. The ownership core learns the new type
// (its Host Type Incorrect judgement starts afresh) and which host each
// logged-in initiator belongs to now (Rehome), and the change is kept in
// the state file.

// errClusterHosts: a controller of cluster mode does not change hosts on
// its own (every controller must agree).
var errClusterHosts = errors.New("hosts change live on the one-process array; in cluster mode change them in every controller's config file and restart the controllers one at a time")

// HostSpecs lists the declared hosts.
func (d *Daemon) HostSpecs() []api.HostSpec {
	out := []api.HostSpec{}
	for _, h := range d.Array.HostConfigs() {
		out = append(out, api.HostSpec{Name: h.Name, Type: h.Type, Initiators: h.Initiators, Group: h.Group})
	}
	return out
}

// AddHost declares a host.
func (d *Daemon) AddHost(s api.HostSpec, who string) (api.HostsReply, error) {
	return d.editHosts(who, "add host "+s.Name, func(hs []array.HostConfig) ([]array.HostConfig, error) {
		if s.Name == "" {
			return nil, fmt.Errorf("a host needs a name")
		}
		for _, h := range hs {
			if h.Name == s.Name {
				return nil, fmt.Errorf("host %s already exists (change it with aluad host set)", s.Name)
			}
		}
		if len(s.Initiators) == 0 {
			return nil, fmt.Errorf("host %s: give at least one initiator (--initiator IQN)", s.Name)
		}
		return append(hs, array.HostConfig{Name: s.Name, Type: s.Type, Initiators: s.Initiators, Group: s.Group}), nil
	})
}

// ChangeHost changes a declared host's type, initiators or group.
func (d *Daemon) ChangeHost(name string, c api.HostChange, who string) (api.HostsReply, error) {
	what := "change host " + name
	if c.Type != "" {
		what += " type " + c.Type
	}
	return d.editHosts(who, what, func(hs []array.HostConfig) ([]array.HostConfig, error) {
		i := slices.IndexFunc(hs, func(h array.HostConfig) bool { return h.Name == name })
		if i < 0 {
			return nil, mgmt.NotFound(fmt.Sprintf("no host %q", name))
		}
		h := &hs[i]
		if c.Type == "" && c.Group == "" && len(c.AddInitiators) == 0 && len(c.RemoveInitiators) == 0 {
			return nil, fmt.Errorf("nothing to change: give a type, a group or initiators to add or remove")
		}
		if c.Type != "" {
			h.Type = c.Type
		}
		switch c.Group {
		case "":
		case "-":
			h.Group = ""
		default:
			h.Group = c.Group
		}
		for _, in := range c.RemoveInitiators {
			j := slices.IndexFunc(h.Initiators, func(o string) bool { return strings.EqualFold(o, in) })
			if j < 0 {
				return nil, fmt.Errorf("host %s has no initiator %s", name, in)
			}
			h.Initiators = slices.Delete(slices.Clone(h.Initiators), j, j+1)
		}
		for _, in := range c.AddInitiators {
			if slices.ContainsFunc(h.Initiators, func(o string) bool { return strings.EqualFold(o, in) }) {
				return nil, fmt.Errorf("host %s already has initiator %s", name, in)
			}
			h.Initiators = append(slices.Clone(h.Initiators), in)
		}
		if len(h.Initiators) == 0 {
			return nil, fmt.Errorf("host %s would have no initiator left (remove the host instead)", name)
		}
		return hs, nil
	})
}

// RemoveHost removes a declared host; its initiators are undeclared from
// then on. A host that mappings name is refused until they are removed;
// one with sessions logged in (it may lose its LUNs, and its type) unless
// force.
func (d *Daemon) RemoveHost(name string, force bool, who string) (api.HostsReply, error) {
	return d.editHosts(who, "remove host "+name, func(hs []array.HostConfig) ([]array.HostConfig, error) {
		i := slices.IndexFunc(hs, func(h array.HostConfig) bool { return h.Name == name })
		if i < 0 {
			return nil, mgmt.NotFound(fmt.Sprintf("no host %q", name))
		}
		var held []string
		for _, m := range d.Array.Mappings() {
			if m.Host == name {
				held = append(held, m.String())
			}
		}
		if len(held) > 0 {
			return nil, fmt.Errorf("host %s has mappings (%s): remove them first (aluad map rm)", name, strings.Join(held, "; "))
		}
		if n := d.hostSessions(hs[i]); n > 0 && !force {
			return nil, fmt.Errorf("host %s has %d sessions logged in: removing it now would change what they see (its host type, and the LUNs mapped to its group); log them out first, or remove it anyway with --force", name, n)
		}
		return slices.Delete(hs, i, i+1), nil
	})
}

// editHosts applies edit to the declared hosts and tells whom it
// concerns. One change at a time: each reads the set the last one left.
func (d *Daemon) editHosts(who, what string, edit func([]array.HostConfig) ([]array.HostConfig, error)) (api.HostsReply, error) {
	if d.View.Controller != "" {
		return api.HostsReply{}, errClusterHosts
	}
	d.hostMu.Lock()
	defer d.hostMu.Unlock()
	before := d.Array.HostConfigs()
	hs, err := edit(slices.Clone(before))
	if err != nil {
		return api.HostsReply{}, err
	}
	// A host that becomes of a STANDBY type has its non-owner paths
	// handed off (ANO) before the change shows, until the core says
	// otherwise (HandoffSync below): a host whose only path is a
	// non-owner's must not see STANDBY (04/0B on its I/O) in between.
	wasStandby := map[string]bool{}
	for _, h := range before {
		wasStandby[h.Name] = alua.HostTypes[h.Type].Standby()
	}
	var forced []string
	for _, h := range hs {
		if d.ctl.Running() && alua.HostTypes[h.Type].Standby() && !wasStandby[h.Name] {
			forced = append(forced, h.Name)
		}
	}
	for _, name := range forced {
		for _, n := range d.Array.Nodes {
			d.Array.SetHandoff(name, n.Name, true)
		}
	}
	if err := d.keepsCHAP(before, hs); err != nil {
		return api.HostsReply{}, err
	}
	ch, err := d.Array.SetHosts(hs)
	if err != nil {
		for _, name := range forced {
			d.ctl.Declare(ownership.HandoffSync{Host: name})
		}
		return api.HostsReply{}, err
	}
	var evs []ownership.Event
	for _, h := range ch.Types {
		evs = append(evs, ownership.HostDecl{Host: h.Name, Type: h.Type})
	}
	for _, m := range ch.Moved {
		evs = append(evs, ownership.Rehome{Initiator: m.Initiator, From: m.From, To: m.To})
	}
	for _, name := range forced {
		evs = append(evs, ownership.HandoffSync{Host: name})
	}
	d.ctl.Declare(evs...)
	for _, m := range ch.Moved {
		if m.To == m.Initiator { // undeclared now: its failed paths were its host's
			d.ctl.ForgetLostPaths(m.Initiator)
		}
	}
	if len(ch.Retyped) > 0 {
		var luns []uint64
		for _, l := range d.Array.LUNs {
			luns = append(luns, l.ID)
		}
		d.SCSI.QueueUAWhere(luns, func(n scsi.Nexus) bool {
			return slices.Contains(ch.Retyped, strings.ToLower(n.InitiatorName))
		}, scsi.ReasonUAAsymmetricChanged)
	}
	told := 0
	if len(ch.Views) > 0 {
		aff := d.Array.Affected(ch.Views)
		told = d.SCSI.MapChanged(func(n scsi.Nexus) bool { return aff(n.InitiatorName) })
	}
	d.Events.Add(api.Event{Kind: api.EventHost, Initiator: who, Reason: what})
	d.log.Info("hosts changed", "change", what, "by", who, "retyped", ch.Retyped, "moved", len(ch.Moved), "nexuses_told", told)
	d.stateDirty()
	rep := api.HostsReply{Hosts: d.HostSpecs(), Retyped: ch.Retyped, Views: ch.Views, Told: told}
	if rep.Retyped == nil {
		rep.Retyped = []string{}
	}
	if rep.Views == nil {
		rep.Views = []string{}
	}
	return rep, nil
}

// RunningConfig is the configuration as the array runs now (the hosts and
// mappings changed live included) as YAML that aluad serve --config
// accepts. CHAP secrets never leave the array: a secret read from a file
// is written as that file; one given inline is written redacted, which
// serve refuses until the secret is put back.
func (d *Daemon) RunningConfig() ([]byte, error) {
	c := d.cfg
	c.Config = d.Array.Config()
	unload := func(ch *array.CHAPConfig) *array.CHAPConfig {
		if ch == nil {
			return nil
		}
		o := *ch
		if o.SecretFile != "" {
			o.Secret = ""
		}
		if o.TargetSecretFile != "" {
			o.TargetSecret = ""
		}
		return &o
	}
	c.Auth.CHAP = unload(c.Auth.CHAP)
	for i := range c.Hosts {
		c.Hosts[i].CHAP = unload(c.Hosts[i].CHAP)
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("# aluad running configuration, %s (aluad config dump).\n"+
		"# Hosts and mappings are as they run now. CHAP secrets are not written:\n"+
		"# a secret given inline shows as (redacted) and must be put back.\n", d.now().UTC().Format(time.RFC3339))
	return append([]byte(head), b...), nil
}

// hostSessions counts the sessions of h's initiators.
func (d *Daemon) hostSessions(h array.HostConfig) int {
	n := 0
	for _, x := range d.SCSI.Nexuses() {
		if slices.ContainsFunc(h.Initiators, func(in string) bool { return strings.EqualFold(in, x.InitiatorName) }) {
			n++
		}
	}
	return n
}

// keepsCHAP refuses a change that would let an initiator that logs in
// with its host's CHAP log in with no secret at all (its host removed, or
// it taken off its host) where no target-wide CHAP covers it: that is the
// config file's to change, on purpose.
func (d *Daemon) keepsCHAP(before, after []array.HostConfig) error {
	if d.cfg.Auth.CHAP != nil {
		return nil
	}
	chapOf := func(hs []array.HostConfig, in string) (string, bool) {
		for _, h := range hs {
			if slices.ContainsFunc(h.Initiators, func(o string) bool { return strings.EqualFold(o, in) }) {
				return h.Name, h.CHAP != nil
			}
		}
		return "", false
	}
	for _, h := range before {
		if h.CHAP == nil {
			continue
		}
		for _, in := range h.Initiators {
			if _, ok := chapOf(after, in); !ok {
				return fmt.Errorf("host %s authenticates with CHAP: without it, initiator %s would log in with no secret (no target-wide auth.chap covers it); remove the host or its initiator in the config file instead", h.Name, in)
			}
		}
	}
	return nil
}
