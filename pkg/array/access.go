package array

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Who may log in and what each host sees: CHAP credentials, the policy for
// initiators no host declares, and the LUN mappings (hosts, host groups,
// LUN numbers per host).

// Secret is a CHAP secret. It never prints, logs or serialises as itself:
// fmt, slog, JSON and YAML all show "(redacted)".
type Secret string

const redacted = "(redacted)"

func (Secret) String() string       { return redacted }
func (Secret) GoString() string     { return redacted }
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON and MarshalYAML write a secret as "(redacted)", and no
// secret as empty (a dumped configuration must not invent one).
func (s Secret) MarshalJSON() ([]byte, error) {
	if s == "" {
		return []byte(`""`), nil
	}
	return []byte(`"` + redacted + `"`), nil
}

func (s Secret) MarshalYAML() (any, error) {
	if s == "" {
		return "", nil
	}
	return redacted, nil
}
func (s Secret) Reveal() string             { return string(s) }
func (s Secret) Format(f fmt.State, _ rune) { f.Write([]byte(redacted)) }

// CHAPConfig is one set of CHAP credentials. User/Secret is what the
// initiator must prove; TargetUser/TargetSecret, when set, is what the
// array answers with when the initiator asks for mutual CHAP. A secret can
// come from a file (first line) instead of the config.
type CHAPConfig struct {
	User             string `yaml:"user"`
	Secret           Secret `yaml:"secret"`
	SecretFile       string `yaml:"secret_file"`
	TargetUser       string `yaml:"target_user"`
	TargetSecret     Secret `yaml:"target_secret"`
	TargetSecretFile string `yaml:"target_secret_file"`
}

// AuthConfig is the target-wide authentication.
type AuthConfig struct {
	// CHAP, when set, is required of every initiator whose host has no
	// credentials of its own.
	CHAP *CHAPConfig `yaml:"chap"`
	// Discovery: discovery sessions authenticate too (with the host's
	// credentials, else the target's).
	Discovery bool `yaml:"discovery"`
}

// AccessConfig says what happens to initiators no host declares.
type AccessConfig struct {
	// UnknownInitiators is "allow" (the default: they log in and see the
	// LUNs mapped to every host, or all LUNs when nothing is mapped),
	// "no-luns" (they log in and see no LUN) or "refuse" (their logins get
	// status 02/02, authorization failure).
	UnknownInitiators string `yaml:"unknown_initiators"`
}

// MappingConfig maps one LUN (the array's volume) to a host, a host group,
// or, with neither, to every host, at a LUN number of its own.
type MappingConfig struct {
	LUN   uint64 `yaml:"lun" json:"lun"`
	Host  string `yaml:"host,omitempty" json:"host,omitempty"`
	Group string `yaml:"group,omitempty" json:"group,omitempty"`
	// HostLUN is the LUN number the host sees (default: LUN).
	HostLUN *uint64 `yaml:"host_lun,omitempty" json:"host_lun,omitempty"`
}

// At is the LUN number the host addresses.
func (m MappingConfig) At() uint64 {
	if m.HostLUN != nil {
		return *m.HostLUN
	}
	return m.LUN
}

// Target names what the mapping is to: "host h1", "group g1" or "all hosts".
func (m MappingConfig) Target() string {
	switch {
	case m.Host != "":
		return "host " + m.Host
	case m.Group != "":
		return "group " + m.Group
	}
	return "all hosts"
}

func (m MappingConfig) String() string {
	return fmt.Sprintf("LUN %d to %s at LUN %d", m.LUN, m.Target(), m.At())
}

