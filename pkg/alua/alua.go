// Package alua is the vocabulary of asymmetric logical unit access that
// every layer shares: the access states a target port group reports
// (SPC-4 5.15.2.4), the status codes that say why a group's state last
// changed (SPC-4 6.36), a host's request for a group's state (SET TARGET
// PORT GROUPS), and the causes of an ownership change. It imports
// nothing: the device server, the array, the ownership core and the lab
// use these names and no others.
package alua

// AccessState is an asymmetric access state, with the SPC-4 codes (the
// value REPORT TARGET PORT GROUPS carries).
type AccessState byte

// The asymmetric access states (SPC-4 table 38).
const (
	ActiveOptimized    AccessState = 0x0
	ActiveNonOptimized AccessState = 0x1
	Standby            AccessState = 0x2
	Unavailable        AccessState = 0x3
	Offline            AccessState = 0xe
	Transitioning      AccessState = 0xf
)

func (s AccessState) String() string {
	switch s {
	case ActiveOptimized:
		return "AO"
	case ActiveNonOptimized:
		return "ANO"
	case Standby:
		return "STANDBY"
	case Unavailable:
		return "UNAVAILABLE"
	case Offline:
		return "OFFLINE"
	case Transitioning:
		return "TRANSITIONING"
	}
	return "unknown"
}

// Status codes of a target port group descriptor (SPC-4 6.36 table 268):
// why the group's state last changed.
const (
	StatusNone     byte = 0x00
	StatusExplicit byte = 0x01 // altered by SET TARGET PORT GROUPS
	StatusImplicit byte = 0x02 // altered by implicit asymmetric access behaviour
)

// GroupRequest is the state a host asks for one target port group (a SET
// TARGET PORT GROUPS descriptor, SPC-4 6.46 table 285).
type GroupRequest struct {
	Group uint16
	State AccessState
}

// Cause says why ownership or an access state changed.
type Cause string

// Causes of a change.
const (
	CauseManual   Cause = "manual"   // an operator's move (aluad move)
	CauseSTPG     Cause = "stpg"     // a host's SET TARGET PORT GROUPS (explicit mode)
	CauseFailover Cause = "failover" // the owner node failed
	CauseFailback Cause = "failback" // back to the preferred owner after recovery
	CauseBalance  Cause = "balance"  // load balance
	CauseShipping Cause = "shipping" // most I/O arrives at a non-owner node
	CauseRollback Cause = "rollback" // a batch the array could not carry out, reported back to the core
	CauseNodeDown Cause = "node-down"
	CauseNodeUp   Cause = "node-up"
)
