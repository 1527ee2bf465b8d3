package array

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/cache"
)

// Config is the array's configuration (the YAML file; see examples/aluad.yaml).
type Config struct {
	// Target is the iSCSI target name served on every port.
	Target string `yaml:"target"`
	// ArrayID names this array: every LUN's NAA designator and serial
	// number derive from it. Empty: the daemon creates one at the first
	// start and keeps it in the state directory.
	ArrayID string `yaml:"array_id"`
	// Data is the directory holding one sparse file per LUN.
	Data string `yaml:"data"`
	// ALUA is "implicit" (the product) or "explicit" (the baseline that
	// implicit ALUA is measured against).
	ALUA  string       `yaml:"alua"`
	Nodes []NodeConfig `yaml:"nodes"`
	LUNs  []LUNConfig  `yaml:"luns"`
	// Interlink is the inter-node link that carries forwarded (ANO) I/O.
	Interlink InterlinkConfig `yaml:"interlink"`
	// TransitionTime is reported as the implicit transition time (RTPG
	// extended header byte 5, whole seconds, at most 255 s): how long a host
	// should wait out TRANSITIONING before giving up on a group.
	TransitionTime time.Duration `yaml:"transition_time"`
	// Hosts declares known hosts: their initiator names and host type.
	// Initiators not listed get host type "default".
	Hosts []HostConfig `yaml:"hosts"`
	// Cache configures every node's cache.
	Cache CacheConfig `yaml:"cache"`
	// Ownership tunes the ownership core the daemon runs.
	Ownership OwnershipConfig `yaml:"ownership"`
	// Fabric chooses the front end hosts reach the nodes through.
	Fabric FabricConfig `yaml:"fabric"`
	// Auth is target-wide CHAP; hosts may carry their own.
	Auth AuthConfig `yaml:"auth"`
	// Access says what initiators no host declares may do.
	Access AccessConfig `yaml:"access"`
	// Mappings map LUNs to hosts and host groups at LUN numbers of their
	// own. With none, every admitted initiator sees every LUN at its id.
	Mappings []MappingConfig `yaml:"mappings"`
	// Limits bound what initiators may hold (zero: the target's defaults).
	Limits LimitsConfig `yaml:"limits"`
}

// LimitsConfig bounds initiators on the embedded target (see pkg/iscsi
// limits.go for what each bound does when reached); zero keeps the default.
type LimitsConfig struct {
	MaxConnections          int           `yaml:"max_connections"`
	MaxSessions             int           `yaml:"max_sessions"`
	MaxSessionsPerInitiator int           `yaml:"max_sessions_per_initiator"`
	MaxSessionData          Size          `yaml:"max_session_data"`
	MaxTotalData            Size          `yaml:"max_total_data"`
	CmdWindow               int           `yaml:"cmd_window"`
	LoginTimeout            time.Duration `yaml:"login_timeout"`
	WriteTimeout            time.Duration `yaml:"write_timeout"`
}

func (l LimitsConfig) validate() error {
	if l.MaxConnections < 0 || l.MaxSessions < 0 || l.MaxSessionsPerInitiator < 0 || l.MaxSessionData < 0 ||
		l.MaxTotalData < 0 || l.CmdWindow < 0 || l.LoginTimeout < 0 || l.WriteTimeout < 0 {
		return fmt.Errorf("limits must not be negative")
	}
	if l.CmdWindow > 1024 {
		return fmt.Errorf("limits.cmd_window must be at most 1024")
	}
	return nil
}

// FabricConfig chooses the front end.
type FabricConfig struct {
	// Kind is "iscsi" (the embedded pure-Go target, the default) or
	// "tcmu" (LIO's iSCSI target over target_core_user backstores, on a
	// Linux host with LIO; tcmu-handler/).
	Kind string `yaml:"kind"`
	// ConfigFS is LIO's configfs directory (tcmu; default
	// /sys/kernel/config/target).
	ConfigFS string `yaml:"configfs"`
	// HBA numbers the user_<HBA> backstore directory aluad owns (tcmu;
	// default 7712).
	HBA int `yaml:"hba"`
}

// TCMU reports whether the LIO/TCMU front end is chosen.
func (f FabricConfig) TCMU() bool { return f.Kind == "tcmu" }