// loadSecret fills a secret from its file when the config names one.
func loadSecret(s *Secret, file, what string) error {
	if file == "" {
		return nil
	}
	raw, err := os.ReadFile(file)
	if err != nil && *s != "" {
		return fmt.Errorf("%s: give the secret or a secret file, not both", what)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	read := Secret(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if *s != "" && *s != read {
		// (the same secret is the file's, read by an earlier check: a
		// configuration is checked again when hosts change live)
		return fmt.Errorf("%s: give the secret or a secret file, not both", what)
	}
	*s = read
	return nil
}

// validate checks one credential set (what names the owner in errors).
// RFC 7143 9.2.1 wants CHAP secrets of at least 96 bits; the same secret
// must not serve both directions (12.1.3).
func (c *CHAPConfig) validate(what string) error {
	if err := loadSecret(&c.Secret, c.SecretFile, what+" chap secret"); err != nil {
		return err
	}
	if err := loadSecret(&c.TargetSecret, c.TargetSecretFile, what+" chap target secret"); err != nil {
		return err
	}
	if c.User == "" || c.Secret == "" {
		return fmt.Errorf("%s: chap needs a user and a secret", what)
	}
	if c.Secret == redacted || c.TargetSecret == redacted {
		return fmt.Errorf("%s: the secret reads %s (a dumped configuration): put the secret back, or give secret_file", what, redacted)
	}
	for _, s := range []Secret{c.Secret, c.TargetSecret} {
		if s != "" && (len(s) < 12 || len(s) > 255) {
			return fmt.Errorf("%s: chap secrets must be 12 to 255 characters (RFC 7143 asks for at least 96 bits)", what)
		}
	}
	if (c.TargetUser == "") != (c.TargetSecret == "") {
		return fmt.Errorf("%s: mutual chap needs both target_user and target_secret", what)
	}
	if c.TargetSecret != "" && c.TargetSecret == c.Secret {
		return fmt.Errorf("%s: the target secret must differ from the initiator secret (RFC 7143 12.1.3)", what)
	}
	return nil
}

func (c *Config) validateAccess() error {
	if c.Auth.CHAP != nil {
		if err := c.Auth.CHAP.validate("auth"); err != nil {
			return err
		}
	}
	switch c.Access.UnknownInitiators {
	case "":
		c.Access.UnknownInitiators = "allow"
	case "allow", "no-luns", "refuse":
	default:
		return fmt.Errorf("access.unknown_initiators must be allow, no-luns or refuse, not %q", c.Access.UnknownInitiators)
	}
	for i := range c.Hosts {
		h := &c.Hosts[i]
		if h.CHAP != nil {
			if err := h.CHAP.validate("host " + h.Name); err != nil {
				return err
			}
		}
	}
	_, err := BuildLUNMap(*c)
	return err
}

// AccessControlled reports whether the section sets CHAP, mappings or a
// policy for unknown initiators other than allow: what the embedded
// iSCSI target enforces and another front end may not.
func (c Config) AccessControlled() bool {
	chap := c.Auth.CHAP != nil
	for _, h := range c.Hosts {
		chap = chap || h.CHAP != nil
	}
	return chap || len(c.Mappings) > 0 || c.Access.UnknownInitiators != "allow"
}

// LUNMap is a resolved set of mappings: per initiator, host LUN -> LUN.
// It is immutable; a change builds a new one.
type LUNMap struct {
	// open: nothing is mapped, every admitted initiator sees every LUN at
	// its own number.
	open    bool
	unknown string
	all     map[uint64]uint64            // mappings to every host
	byInit  map[string]map[uint64]uint64 // lower-case initiator -> host LUN -> LUN
	known   map[string]string            // lower-case initiator -> host
	luns    map[uint64]bool
}

// BuildLUNMap resolves cfg's hosts, groups and mappings, or says what
// conflicts: a mapping to a missing LUN, host or group; two LUNs at one
// host LUN number; one LUN at two numbers for a host.
func BuildLUNMap(cfg Config) (*LUNMap, error) {
	m := &LUNMap{open: len(cfg.Mappings) == 0, unknown: cfg.Access.UnknownInitiators, all: map[uint64]uint64{},
		byInit: map[string]map[uint64]uint64{}, known: map[string]string{}, luns: map[uint64]bool{}}
	if m.unknown == "" {
		m.unknown = "allow"
	}
	for _, l := range cfg.LUNs {
		m.luns[l.ID] = true
	}
	hosts := map[string]*HostConfig{}
	groups := map[string][]string{}
	for i := range cfg.Hosts {
		h := &cfg.Hosts[i]
		hosts[h.Name] = h
		if h.Group != "" {
			groups[h.Group] = append(groups[h.Group], h.Name)
		}
		for _, in := range h.Initiators {
			m.known[strings.ToLower(in)] = h.Name
		}
	}
	perHost := map[string]map[uint64]uint64{} // host ("" = all) -> host LUN -> LUN
	add := func(host string, mp MappingConfig) error {
		t := perHost[host]
		if t == nil {
			t = map[uint64]uint64{}
			perHost[host] = t
		}
		at := mp.At()
		if other, dup := t[at]; dup && other != mp.LUN {
			return fmt.Errorf("mapping %v: host %s already sees LUN %d at LUN %d", mp, host, other, at)
		}
		for hl, l := range t {
			if l == mp.LUN && hl != at {
				return fmt.Errorf("mapping %v: host %s already sees LUN %d at LUN %d", mp, host, l, hl)
			}
		}
		t[at] = mp.LUN
		return nil
	}
	for _, mp := range cfg.Mappings {
		if !m.luns[mp.LUN] {
			return nil, fmt.Errorf("mapping %v: no LUN %d", mp, mp.LUN)
		}
		if mp.At() > 16383 {
			return nil, fmt.Errorf("mapping %v: host LUNs above 16383 are not addressable", mp)
		}
		var targets []string
		switch {
		case mp.Host != "" && mp.Group != "":
			return nil, fmt.Errorf("mapping %v: give a host or a group, not both", mp)
		case mp.Host != "":
			if hosts[mp.Host] == nil {
				return nil, fmt.Errorf("mapping %v: no host %q", mp, mp.Host)
			}
			targets = []string{mp.Host}
		case mp.Group != "":
			if len(groups[mp.Group]) == 0 {
				return nil, fmt.Errorf("mapping %v: no host is in group %q", mp, mp.Group)
			}
			targets = groups[mp.Group]
		default:
			targets = []string{""}
			for h := range hosts {
				targets = append(targets, h)
			}
			sort.Strings(targets)
		}
		for _, h := range targets {
			if err := add(h, mp); err != nil {
				return nil, err
			}
		}
	}
	m.all = perHost[""]
	if m.all == nil {
		m.all = map[uint64]uint64{}
	}
	for in, h := range m.known {
		t := perHost[h]
		if t == nil {
			t = map[uint64]uint64{}
		}
		m.byInit[in] = t
	}
	return m, nil
}

// Open reports whether nothing is mapped (every LUN to everyone).
func (m *LUNMap) Open() bool { return m.open }

// Host returns the declared host of an initiator.
func (m *LUNMap) Host(initiator string) (string, bool) {
	if h, ok := m.known[initiator]; ok { // the usual all-lower-case name: no allocation per command
		return h, ok
	}
	h, ok := m.known[strings.ToLower(initiator)]
	return h, ok
}

// Admit says whether an initiator may log in at all.
func (m *LUNMap) Admit(initiator string) bool {
	_, ok := m.Host(initiator)
	return ok || m.unknown != "refuse"
}

// table is the host-LUN table an initiator sees (nil: none).
func (m *LUNMap) table(initiator string) map[uint64]uint64 {
	if t, ok := m.byInit[initiator]; ok {
		return t
	}
	if t, ok := m.byInit[strings.ToLower(initiator)]; ok {
		return t
	}
	if m.unknown != "allow" {
		return nil
	}
	return m.all
}

// Resolve returns the LUN behind an initiator's host LUN number.
func (m *LUNMap) Resolve(initiator string, hostLUN uint64) (uint64, bool) {
	if m.open {
		// A refused initiator never logs in, so only no-luns is checked
		// per command.
		if m.unknown == "no-luns" && !m.isKnown(initiator) {
			return 0, false
		}
		return hostLUN, m.luns[hostLUN]
	}
	l, ok := m.table(initiator)[hostLUN]
	return l, ok
}

func (m *LUNMap) isKnown(initiator string) bool {
	_, ok := m.Host(initiator)
	return ok
}

// Visible lists an initiator's host LUN numbers in order.
func (m *LUNMap) Visible(initiator string) []uint64 {
	var out []uint64
	if m.open {
		if !m.Admit(initiator) || (m.unknown == "no-luns" && !m.isKnown(initiator)) {
			return nil
		}
		for l := range m.luns {
			out = append(out, l)
		}
	} else {
		for l := range m.table(initiator) {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Sees lists host LUN -> LUN for an initiator (for views and diffs).
func (m *LUNMap) Sees(initiator string) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, hl := range m.Visible(initiator) {
		l, _ := m.Resolve(initiator, hl)
		out[hl] = l
	}
	return out
}

// A Secret redacts itself in YAML output too.
var _ yaml.Marshaler = Secret("")
