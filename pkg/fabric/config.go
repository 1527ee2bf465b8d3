package fabric

import (
	"fmt"
	"strings"
)

// The front ends a configuration may choose.
const (
	// KindISCSI is the embedded pure-Go iSCSI target (the default).
	KindISCSI = "iscsi"
	// KindTCMU is LIO's iSCSI target over target_core_user backstores, on
	// a Linux host with LIO (tcmu-handler/).
	KindTCMU = "tcmu"
)

// Config is the configuration file's fabric section: the front end hosts
// reach the nodes through.
type Config struct {
	// Kind is KindISCSI or KindTCMU.
	Kind string `yaml:"kind"`
	// ConfigFS is LIO's configfs directory (tcmu; default
	// /sys/kernel/config/target).
	ConfigFS string `yaml:"configfs"`
	// HBA numbers the user_<HBA> backstore directory aluad owns (tcmu;
	// default 7712).
	HBA int `yaml:"hba"`
}

// TCMU reports whether the LIO/TCMU front end is chosen.
func (c Config) TCMU() bool { return c.Kind == KindTCMU }

// Validate checks the section and fills its defaults.
func (c *Config) Validate() error {
	switch c.Kind {
	case "", KindISCSI:
		c.Kind = KindISCSI
	case KindTCMU:
		if c.ConfigFS == "" {
			c.ConfigFS = "/sys/kernel/config/target"
		}
		if c.HBA == 0 {
			c.HBA = 7712
		}
		if c.HBA < 0 {
			return fmt.Errorf("fabric.hba must be positive, not %d", c.HBA)
		}
	default:
		return fmt.Errorf("fabric.kind must be iscsi or tcmu, not %q", c.Kind)
	}
	return nil
}

// NodeTarget is the iSCSI target name a node's ports carry: the array's
// name on the pure-Go fabric; on LIO, one target per node, the array's
// name with ".<node>" added.
func (c Config) NodeTarget(target, node string) string {
	if c.TCMU() {
		return target + "." + strings.ToLower(node)
	}
	return target
}