// NodeTarget is the iSCSI target name a node's ports carry: the array's
// name on the pure-Go fabric; on LIO, one target per node, the array's
// name with ".<node>" added.
func (c Config) NodeTarget(node string) string {
	if c.Fabric.TCMU() {
		return c.Target + "." + strings.ToLower(node)
	}
	return c.Target
}

// CacheConfig configures every node's cache.
type CacheConfig struct {
	// Mode is write-back (the default), write-through or none.
	Mode string `yaml:"mode"`
	// Size bounds each node's cache (default 256MiB).
	Size Size `yaml:"size"`
	// DirtyLimit bounds each node's dirty data (default 64MiB).
	DirtyLimit Size `yaml:"dirty_limit"`
	// Mirror holds every acknowledged write-back page in the partner
	// node's mirror too (default true): a node crash then loses no
	// acknowledged write. Off trades that for write bandwidth.
	Mirror *bool `yaml:"mirror"`
	// DestageInterval is how often the destager runs (default 100ms).
	DestageInterval time.Duration `yaml:"destage_interval"`
}

// MirrorOn reports whether write-cache mirroring is on.
func (c CacheConfig) MirrorOn() bool { return c.Mirror == nil || *c.Mirror }

// OwnershipConfig tunes the ownership core (see ownership.Config); zero
// fields keep the core's defaults. Windows are durations, counted in ticks.
type OwnershipConfig struct {
	// Tick is the core's time step (default 1s).
	Tick time.Duration `yaml:"tick"`
	// FailbackWindow: how long every user of a LUN must reach its
	// preferred owner again before it fails back.
	FailbackWindow time.Duration `yaml:"failback_window"`
	// DiscoveryWindow: how long after start-up or a node's return the
	// core waits for hosts to rediscover paths before judging connectivity.
	DiscoveryWindow time.Duration `yaml:"discovery_window"`
	// Cooldown: the least time between two balance moves of one LUN.
	Cooldown time.Duration `yaml:"cooldown"`
	// PlanInterval: how often the balance planner runs.
	PlanInterval time.Duration `yaml:"plan_interval"`
	// ShipWindow: how long most of a LUN's I/O must arrive at one non-owner
	// node (hosts that do not follow ALUA, or follow it late) before the
	// LUN moves there (default 30 ticks).
	ShipWindow time.Duration `yaml:"ship_window"`
	// NodeCapacity is a node's capacity in work units per tick (default
	// 1000; a 4 KiB command is one unit, 64 KiB of data another).
	NodeCapacity float64 `yaml:"node_capacity"`
	// AlertDelay is the report debounce: a condition must hold this long
	// before it is raised, and be gone this long before it is cleared
	// (default 3 ticks).
	AlertDelay time.Duration `yaml:"alert_delay"`
	// PathDegradedFactor: a path is reported degraded when its exchange
	// time expands this many times over its best, and that many times
	// more than its node's and its peer paths' (default 3).
	PathDegradedFactor float64 `yaml:"path_degraded_factor"`
	// StressFloor: a node's latency expansion counts as stress only at
	// this utilisation or more (default 0.25; expansion on a near-idle
	// node is noise). StressWindow: how long the stress must hold before
	// a balance move (default three plan intervals, 30 s).
	StressFloor  float64       `yaml:"stress_floor"`
	StressWindow time.Duration `yaml:"stress_window"`
	// FailbackCooldown: no failback within this long of a LUN's last move
	// (default twice the failback window, 1 min).
	FailbackCooldown time.Duration `yaml:"failback_cooldown"`
	// DampCount failovers of one LUN within DampWindow hold it on its
	// reachable owner and raise Path Flapping, until its hosts have
	// reached its preferred owner for DampClear or an operator clears the
	// report (defaults 3, 30 min, 60 min).
	DampCount  int           `yaml:"damp_count"`
	DampWindow time.Duration `yaml:"damp_window"`
	DampClear  time.Duration `yaml:"damp_clear"`
	// FollowWindow: after a planned move, how long a host has to move its
	// I/O to the new owner before it is seen not to follow (default 30s:
	// dm-multipath at its defaults checks paths every 5-20 s).
	FollowWindow time.Duration `yaml:"follow_window"`
	// Off disables the core: ownership then moves only by operator or STPG.
	Off bool `yaml:"off"`
}

