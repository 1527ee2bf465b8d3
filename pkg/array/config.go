package array

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/cache"
	"github.com/aluad/aluad/pkg/units"
)

// Config is the array's part of the configuration file (pkg/config
// composes the file from the sections each package owns; see
// examples/aluad.yaml): the target name, nodes, ports, LUNs, the
// interlink, hosts, caches, access control and mappings.
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
	// Auth is target-wide CHAP; hosts may carry their own.
	Auth AuthConfig `yaml:"auth"`
	// Access says what initiators no host declares may do.
	Access AccessConfig `yaml:"access"`
	// Mappings map LUNs to hosts and host groups at LUN numbers of their
	// own. With none, every admitted initiator sees every LUN at its id.
	Mappings []MappingConfig `yaml:"mappings"`
}

// CacheConfig configures every node's cache.
type CacheConfig struct {
	// Mode is write-back (the default), write-through or none.
	Mode string `yaml:"mode"`
	// Size bounds each node's cache (default 256MiB).
	Size units.Size `yaml:"size"`
	// DirtyLimit bounds each node's dirty data (default 64MiB).
	DirtyLimit units.Size `yaml:"dirty_limit"`
	// Mirror holds every acknowledged write-back page in the partner
	// node's mirror too (default true): a node crash then loses no
	// acknowledged write. Off trades that for write bandwidth.
	Mirror *bool `yaml:"mirror"`
	// DestageInterval is how often the destager runs (default 100ms).
	DestageInterval time.Duration `yaml:"destage_interval"`
}

// MirrorOn reports whether write-cache mirroring is on.
func (c CacheConfig) MirrorOn() bool { return c.Mirror == nil || *c.Mirror }

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
	ID        uint64     `yaml:"id"`
	Size      units.Size `yaml:"size"`
	Preferred string     `yaml:"preferred"`
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
	Bandwidth units.Size `yaml:"bandwidth"`
}

// DefaultBandwidth is a 10 Gbit/s interlink.
const DefaultBandwidth = 1250 * 1000 * 1000

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

// Blank is the array's section before a file is decoded over it:
// durations start as unset so that an explicit 0 in the file is kept.
func Blank() Config {
	return Config{TransitionTime: unset, Interlink: InterlinkConfig{Penalty: unset}}
}

// Defaults fills what a decoded file left out with the embedded default's
// values (top-level fields; Validate fills the per-LUN and per-section
// defaults).
func (c *Config) Defaults() {
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
			if other, dup := inits[strings.ToLower(in)]; dup {
				return fmt.Errorf("initiator %s is declared by hosts %s and %s", in, other, h.Name)
			}
			inits[strings.ToLower(in)] = h.Name
		}
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
		c.LUNs[i].Size = units.Size(lunSize)
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
	return nil
}

// cacheConfig is the pkg/cache form of the validated cache section.
func (c *Config) cacheConfig() cache.Config {
	m, _ := cache.ParseMode(c.Cache.Mode)
	return cache.Config{Mode: m, Capacity: int64(c.Cache.Size), DirtyLimit: int64(c.Cache.DirtyLimit),
		Mirror: c.Cache.MirrorOn(), DestageInterval: c.Cache.DestageInterval}
}
