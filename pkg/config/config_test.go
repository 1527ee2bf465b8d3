package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/units"
)

func TestExampleConfigLoads(t *testing.T) {
	c, err := Load("../../examples/aluad.yaml")
	require.NoError(t, err)
	require.Len(t, c.Nodes, 2)
	require.Len(t, c.LUNs, 8)
	require.Equal(t, "hdd", c.LUNs[4].Media)
	require.Equal(t, 512, c.LUNs[0].BlockSize)
	require.Equal(t, 512, c.LUNs[0].PhysicalBlockSize, "the block size, by default")
	require.Equal(t, 30*time.Second, c.Ownership.ShipWindow)
}

func TestConfigErrors(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"unknown key", "targt: iqn.x.y:z\n", `unknown key "targt" (did you mean "target"?)`},
		{"misspelt key", "alau: implicit\n", `unknown key "alau" (did you mean "alua"?)`},
		{"misspelt nested key", "interlink: {penalti: 50us}\n", `unknown key "penalti" in interlink (did you mean "penalty"?)`},
		{"unknown key far from any", "colour: red\n", `unknown key "colour" (known: target, array_id`},
		{"bad duration", "interlink: {penalty: 50 micro}\n", `interlink.penalty: "50 micro" is not a duration (e.g. 50us, 250ms, 10s)`},
		{"bad number", "limits: {max_sessions: many}\n", `limits.max_sessions: "many" is not a whole number`},
		{"bad bool", "cache: {mirror: maybe}\n", `cache.mirror: "maybe" is not true or false`},
		{"not yaml", "nodes: [a, b\n", "did not find expected"},
		{"host type deep in a block", "hosts:\n  - name: h1\n    type: linux\n    initiators: [iqn.x.y:a]\n  - name: h2\n    type: beos\n    initiators: [iqn.x.y:b]\n",
			`host h2: unknown type "beos"`},
		{"misspelt key in a block", "cache:\n  mode: write-back\n  dirty_limt: 64MiB\n", `unknown key "dirty_limt" in cache (did you mean "dirty_limit"?)`},
		{"bad size in a block", "luns:\n  - id: 0\n    size: lots\n", "luns.size: bad size"},
		{"bad size", "luns: [{id: 0, size: lots}]\n", "bad size"},
		{"bad preferred", "luns: [{id: 0, size: 1MiB, preferred: z}]\n", "preferred owner"},
		{"dup lun", "luns: [{id: 0, size: 1MiB}, {id: 0, size: 1MiB}]\n", "defined twice"},
		{"bad alua", "alua: sideways\n", "alua must be"},
		{"bad target", "target: array\n", "not an iSCSI name"},
		{"unknown host type", "hosts: [{name: h1, type: beos, initiators: [iqn.2026-11.org.example:h1]}]\n", "unknown type"},
		{"host without initiators", "hosts: [{name: h1, type: linux}]\n", "no initiators"},
		{"initiator twice", "hosts: [{name: h1, initiators: [iqn.x.y:i]}, {name: h2, initiators: [iqn.x.y:i]}]\n",
			"declared by hosts h1 and h2"},
		{"dup host", "hosts: [{name: h1, initiators: [iqn.x.y:i]}, {name: h1, initiators: [iqn.x.y:j]}]\n", "host names"},
		{"transition time too long", "transition_time: 300s\n", "transition_time"},
		{"transition time fraction", "transition_time: 1500ms\n", "transition_time"},
		{"negative penalty", "interlink: {penalty: -1us}\n", "penalty"},
		{"cache mode", "cache: {mode: writeback}\n", "write-back, write-through, none"},
		{"cache too small", "cache: {size: 4KiB}\n", "at least 1MiB"},
		{"dirty above size", "cache: {size: 8MiB, dirty_limit: 16MiB}\n", "dirty_limit at most the size"},
		{"negative tick", "ownership: {tick: -1s}\n", "must not be negative"},
		{"negative ship window", "ownership: {ship_window: -1s}\n", "must not be negative"},
		{"negative capacity", "ownership: {node_capacity: -5}\n", "node_capacity"},
		{"cache unknown key", "cache: {mirrored: true}\n", "mirrored"},
		{"physical block not a multiple", "luns: [{id: 0, size: 1MiB, physical_block_size: 1000}]\n", "physical_block_size"},
		{"physical block below the block", "luns: [{id: 0, size: 1MiB, block_size: 4096, physical_block_size: 512}]\n", "physical_block_size"},
		{"physical block not a power of two", "luns: [{id: 0, size: 1MiB, physical_block_size: 1536}]\n", "physical_block_size"},
		{"unknown fabric", "fabric: {kind: fc}\n", "fabric.kind must be iscsi or tcmu"},
		{"negative hba", "fabric: {kind: tcmu, hba: -1}\n", "fabric.hba"},
		{"chap on tcmu", "fabric: {kind: tcmu}\nauth: {chap: {user: u, secret: long-enough-secret}}\n", "tcmu fabric"},
		{"mappings on tcmu", "fabric: {kind: tcmu}\nmappings: [{lun: 0}]\n", "tcmu fabric"},
		{"negative limit", "limits: {max_sessions: -1}\n", "limits must not be negative"},
		{"cmd window", "limits: {cmd_window: 4096}\n", "cmd_window"},
		{"alert delay of no condition", "ownership: {alert_delays: {node-on-fire: 1s}}\n", "not a report condition"},
		{"cluster without array id", clusterYAML(""), "set array_id"},
		{"cluster node without interlink", "array_id: x1\ncluster: {etcd: [http://127.0.0.1:2379], interlink: {a: 127.0.0.1:7101}}\n",
			"node b has no interlink address"},
		{"cluster interlink of no node", "array_id: x1\ncluster: {etcd: [http://127.0.0.1:2379], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2, c: 127.0.0.1:3}}\n",
			`no node "c"`},
		{"cluster bad interlink", "array_id: x1\ncluster: {etcd: [http://127.0.0.1:2379], interlink: {a: 127.0.0.1, b: 127.0.0.1:2}}\n",
			"not host:port"},
		{"cluster no etcd", "array_id: x1\ncluster: {interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}}\n", "no etcd client URL"},
		{"cluster bad etcd", "array_id: x1\ncluster: {etcd: [127.0.0.1:2379], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}}\n",
			"http(s)://host:port"},
		{"cluster lease fraction", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, lease_ttl: 1500ms}\n",
			"whole number of seconds"},
		{"cluster of one", "array_id: x1\nnodes: [{name: a, ports: [{name: a0, addr: 127.0.0.1:0}]}]\nluns: [{id: 0, size: 1MiB, preferred: a}]\n" +
			"cluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1}}\n", "run two or more"},
		{"cluster on two machines unfenced", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 10.0.0.1:7101, b: 10.0.0.2:7101}}\n",
			"set cluster.fence_command"},
		{"cluster fencing unknown", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, fencing: stonith}\n",
			"want process, command or none"},
		{"cluster fence command missing", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, fencing: command}\n",
			"names no fence agent"},
		{"cluster fence command unused", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, fencing: process, fence_command: [x]}\n",
			"want command"},
		{"cluster fence timeout", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, fence_timeout: 10ms}\n",
			"under 1s"},
		{"cluster interlink timeout short", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, interlink_timeout: 50ms}\n",
			"outside 100ms..lease_ttl/2"},
		{"cluster interlink timeout past the lease", "array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, lease_ttl: 2s, interlink_timeout: 1500ms}\n",
			"outside 100ms..lease_ttl/2"},
		{"cluster on tcmu", "array_id: x1\nfabric: {kind: tcmu}\n" + clusterYAML(""), "fabric kind iscsi"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A comment first: every error is on line 2 or later, and
			// must say which.
			p := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(p, []byte("# aluad\n"+tc.yaml), 0o644))
			_, err := Load(p)
			require.ErrorContains(t, err, tc.want)
			line := 2
			if l, ok := lines[tc.name]; ok {
				line = l
			}
			require.Contains(t, err.Error(), fmt.Sprintf("%s:%d: ", p, line), "the file and the line")
			require.NotRegexp(t, `config\.Config|time\.Duration|!!str|field \S+ not found`, err.Error(), "no Go internals")
		})
	}
}