// HostConfig declares one host (a server with one or more initiators).
type HostConfig struct {
	Name string `yaml:"name"`
	// Type is a host type from alua.HostTypes (OS and multipath stack).
	Type       string   `yaml:"type"`
	Initiators []string `yaml:"initiators"`
	// Group is the host group (a cluster sharing LUNs), if any.
	Group string `yaml:"group"`
	// CHAP, when set, is what this host's initiators must present.
	CHAP *CHAPConfig `yaml:"chap"`
}

// NodeConfig is one storage node (controller).
type NodeConfig struct {
	Name  string       `yaml:"name"`
	Ports []PortConfig `yaml:"ports"`
}

// PortConfig is one target port of a node.
type PortConfig struct {
	Name string `yaml:"name"`
	Addr string `yaml:"addr"`
}

// LUNConfig is one logical unit.
type LUNConfig struct {
	ID        uint64 `yaml:"id"`
	Size      Size   `yaml:"size"`
	Preferred string `yaml:"preferred"`
	// Media is a latency profile: ram, ssd or hdd.
	Media string `yaml:"media"`
	// Group is the drive group (a performance class for batching moves).
	Group     string `yaml:"group"`
	BlockSize int    `yaml:"block_size"`
	// PhysicalBlockSize is what hosts are told the LUN writes in
	// underneath (READ CAPACITY(16)'s exponent): by default the block
	// size; 4096 on a 512-byte LUN presents a 512e disk (the cache page
	// is 4096 bytes, and a smaller write reads the rest of its page).
	PhysicalBlockSize int `yaml:"physical_block_size"`
}

// InterlinkConfig models the link between nodes.
type InterlinkConfig struct {
	// Penalty is added to every forwarded command and every mirror copy.
	Penalty time.Duration `yaml:"penalty"`
	// Bandwidth is the link's bytes per second for mirror copies
	// (default 1250MB, 10 Gbit/s).
	Bandwidth Size `yaml:"bandwidth"`
}

// DefaultBandwidth is a 10 Gbit/s interlink.
const DefaultBandwidth = 1250 * 1000 * 1000

// Size is a byte count that reads "1GiB", "512MiB", "4096" in YAML.
type Size int64

// UnmarshalYAML parses a size with an optional binary or decimal suffix.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = Size(v)
	return nil
}

// ParseSize parses "1GiB", "100MB", "512k", "4096".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"k", 1 << 10}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 1GiB, 512MiB, 4096)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// DefaultConfig is the embedded default: 2 nodes ("a", "b") with 2 ports
// each on loopback, 8 LUNs of 1 GiB with alternating preferred owners.
func DefaultConfig() Config {
	c := Config{Target: "iqn.2026-11.org.aluad:array", Data: "aluad-data", ALUA: "implicit",
		Interlink: InterlinkConfig{Penalty: 50 * time.Microsecond}, TransitionTime: DefaultTransitionTime}
	port := 3260
	for _, n := range []string{"a", "b"} {
		nc := NodeConfig{Name: n}
		for i := 0; i < 2; i++ {
			nc.Ports = append(nc.Ports, PortConfig{Name: fmt.Sprintf("%s%d", n, i), Addr: fmt.Sprintf("127.0.0.1:%d", port)})
			port++
		}
		c.Nodes = append(c.Nodes, nc)
	}
	for i := 0; i < 8; i++ {
		c.LUNs = append(c.LUNs, LUNConfig{ID: uint64(i), Size: 1 << 30, Preferred: c.Nodes[i%2].Name, Media: "ram", Group: "dg0"})
	}
	return c
}

// LoadConfig reads a YAML config file over the defaults for missing
// top-level fields. Unknown keys are errors, so a typo is never ignored.
func LoadConfig(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return ParseConfig(raw, path)
}

// ParseConfig is LoadConfig on the file's bytes (path names it in errors).
func ParseConfig(raw []byte, path string) (Config, error) {
	// Durations start as unset so that an explicit 0 in the file is kept.
	c := Config{TransitionTime: unset, Interlink: InterlinkConfig{Penalty: unset}}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	def := DefaultConfig()
	if c.Target == "" {
		c.Target = def.Target
	}
	if c.Data == "" {
		c.Data = def.Data
	}
	if c.ALUA == "" {
		c.ALUA = def.ALUA
	}
	if len(c.Nodes) == 0 {
		c.Nodes = def.Nodes
	}
	if len(c.LUNs) == 0 {
		c.LUNs = def.LUNs
	}
	if c.TransitionTime == unset {
		c.TransitionTime = def.TransitionTime
	}
	if c.Interlink.Penalty == unset {
		c.Interlink.Penalty = def.Interlink.Penalty
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ValidArrayID checks an array id: 1 to 64 letters, digits, '.', '-'
// or '_'.
func ValidArrayID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("array id %q: 1 to 64 characters", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("array id %q: letters, digits, '.', '-' and '_' only", id)
		}
	}
	return nil
}

