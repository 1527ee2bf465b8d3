package daemon

import (
	"strings"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/iscsi"
	"github.com/aluad/aluad/pkg/scsi"
)

// Access control on the embedded target: CHAP per host or per target,
// the login ACL for initiators no host declares, and the LUN map the
// device server consults on every command.

// chapPolicy is the target's CHAP policy, read from the array's hosts at
// each login (hosts change live): a host's own credentials, else the
// target-wide ones; discovery sessions only when auth.discovery is set.
// nil when the configuration asks for CHAP nowhere, nor can a live change
// (host CHAP is set in the config file only).
func chapPolicy(cfg array.Config, hosts func() []array.HostConfig) iscsi.AuthPolicy {
	any := cfg.Auth.CHAP != nil
	for _, h := range cfg.Hosts {
		any = any || h.CHAP != nil
	}
	if !any {
		return nil
	}
	creds := func(c *array.CHAPConfig) iscsi.CHAPCreds {
		out := iscsi.CHAPCreds{Initiator: iscsi.CHAPSecret{User: c.User, Secret: c.Secret.Reveal()}}
		t := c
		if c.TargetUser == "" && cfg.Auth.CHAP != nil {
			t = cfg.Auth.CHAP // the target's mutual credentials serve every host
		}
		out.Target = iscsi.CHAPSecret{User: t.TargetUser, Secret: t.TargetSecret.Reveal()}
		return out
	}
	// The credentials of the host an initiator belongs to now; a host
	// without its own (declared live, or without chap:) has the
	// target's, if any.
	hostCHAP := func(initiator string) *array.CHAPConfig {
		for _, h := range hosts() {
			for _, in := range h.Initiators {
				if strings.EqualFold(in, initiator) {
					return h.CHAP
				}
			}
		}
		return nil
	}
	return iscsi.CHAPPolicy{Lookup: func(initiator string, discovery bool) (iscsi.CHAPCreds, bool) {
		if discovery && !cfg.Auth.Discovery {
			return iscsi.CHAPCreds{}, false
		}
		if c := hostCHAP(initiator); c != nil {
			return creds(c), true
		}
		if cfg.Auth.CHAP != nil {
			return creds(cfg.Auth.CHAP), true
		}
		if discovery {
			return iscsi.CHAPCreds{}, true // discovery needs CHAP, and this initiator has none
		}
		return iscsi.CHAPCreds{}, false
	}}
}

// lunMapper adapts the array's live LUN map to the device server.
type lunMapper struct{ arr *array.Array }

func (m lunMapper) Resolve(n scsi.Nexus, lun uint64) (uint64, bool) {
	return m.arr.LUNMap().Resolve(n.InitiatorName, lun)
}

func (m lunMapper) Visible(n scsi.Nexus) []uint64 { return m.arr.LUNMap().Visible(n.InitiatorName) }

// MappingRequest is the body of POST /v1/mappings and the query of
// DELETE /v1/mappings.
type MappingRequest = array.MappingConfig

// Map adds a mapping and tells the affected nexuses.
func (d *Daemon) Map(m array.MappingConfig, who string) (api.MappingReply, error) {
	ch, err := d.Array.Map(m)
	if err != nil {
		return api.MappingReply{}, err
	}
	return d.mapChanged("map "+m.String(), who, ch), nil
}

// Unmap removes a mapping and tells the affected nexuses.
func (d *Daemon) Unmap(m array.MappingConfig, who string) (api.MappingReply, error) {
	ch, err := d.Array.Unmap(m.LUN, m.Host, m.Group)
	if err != nil {
		return api.MappingReply{}, err
	}
	return d.mapChanged("unmap "+m.String(), who, ch), nil
}

// mapChanged raises 3F/0E on every logged-in nexus whose view changed
// (SPC-4 6.33), records the change and saves the state.
func (d *Daemon) mapChanged(what, who string, changed []string) api.MappingReply {
	aff := d.Array.Affected(changed)
	told := d.SCSI.MapChanged(func(n scsi.Nexus) bool { return aff(n.InitiatorName) })
	d.Events.Add(api.Event{Kind: api.EventMapping, Initiator: who, Reason: what})
	d.log.Info("lun map changed", "change", what, "by", who, "nexuses_told", told)
	d.stateDirty()
	if changed == nil {
		changed = []string{}
	}
	return api.MappingReply{Mappings: d.Array.Mappings(), Told: told, Changed: changed}
}
