package array

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

func u64(v uint64) *uint64 { return &v }

func accessConfig() Config {
	c := DefaultConfig()
	c.Hosts = []HostConfig{
		{Name: "db1", Group: "db", Initiators: []string{"iqn.2026-11.org.example:db1"}},
		{Name: "db2", Group: "db", Initiators: []string{"iqn.2026-11.org.example:db2"}},
		{Name: "web", Initiators: []string{"iqn.2026-11.org.example:web"}},
	}
	c.Mappings = []MappingConfig{
		{LUN: 0, Group: "db"},
		{LUN: 1, Group: "db"},
		{LUN: 5, Host: "web", HostLUN: u64(0)},
		{LUN: 7},
	}
	return c
}

func TestLUNMapResolution(t *testing.T) {
	for _, unknown := range []string{"allow", "no-luns", "refuse"} {
		t.Run(unknown, func(t *testing.T) {
			c := accessConfig()
			c.Access.UnknownInitiators = unknown
			require.NoError(t, c.Validate())
			m, err := BuildLUNMap(c)
			require.NoError(t, err)
			require.Equal(t, map[uint64]uint64{0: 0, 1: 1, 7: 7}, m.Sees("iqn.2026-11.org.example:db1"))
			require.Equal(t, map[uint64]uint64{0: 0, 1: 1, 7: 7}, m.Sees("IQN.2026-11.ORG.EXAMPLE:DB2"), "names are case-insensitive")
			require.Equal(t, map[uint64]uint64{0: 5, 7: 7}, m.Sees("iqn.2026-11.org.example:web"))
			require.Equal(t, []uint64{0, 7}, m.Visible("iqn.2026-11.org.example:web"))
			l, ok := m.Resolve("iqn.2026-11.org.example:web", 0)
			require.True(t, ok)
			require.Equal(t, uint64(5), l)
			_, ok = m.Resolve("iqn.2026-11.org.example:web", 1)
			require.False(t, ok)
			stranger := "iqn.2026-11.org.example:stranger"
			require.Equal(t, unknown != "refuse", m.Admit(stranger))
			if unknown == "allow" {
				require.Equal(t, map[uint64]uint64{7: 7}, m.Sees(stranger), "the all-hosts mapping")
			} else {
				require.Empty(t, m.Sees(stranger))
			}
		})
	}
}

func TestLUNMapOpen(t *testing.T) {
	c := DefaultConfig()
	c.Hosts = []HostConfig{{Name: "h", Initiators: []string{"iqn.2026-11.org.example:h"}}}
	c.Access.UnknownInitiators = "no-luns"
	require.NoError(t, c.Validate())
	m, err := BuildLUNMap(c)
	require.NoError(t, err)
	require.True(t, m.Open())
	require.Len(t, m.Visible("iqn.2026-11.org.example:h"), 8, "nothing mapped: all LUNs to declared hosts")
	require.Empty(t, m.Visible("iqn.2026-11.org.example:x"))
}

func TestAccessConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"missing LUN", func(c *Config) { c.Mappings = append(c.Mappings, MappingConfig{LUN: 99, Host: "web"}) }, "no LUN 99"},
		{"missing host", func(c *Config) { c.Mappings = append(c.Mappings, MappingConfig{LUN: 2, Host: "nope"}) }, `no host "nope"`},
		{"empty group", func(c *Config) { c.Mappings = append(c.Mappings, MappingConfig{LUN: 2, Group: "nope"}) }, `no host is in group "nope"`},
		{"host and group", func(c *Config) { c.Mappings = append(c.Mappings, MappingConfig{LUN: 2, Host: "web", Group: "db"}) }, "not both"},
		{"two LUNs at one number", func(c *Config) {
			c.Mappings = append(c.Mappings, MappingConfig{LUN: 2, Host: "db1", HostLUN: u64(0)})
		}, "already sees LUN 0 at LUN 0"},
		{"one LUN at two numbers", func(c *Config) {
			c.Mappings = append(c.Mappings, MappingConfig{LUN: 0, Host: "db1", HostLUN: u64(9)})
		}, "already sees LUN 0 at LUN 0"},
		{"host LUN too big", func(c *Config) {
			c.Mappings = append(c.Mappings, MappingConfig{LUN: 2, Host: "web", HostLUN: u64(20000)})
		}, "not addressable"},
		{"bad unknown policy", func(c *Config) { c.Access.UnknownInitiators = "maybe" }, "allow, no-luns or refuse"},
		{"short secret", func(c *Config) { c.Hosts[0].CHAP = &CHAPConfig{User: "u", Secret: "short"} }, "12 to 255"},
		{"no user", func(c *Config) { c.Auth.CHAP = &CHAPConfig{Secret: "long-enough-secret"} }, "needs a user"},
		{"half mutual", func(c *Config) { c.Auth.CHAP = &CHAPConfig{User: "u", Secret: "long-enough-secret", TargetUser: "t"} }, "both target_user"},
		{"same secret both ways", func(c *Config) {
			c.Auth.CHAP = &CHAPConfig{User: "u", Secret: "long-enough-secret", TargetUser: "t", TargetSecret: "long-enough-secret"}
		}, "must differ"},
		{"secret and file", func(c *Config) {
			c.Auth.CHAP = &CHAPConfig{User: "u", Secret: "long-enough-secret", SecretFile: "/x"}
		}, "not both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := accessConfig()
			tc.edit(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

// TestSecretRedacted: a secret shows as (redacted) in fmt, slog, JSON
// and YAML, and a secret file is read.
func TestSecretRedacted(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "s")
	require.NoError(t, os.WriteFile(f, []byte("file-secret-123456\nignored\n"), 0o600))
	c := accessConfig()
	c.Hosts[0].CHAP = &CHAPConfig{User: "db1", SecretFile: f, TargetUser: "arr", TargetSecret: "target-secret-abcdef"}
	require.NoError(t, c.Validate())
	require.Equal(t, "file-secret-123456", c.Hosts[0].CHAP.Secret.Reveal())
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("cfg", "chap", c.Hosts[0].CHAP, "s", c.Hosts[0].CHAP.Secret)
	j, err := json.Marshal(c.Hosts[0])
	require.NoError(t, err)
	y, err := yaml.Marshal(c.Hosts[0])
	require.NoError(t, err)
	for name, out := range map[string]string{"fmt": fmt.Sprintf("%v %+v %s %#v", c.Hosts[0].CHAP, *c.Hosts[0].CHAP, c.Hosts[0].CHAP.Secret, c.Hosts[0].CHAP.TargetSecret),
		"slog": buf.String(), "json": string(j), "yaml": string(y)} {
		require.NotContains(t, out, "file-secret", name)
		require.NotContains(t, out, "target-secret", name)
		require.Contains(t, out, "(redacted)", name)
	}
}

// TestMapChanges: adding and removing mappings at run time reports the
// initiators whose view changed and refuses a conflicting change whole.
func TestMapChanges(t *testing.T) {
	c := accessConfig()
	c.Data = t.TempDir()
	for i := range c.LUNs {
		c.LUNs[i].Size = 1 << 20
	}
	a, err := New(c, Options{})
	require.NoError(t, err)
	defer a.Close()
	ch, err := a.Map(MappingConfig{LUN: 3, Host: "web", HostLUN: u64(1)})
	require.NoError(t, err)
	require.Equal(t, []string{"iqn.2026-11.org.example:web"}, ch)
	require.Equal(t, map[uint64]uint64{0: 5, 1: 3, 7: 7}, a.LUNMap().Sees("iqn.2026-11.org.example:web"))
	_, err = a.Map(MappingConfig{LUN: 4, Host: "web", HostLUN: u64(1)})
	require.ErrorContains(t, err, "already sees LUN 3")
	require.Len(t, a.Mappings(), 5, "a refused change leaves the map as it was")
	ch, err = a.Unmap(7, "", "")
	require.NoError(t, err)
	require.Equal(t, []string{"*", "iqn.2026-11.org.example:db1", "iqn.2026-11.org.example:db2", "iqn.2026-11.org.example:web"}, ch)
	aff := a.Affected(ch)
	require.True(t, aff("iqn.2026-11.org.example:stranger"))
	require.True(t, aff("IQN.2026-11.org.example:DB1"))
	_, err = a.Unmap(7, "", "")
	require.ErrorContains(t, err, "not mapped to all hosts")
	require.Len(t, a.Config().Mappings, 4)
}