// lines: the line each multi-line case's error is on (2 otherwise).
var lines = map[string]int{
	"chap on tcmu":                             2,
	"host type deep in a block":                7,
	"misspelt key in a block":                  4,
	"bad size in a block":                      4,
	"mappings on tcmu":                         3,
	"cluster of one":                           5,
	"cluster on tcmu":                          4,
	"cluster without array id":                 2,
	"cluster node without interlink":           3,
	"cluster interlink of no node":             3,
	"cluster bad interlink":                    3,
	"cluster no etcd":                          3,
	"cluster interlink timeout short":          3,
	"cluster interlink timeout past the lease": 3,
	"cluster bad etcd":                         3,
	"cluster lease fraction":                   3,
	"cluster on two machines unfenced":         3,
	"cluster fencing unknown":                  3,
	"cluster fence command missing":            3,
	"cluster fence command unused":             3,
	"cluster fence timeout":                    3,
}

func TestConfigKeepsExplicitZeroDurations(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("transition_time: 0s\ninterlink: {penalty: 0s}\n"), 0o644))
	c, err := Load(p)
	require.NoError(t, err)
	require.Zero(t, c.TransitionTime)
	require.Zero(t, c.Interlink.Penalty)

	require.NoError(t, os.WriteFile(p, []byte("alua: explicit\n"), 0o644))
	c, err = Load(p)
	require.NoError(t, err)
	require.Equal(t, array.DefaultTransitionTime, c.TransitionTime, "missing keys take the default")
	require.Equal(t, Default().Interlink.Penalty, c.Interlink.Penalty)
}

