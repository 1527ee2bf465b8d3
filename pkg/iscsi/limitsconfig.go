package iscsi

import (
	"fmt"
	"time"

	"github.com/aluad/aluad/pkg/units"
)

// LimitsConfig is the configuration file's limits section: what
// initiators may hold on the embedded target (limits.go says what each
// bound does when reached); zero keeps the default.
type LimitsConfig struct {
	MaxConnections          int           `yaml:"max_connections"`
	MaxSessions             int           `yaml:"max_sessions"`
	MaxSessionsPerInitiator int           `yaml:"max_sessions_per_initiator"`
	MaxSessionData          units.Size    `yaml:"max_session_data"`
	MaxTotalData            units.Size    `yaml:"max_total_data"`
	CmdWindow               int           `yaml:"cmd_window"`
	LoginTimeout            time.Duration `yaml:"login_timeout"`
	WriteTimeout            time.Duration `yaml:"write_timeout"`
}

// Validate checks the section.
func (l LimitsConfig) Validate() error {
	if l.MaxConnections < 0 || l.MaxSessions < 0 || l.MaxSessionsPerInitiator < 0 || l.MaxSessionData < 0 ||
		l.MaxTotalData < 0 || l.CmdWindow < 0 || l.LoginTimeout < 0 || l.WriteTimeout < 0 {
		return fmt.Errorf("limits must not be negative")
	}
	if l.CmdWindow > 1024 {
		return fmt.Errorf("limits.cmd_window must be at most 1024")
	}
	return nil
}

// Apply sets the section's bounds on a target's configuration.
func (l LimitsConfig) Apply(c *Config) {
	c.MaxConnections, c.MaxSessions, c.MaxSessionsPerInitiator = l.MaxConnections, l.MaxSessions, l.MaxSessionsPerInitiator
	c.MaxSessionData, c.MaxTotalData = int(l.MaxSessionData), int(l.MaxTotalData)
	c.CmdWindow, c.LoginTimeout, c.WriteTimeout = uint32(l.CmdWindow), l.LoginTimeout, l.WriteTimeout
}