// Validate checks the configuration and fills per-LUN defaults.
func (c *Config) Validate() error {
	if c.ArrayID != "" {
		if err := ValidArrayID(c.ArrayID); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(c.Target, "iqn.") && !strings.HasPrefix(c.Target, "eui.") && !strings.HasPrefix(c.Target, "naa.") {
		return fmt.Errorf("target %q is not an iSCSI name (iqn.YYYY-MM.reverse.domain:name)", c.Target)
	}
	switch c.Fabric.Kind {
	case "", "iscsi":
		c.Fabric.Kind = "iscsi"
	case "tcmu":
		if c.Fabric.ConfigFS == "" {
			c.Fabric.ConfigFS = "/sys/kernel/config/target"
		}
		if c.Fabric.HBA == 0 {
			c.Fabric.HBA = 7712
		}
		if c.Fabric.HBA < 0 {
			return fmt.Errorf("fabric.hba must be positive, not %d", c.Fabric.HBA)
		}
	default:
		return fmt.Errorf("fabric.kind must be iscsi or tcmu, not %q", c.Fabric.Kind)
	}
	if c.ALUA != "implicit" && c.ALUA != "explicit" {
		return fmt.Errorf("alua must be implicit or explicit, not %q", c.ALUA)
	}
	if len(c.Nodes) < 1 {
		return fmt.Errorf("at least one node is needed")
	}
	nodes := map[string]bool{}
	addrs := map[string]string{}
	ports := map[string]bool{}
	for _, n := range c.Nodes {
		if n.Name == "" || nodes[n.Name] {
			return fmt.Errorf("node names must be unique and non-empty (%q)", n.Name)
		}
		nodes[n.Name] = true
		if len(n.Ports) == 0 {
			return fmt.Errorf("node %s has no ports", n.Name)
		}
		for _, p := range n.Ports {
			if p.Name == "" || ports[p.Name] {
				return fmt.Errorf("port names must be unique and non-empty (%q on node %s)", p.Name, n.Name)
			}
			ports[p.Name] = true
			_, portNum, err := net.SplitHostPort(p.Addr)
			if err != nil {
				return fmt.Errorf("port %s: address %q: %v", p.Name, p.Addr, err)
			}
			if other, dup := addrs[p.Addr]; dup && portNum != "0" {
				return fmt.Errorf("ports %s and %s both listen on %s", other, p.Name, p.Addr)
			}
			addrs[p.Addr] = p.Name
		}
	}
	ids := map[uint64]bool{}
	for i := range c.LUNs {
		l := &c.LUNs[i]
		if ids[l.ID] {
			return fmt.Errorf("LUN %d defined twice", l.ID)
		}
		if l.ID > 16383 {
			return fmt.Errorf("LUN %d: ids above 16383 are not addressable", l.ID)
		}
		ids[l.ID] = true
		if l.BlockSize == 0 {
			l.BlockSize = 512
		}
		if l.BlockSize != 512 && l.BlockSize != 4096 {
			return fmt.Errorf("LUN %d: block_size must be 512 or 4096", l.ID)
		}
		if l.PhysicalBlockSize == 0 {
			l.PhysicalBlockSize = l.BlockSize
		}
		if r := l.PhysicalBlockSize / l.BlockSize; l.PhysicalBlockSize%l.BlockSize != 0 || r&(r-1) != 0 || r > 1<<15 {
			return fmt.Errorf("LUN %d: physical_block_size must be the block size times a power of two (up to 32768)", l.ID)
		}
		if l.Size <= 0 || int64(l.Size)%int64(l.BlockSize) != 0 {
			return fmt.Errorf("LUN %d: size must be a positive multiple of the block size", l.ID)
		}
		if l.Preferred == "" {
			l.Preferred = c.Nodes[int(l.ID)%len(c.Nodes)].Name
		}
		if !nodes[l.Preferred] {
			return fmt.Errorf("LUN %d: preferred owner %q is not a node", l.ID, l.Preferred)
		}
		if l.Media == "" {
			l.Media = "ram"
		}
		if l.Group == "" {
			l.Group = "dg0"
		}
	}
	return c.validateHosts()
}

// DefaultTransitionTime is the implicit transition time reported when the
// config does not set one.
const DefaultTransitionTime = 10 * time.Second

const unset = time.Duration(-1)

func (c *Config) validateHosts() error {
	if c.TransitionTime < 0 || c.TransitionTime > 255*time.Second || c.TransitionTime%time.Second != 0 {
		return fmt.Errorf("transition_time must be whole seconds from 0s to 255s, not %v", c.TransitionTime)
	}
	if c.Interlink.Penalty < 0 {
		return fmt.Errorf("interlink penalty must not be negative")
	}
	if c.Interlink.Bandwidth == 0 {
		c.Interlink.Bandwidth = DefaultBandwidth
	}
	if err := c.validateCache(); err != nil {
		return err
	}
	names := map[string]bool{}
	inits := map[string]string{}
	for i := range c.Hosts {
		h := &c.Hosts[i]
		if h.Name == "" || names[h.Name] {
			return fmt.Errorf("host names must be unique and non-empty (%q)", h.Name)
		}
		names[h.Name] = true
		if h.Type == "" {
			h.Type = alua.HostDefault
		}
		if _, ok := alua.HostTypes[h.Type]; !ok {
			return fmt.Errorf("host %s: unknown type %q (known: %s)", h.Name, h.Type, strings.Join(alua.HostTypeNames(), ", "))
		}
		if len(h.Initiators) == 0 {
			return fmt.Errorf("host %s: no initiators", h.Name)
		}
		for _, in := range h.Initiators {
			if other, dup := inits[in]; dup {
				return fmt.Errorf("initiator %s is declared by hosts %s and %s", in, other, h.Name)
			}
			inits[in] = h.Name
		}
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	return c.validateAccess()
}

// Loopback returns the embedded default with every port on 127.0.0.1:0
// (the OS picks free ports), every LUN lunSize bytes and data under dir:
// for tests and in-process runs that must not collide with a running aluad.
func Loopback(dir string, lunSize int64) Config {
	c := DefaultConfig()
	c.Data = dir
	for i := range c.Nodes {
		for j := range c.Nodes[i].Ports {
			c.Nodes[i].Ports[j].Addr = "127.0.0.1:0"
		}
	}
	for i := range c.LUNs {
		c.LUNs[i].Size = Size(lunSize)
	}
	return c
}

func (c *Config) validateCache() error {
	cc := &c.Cache
	if cc.Mode == "" {
		cc.Mode = "write-back"
	}
	if _, err := cache.ParseMode(cc.Mode); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if cc.Size == 0 {
		cc.Size = cache.DefaultCapacity
	}
	if cc.DirtyLimit == 0 {
		cc.DirtyLimit = min(64<<20, cc.Size/2)
	}
	if cc.Size < 1<<20 || cc.DirtyLimit > cc.Size {
		return fmt.Errorf("cache: size must be at least 1MiB and dirty_limit at most the size")
	}
	if cc.DestageInterval < 0 {
		return fmt.Errorf("cache: destage_interval must not be negative")
	}
	o := c.Ownership
	if o.PathDegradedFactor != 0 && o.PathDegradedFactor <= 1 {
		return fmt.Errorf("ownership: path_degraded_factor must be above 1")
	}
	for _, d := range []time.Duration{o.Tick, o.FailbackWindow, o.DiscoveryWindow, o.Cooldown, o.PlanInterval, o.ShipWindow, o.AlertDelay} {
		if d < 0 {
			return fmt.Errorf("ownership: durations must not be negative")
		}
	}
	if o.NodeCapacity < 0 {
		return fmt.Errorf("ownership: node_capacity must not be negative")
	}
	return nil
}

// cacheConfig is the pkg/cache form of the validated cache section.
func (c *Config) cacheConfig() cache.Config {
	m, _ := cache.ParseMode(c.Cache.Mode)
	return cache.Config{Mode: m, Capacity: int64(c.Cache.Size), DirtyLimit: int64(c.Cache.DirtyLimit),
		Mirror: c.Cache.MirrorOn(), DestageInterval: c.Cache.DestageInterval}
}