func TestCacheAndOwnershipKeys(t *testing.T) {
	c, err := Load("../../examples/aluad.yaml")
	require.NoError(t, err)
	require.Equal(t, "write-back", c.Cache.Mode)
	require.True(t, c.Cache.MirrorOn())
	require.Equal(t, units.Size(64<<20), c.Cache.DirtyLimit)
	require.Equal(t, 30*time.Second, c.Ownership.FailbackWindow)
	p := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(p, []byte("cache: {mirror: false, mode: write-through}\n"), 0o644))
	c, err = Load(p)
	require.NoError(t, err)
	require.False(t, c.Cache.MirrorOn())
	require.Equal(t, units.Size(256<<20), c.Cache.Size, "missing keys take the default")
}

// Each section is decoded into the package that owns it, and the
// defaults of each are filled.
func TestSectionsDecode(t *testing.T) {
	raw := []byte("fabric: {kind: tcmu}\nlimits: {max_session_data: 16MiB}\n" +
		"ownership: {tick: 500ms, alert_delays: {node-offline: 0s}}\n")
	c, err := Parse(raw, "c.yaml")
	require.NoError(t, err)
	require.True(t, c.Fabric.TCMU())
	require.Equal(t, "/sys/kernel/config/target", c.Fabric.ConfigFS)
	require.Equal(t, 7712, c.Fabric.HBA)
	require.Equal(t, "iqn.2026-11.org.aluad:array.a", c.NodeTarget("A"))
	require.Equal(t, units.Size(16<<20), c.Limits.MaxSessionData)
	require.Equal(t, map[ownership.Condition]time.Duration{ownership.NodeOffline: 0}, c.Ownership.AlertDelays)
	require.Len(t, c.LUNs, 8, "the array's section keeps its defaults")
	d := Default()
	require.NoError(t, d.Validate())
	require.Equal(t, "iscsi", d.Fabric.Kind)
	require.Equal(t, d.Target, d.NodeTarget("a"))
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("hosts:\n  - name: h\n    group: g\n    initiators: [iqn.2026-11.org.example:h]\nmappings:\n  - lun: 1\n    group: g\n    host_lun: 0\naccess:\n  unknown_initiators: refuse\n"))
	f.Add([]byte("auth:\n  discovery: true\n  chap:\n    user: u\n    secret: long-enough-secret\n    target_user: t\n    target_secret: another-long-one\nlimits:\n  max_sessions: 4\n"))
	f.Add([]byte("luns:\n  - id: 3\n    size: 1MiB\nmappings:\n  - lun: 3\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := Parse(raw, "fuzz.yaml")
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "fuzz.yaml"), "names the file: %v", err)
			return
		}
		// What config dump writes reads back as the same configuration
		// (inline CHAP secrets are written redacted, and refused).
		if c.Auth.CHAP == nil && !slices.ContainsFunc(c.Hosts, func(h array.HostConfig) bool { return h.CHAP != nil }) {
			b, err := yaml.Marshal(c)
			require.NoError(t, err)
			c2, err := Parse(b, "dump.yaml")
			require.NoError(t, err, "%s", b)
			b2, err := yaml.Marshal(c2)
			require.NoError(t, err)
			require.Equal(t, string(b), string(b2))
		}
		// A config that parses builds a LUN map and validates again.
		m, err := array.BuildLUNMap(c.Config)
		require.NoError(t, err)
		for _, h := range c.Hosts {
			for _, in := range h.Initiators {
				for hl, l := range m.Sees(in) {
					got, ok := m.Resolve(in, hl)
					require.True(t, ok)
					require.Equal(t, l, got)
				}
			}
		}
		require.NoError(t, c.Validate())
	})
}

