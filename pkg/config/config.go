// Package config owns the configuration file `aluad serve` reads
// (examples/aluad.yaml): it composes the sections each package owns and
// nothing else. The array's (target, nodes and ports, LUNs, interlink,
// hosts, caches, CHAP, access and mappings) is pkg/array's; ownership is
// pkg/control's (the core it runs); fabric is pkg/fabric's (which front
// end); limits is pkg/iscsi's (what initiators may hold on the embedded
// target); cluster is pkg/cluster's (controllers as processes). It decodes the file strictly (an unknown key is an error),
// fills the defaults, validates each section, then what spans sections.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/control"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/iscsi"
)

// Config is the configuration file.
type Config struct {
	array.Config `yaml:",inline"`
	// Ownership tunes the ownership core.
	Ownership control.Config `yaml:"ownership"`
	// Fabric chooses the front end hosts reach the nodes through.
	Fabric fabric.Config `yaml:"fabric"`
	// Limits bound what initiators may hold (zero: the target's defaults).
	Limits iscsi.LimitsConfig `yaml:"limits"`
	// Cluster, when present, runs each controller as a process of its own
	// (aluad controller), coordinated through etcd.
	Cluster cluster.Config `yaml:"cluster"`
}

// Default is the embedded default: 2 nodes ("a", "b") with 2 ports each
// on loopback, 8 LUNs of 1 GiB with alternating preferred owners.
func Default() Config { return Config{Config: array.DefaultConfig()} }

// Loopback is the embedded default with every port on 127.0.0.1:0 (the
// OS picks free ports), every LUN lunSize bytes and data under dir: for
// tests and in-process runs that must not collide with a running aluad.
func Loopback(dir string, lunSize int64) Config {
	return Config{Config: array.Loopback(dir, lunSize)}
}

// Load reads a YAML configuration file over the defaults for missing
// top-level fields. Unknown keys are errors, so a typo is never ignored.
func Load(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return Parse(raw, path)
}

// Parse is Load on the file's bytes (path names it in errors).
// Every error names the file, the line and the key (errors.go).
func Parse(raw []byte, path string) (Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return Config{}, decodeError(path, &root, err)
	}
	c := Config{Config: array.Blank()}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, decodeError(path, &root, err)
	}
	c.Config.Defaults()
	if err := c.Validate(); err != nil {
		return Config{}, validationError(path, &root, err)
	}
	return c, nil
}

// Validate checks every section, fills their defaults, then checks what
// spans sections.
func (c *Config) Validate() error {
	if err := c.Fabric.Validate(); err != nil {
		return err
	}
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if err := c.Ownership.Validate(); err != nil {
		return err
	}
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	var nodes []string
	for _, n := range c.Nodes {
		nodes = append(nodes, n.Name)
	}
	if err := c.Cluster.Validate(nodes); err != nil {
		return err
	}
	if c.Cluster.On() {
		if c.ArrayID == "" {
			return fmt.Errorf("cluster: set array_id: every controller must give each LUN the same WWID")
		}
		if c.Fabric.TCMU() {
			return fmt.Errorf("cluster: controllers as processes serve the embedded iSCSI target (fabric kind iscsi)")
		}
	}
	if c.Fabric.TCMU() && c.AccessControlled() {
		return fmt.Errorf("chap, mappings and access apply to the embedded iSCSI target; on the tcmu fabric LIO's ACLs and auth attributes do this")
	}
	return nil
}

// NodeTarget is the iSCSI target name a node's ports carry on the chosen
// fabric.
func (c Config) NodeTarget(node string) string { return c.Fabric.NodeTarget(c.Target, node) }
