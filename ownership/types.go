package ownership

import "github.com/aluad/aluad/pkg/alua"

// Event is an input to Step.
type Event interface{ event() }

// Nexus identifies one I_T nexus as the core sees it: which host, through
// which initiator port (initiator name + ISID), to which target port of
// which node.
type Nexus struct {
	Host      string
	Initiator string
	ISID      string
	Port      uint16
	Node      string
}

// Events.
type (
	// Tick advances logical time by one tick.
	Tick struct{}
	// NodeState: a node came up or went down.
	NodeState struct {
		Node string
		Up   bool
	}
	// PortState: a target port came up or went down; nexuses through a
	// down port carry nothing.
	PortState struct {
		Node string
		Port uint16
		Up   bool
	}
	// Login of one nexus.
	Login struct{ Nexus Nexus }
	// Logout: one nexus ended. Orderly says the host ended it with a
	// Logout Request (a reboot, a shutdown, an admin removing a path):
	// a departure, not a fault. Anything else (connection lost, a ping
	// unanswered, a port down, a reset) is a fault.
	Logout struct {
		Nexus   Nexus
		Orderly bool
	}
	// RTPG: a REPORT TARGET PORT GROUPS for LUN arrived on a nexus: the
	// host's multipath driver has discovered that path and uses the LUN.
	// Extended: it asked for the extended header (scsi_dh_alua does).
	RTPG struct {
		Nexus    Nexus
		LUN      uint64
		Extended bool
	}
	// IO is one interval of I/O from Host to LUN that arrived at Node.
	IO struct {
		Host string
		Node string
		LUN  uint64
		Ops  float64 // commands in the interval
		// Media counts the media commands (READ, WRITE, WRITE SAME, UNMAP,
		// COMPARE AND WRITE, SYNCHRONIZE CACHE...) that completed GOOD:
		// the only I/O that shows the host's driver uses the path. A disk
		// probe (INQUIRY, TEST UNIT READY, READ CAPACITY) and commands
		// that failed are in Ops but not here.
		Media float64
		Bytes float64
		// RespTime is the mean response time in the array, in
		// microseconds.
		RespTime float64
		// Ticks is the interval length (>= 1).
		Ticks int
	}
	// HostDecl declares a host: its type and initiator names.
	HostDecl struct {
		Host string
		Type alua.HostType
	}
	// Rehome: an operator gave a logged-in initiator to another host
	// (declared a host for it, moved it between hosts, or removed its
	// host: To is then the initiator's own name). Its nexuses are To's
	// from now on, with what each path had shown; for From it is neither
	// a departure nor a fault. Declare To (HostDecl) first.
	Rehome struct {
		Initiator string
		From, To  string
	}
	// HandoffSync: the array's hand-offs for Host were set outside the
	// core (an operator's change of the host hands its paths off until
	// the core says otherwise): the core says again, for every node, what
	// they must be (Ready.Handoffs), changed or not.
	HandoffSync struct{ Host string }
	// LUNDecl declares a LUN and its current owner.
	LUNDecl struct {
		LUN       uint64
		Preferred string
		Owner     string
		Media     string
		Group     string
	}
	// NodeDecl declares a node and its capacity in work units per tick.
	NodeDecl struct {
		Node     string
		Capacity float64
	}
	// PathLatency is one interval of a nexus's exchanges as the fabric
	// saw them: commands answered and their mean exchange time (command
	// arrival to status sent, data transfers and the fabric included),
	// in microseconds. It feeds Path Degraded.
	PathLatency struct {
		Nexus    Nexus
		Ops      float64
		Exchange float64
	}
	// ClearReport is the operator clearing a latched condition: Path
	// Flapping for LUN (damping ends; failback may follow), Host Type
	// Incorrect for Host (the observations start again) or Node Unstable
	// for Node (its failures are forgotten; failback may follow).
	ClearReport struct {
		Condition Condition
		LUN       uint64
		Host      string
		Node      string
	}
	// Rebalance asks for a balance plan now ("rebalance now"): the plan
	// interval and the stress gate are skipped, the ROI check is not.
	// Ready.Rebalance says what came of it.
	Rebalance struct{}
	// OwnerChanged reports a change the core did not decide (an operator's
	// move, or a host's STPG in explicit mode), or a move of the core's
	// that failed and was rolled back (Owner is then the old owner).
	OwnerChanged struct {
		LUN   uint64
		Owner string
		Cause alua.Cause
	}
)

func (Tick) event()         {}
func (NodeState) event()    {}
func (PortState) event()    {}
func (Login) event()        {}
func (Logout) event()       {}
func (RTPG) event()         {}
func (IO) event()           {}
func (HostDecl) event()     {}
func (Rehome) event()       {}
func (HandoffSync) event()  {}
func (LUNDecl) event()      {}
func (NodeDecl) event()     {}
func (OwnerChanged) event() {}
func (PathLatency) event()  {}
func (Rebalance) event()    {}
func (ClearReport) event()  {}

// Batch is a set of LUNs to move to one node together.
type Batch struct {
	LUNs  []uint64
	To    string
	Cause alua.Cause
	// Class is the LUN performance class (media/group) of every LUN in it.
	Class string
	// Stop is the expected I/O stop time of the batch, in microseconds.
	Stop float64
}

// Ready is what the core decided since the last Advance.
type Ready struct {
	Batches []Batch
	Reports []ReportChange
	// Rebalance answers a Rebalance event (nil: none was asked for).
	Rebalance *RebalanceResult
	// Handoffs are the STANDBY hand-offs that changed (handoff.go).
	Handoffs []Handoff
}

// RebalanceResult is what an asked-for rebalance decided.
type RebalanceResult struct {
	// Moves counts the LUNs planned to move (they are in Batches).
	Moves int
	// Reason says why nothing moves when Moves is 0.
	Reason string
}

// Empty reports whether there is nothing to do.
func (r Ready) Empty() bool {
	return len(r.Batches) == 0 && len(r.Reports) == 0 && r.Rebalance == nil && len(r.Handoffs) == 0
}