// TestSecureExample: examples/secure.yaml loads and means what it says.
func TestSecureExample(t *testing.T) {
	c, err := Load("../../examples/secure.yaml")
	require.NoError(t, err)
	m, err := array.BuildLUNMap(c.Config)
	require.NoError(t, err)
	require.Equal(t, map[uint64]uint64{0: 0, 1: 1, 7: 7}, m.Sees("iqn.2026-11.org.example:db2"))
	require.Equal(t, map[uint64]uint64{0: 4, 7: 7}, m.Sees("iqn.2026-11.org.example:web"))
	require.False(t, m.Admit("iqn.2026-11.org.example:other"))
	require.Equal(t, 256, c.Limits.MaxSessionsPerInitiator)
	require.Equal(t, "aluad-array", c.Auth.CHAP.TargetUser)
}

// clusterYAML is a valid cluster section (after the array id line when id
// is given).
func clusterYAML(id string) string {
	out := ""
	if id != "" {
		out = "array_id: " + id + "\n"
	}
	return out + "cluster: {etcd: [http://127.0.0.1:2379], interlink: {a: 127.0.0.1:7101, b: 127.0.0.1:7102}}\n"
}

// A valid cluster section gets its defaults.
func TestClusterSection(t *testing.T) {
	c, err := Parse([]byte(clusterYAML("x1")), "c.yaml")
	require.NoError(t, err)
	require.True(t, c.Cluster.On())
	require.Equal(t, 2*time.Second, c.Cluster.LeaseTTL)
	require.Equal(t, 2*time.Second, c.Cluster.FailbackAfter)
	require.Equal(t, "process", c.Cluster.Fencing, "controllers on loopback: one machine, fenced by process")
	require.Equal(t, time.Minute, c.Cluster.FenceTimeout)
	require.Equal(t, 500*time.Millisecond, c.Cluster.InterlinkTimeout, "a quarter of the lease")
	slow, err := Parse([]byte("array_id: x1\ncluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2}, lease_ttl: 6s, interlink_timeout: 3s}\n"), "c.yaml")
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, slow.Cluster.InterlinkTimeout)
	for yaml, want := range map[string]string{
		"interlink: {a: 10.0.0.1:7101, b: 10.0.0.2:7101}, fence_command: [fence_virsh, -n, '{node}']": "command",
		"interlink: {a: 10.0.0.1:7101, b: 10.0.0.2:7101}, fencing: none":                              "none",
		"interlink: {a: 'localhost:1', b: '[::1]:2'}":                                                 "process",
	} {
		c, err := Parse([]byte("array_id: x1\ncluster: {etcd: [http://h:1], "+yaml+"}\n"), "c.yaml")
		require.NoError(t, err, yaml)
		require.Equal(t, want, c.Cluster.Fencing, yaml)
	}
	c, err = Parse([]byte("array_id: x1\nnodes: [{name: a, ports: [{name: a0, addr: 127.0.0.1:0}]}, {name: b, ports: [{name: b0, addr: 127.0.0.1:0}]}, {name: c, ports: [{name: c0, addr: 127.0.0.1:0}]}]\n"+
		"cluster: {etcd: [http://h:1], interlink: {a: 127.0.0.1:1, b: 127.0.0.1:2, c: 127.0.0.1:3}}\n"), "c.yaml")
	require.NoError(t, err, "three controllers")
	require.Len(t, c.Nodes, 3)
	c, err = Parse([]byte("array_id: x1\n"), "c.yaml")
	require.NoError(t, err)
	require.False(t, c.Cluster.On(), "no section: the embedded array")
}
