package api

import (
	"time"

	"github.com/aluad/aluad/pkg/array"
)

// Event kinds: what the array learns about hosts and what it changes, and
// what its operators do.
const (
	EventLogin  = "login"
	EventLogout = "logout"
	EventRTPG   = "rtpg"
	// EventUA: a unit attention was reported to a nexus (Reason: "2A/06").
	EventUA   = "ua"
	EventIO   = "io"
	EventALUA = "alua"
	// EventReport: a report condition raised or cleared by the ownership core.
	EventReport = "report"
	// EventFault: a fault injected or cleared.
	EventFault = "fault"
	// EventPath: one interval of a nexus's exchanges as the fabric saw
	// them (commands answered, summed exchange time): Path Degraded's input.
	EventPath = "path"
	// EventMapping: the LUN map changed (Reason says how, Initiator who asked).
	EventMapping = "mapping"
	// EventHost: the declared hosts changed (Reason says how, Initiator
	// who asked).
	EventHost = "host"
	// EventAudit: a state-changing management call (Reason: method, path,
	// outcome; Initiator: who made it).
	EventAudit = "audit"
	// EventState: the state directory's saved state was rejected.
	EventState = "state"
	// EventHandoff: a host of a STANDBY type had its non-owner paths for
	// a node's LUNs handed off to ANO, or back (Host, Node, Reason).
	EventHandoff = "handoff"
)

// StatusInfo is GET /v1/status: the array at a glance.
type StatusInfo struct {
	Target    string     `json:"target"`
	ALUA      string     `json:"alua"`
	Ownership bool       `json:"ownership_core"`
	Nodes     []NodeInfo `json:"nodes"`
	LUNs      int        `json:"luns"`
	// LUNsOffPreferred counts LUNs not on their preferred owner.
	LUNsOffPreferred int            `json:"luns_off_preferred"`
	Hosts            int            `json:"hosts"`
	Unknown          int            `json:"unknown_initiators"`
	Sessions         int            `json:"sessions"`
	Reports          map[string]int `json:"reports"` // by severity
	Time             time.Time      `json:"time"`
	// Access: "open" (nothing mapped: every admitted initiator sees every
	// LUN) or "mapped"; UnknownInitiators the policy for undeclared ones.
	Access            string `json:"access"`
	Mappings          int    `json:"mappings"`
	UnknownInitiators string `json:"unknown_initiators_policy"`
	// State is the state directory's health (nil: no state kept).
	State *StateInfo `json:"state,omitempty"`
	// Controller names the node this API's process serves when the
	// controllers run as processes of their own (aluad controller): its
	// views and trace are that node's only. Empty for the embedded array.
	Controller string `json:"controller,omitempty"`
}

// NodeInfo is one storage node.
type NodeInfo struct {
	Name    string     `json:"name"`
	Up      bool       `json:"up"`
	GroupID uint16     `json:"group_id"`
	Ports   []PortInfo `json:"ports"`
	// Owned and Preferred count the LUNs the node owns and is home to.
	Owned     int `json:"owned"`
	Preferred int `json:"preferred"`
	// Load, Utilisation and Expansion are the ownership core's figures
	// (work per tick served as owner, over capacity, and the response
	// time over the best seen).
	Load        float64 `json:"load"`
	Utilisation float64 `json:"utilisation"`
	Expansion   float64 `json:"expansion"`
	// Capacity is the node's work units per tick the core plans with
	// (ownership.node_capacity, or set live): Utilisation is Load over it.
	Capacity float64 `json:"capacity"`
}

// PortInfo is one target port.
type PortInfo struct {
	Name       string `json:"name"`
	Node       string `json:"node"`
	Addr       string `json:"addr"`
	RelativeID uint16 `json:"relative_id"`
	GroupID    uint16 `json:"group_id"`
	Up         bool   `json:"up"`
	Sessions   int    `json:"sessions"`
}

// HostInfo is a host: declared in the config, or an unknown initiator
// that logged in (Declared false, type default).
type HostInfo struct {
	Name     string `json:"name"`
	Declared bool   `json:"declared"`
	Type     string `json:"type"`
	TypeDoc  string `json:"type_doc"`
	// NonOwner is the ALUA state the host sees on a non-owner group.
	NonOwner    string `json:"non_owner_state"`
	FollowsALUA bool   `json:"follows_alua"`
	// Observed is what the host was seen to do after the array's planned
	// moves of its LUNs: "follows", "does not follow" or "unknown" (no
	// move watched yet); LastFollow when it last followed one.
	Observed   string     `json:"observed"`
	LastFollow *time.Time `json:"last_follow,omitempty"`
	// RTPG: it has read REPORT TARGET PORT GROUPS (ExtendedRTPG: with the
	// extended header, as Linux scsi_dh_alua does).
	RTPG         bool `json:"rtpg"`
	ExtendedRTPG bool `json:"extended_rtpg"`
	// SuggestedType is the host type its behaviour, IQN naming authority
	// and command pattern fit, when that is not its type; SuggestWhy the
	// evidence. The array never changes a declared type by itself.
	SuggestedType string   `json:"suggested_type,omitempty"`
	SuggestWhy    string   `json:"suggest_why,omitempty"`
	Initiators    []string `json:"initiators"`
	Sessions      int      `json:"sessions"`
	// Group is the host group; Auth how it logs in (none, chap,
	// chap-mutual; never a secret); LUNs what it sees, host LUN -> LUN.
	Group string            `json:"group,omitempty"`
	Auth  string            `json:"auth"`
	LUNs  map[uint64]uint64 `json:"luns"`
	// Per node: reaches (paths in use), protocol-only (logged in, never
	// discovered), lost (reached before, not now), none, node-offline.
	Nodes map[string]string `json:"nodes"`
}

// PathInfo is one path (I_T nexus) with its counters: the per-path load
// view (reference 000's "ra mlm load show").
type PathInfo struct {
	// State: "up" (logged in), or "failed": it ended by a fault (Reason
	// says how, Since when) and the host has not logged in through that
	// port again. A path the host logged out of on purpose is not listed.
	State      string    `json:"state"`
	Reason     string    `json:"reason,omitempty"`
	Host       string    `json:"host"`
	Initiator  string    `json:"initiator"`
	ISID       string    `json:"isid"`
	Node       string    `json:"node"`
	Port       string    `json:"port"`
	RelativeID uint16    `json:"relative_id"`
	GroupID    uint16    `json:"group_id"`
	Since      time.Time `json:"since"`
	// Commands, bytes and the device server's mean service time (µs),
	// since login.
	Commands     uint64  `json:"commands"`
	BytesRead    uint64  `json:"bytes_read"`
	BytesWritten uint64  `json:"bytes_written"`
	NonOptimized uint64  `json:"non_optimized"`
	ServiceUs    float64 `json:"service_us"`
	// Exchanges and their mean latency (µs), fabric included.
	Exchanges uint64  `json:"exchanges"`
	LatencyUs float64 `json:"latency_us"`
	// MBps is the last stats interval's rate, AvgMBps the rate since login.
	MBps    float64 `json:"mbps"`
	AvgMBps float64 `json:"avg_mbps"`
	// Expansion is the core's latency expansion factor (0: not judged
	// yet); Degraded its Path Degraded verdict; Discovered: the host's
	// multipath driver uses the path (RTPG or I/O seen).
	Expansion  float64   `json:"expansion"`
	Degraded   bool      `json:"degraded"`
	Discovered bool      `json:"discovered"`
	LUNs       []PathLUN `json:"luns"`
}

// PathLUN is one LUN as seen on one path: its ALUA state for this host,
// whether the path carried its I/O in the last interval (INU, in use) or
// not (RDY), and its rates.
type PathLUN struct {
	LUN     uint64  `json:"lun"`
	State   string  `json:"state"`
	InUse   bool    `json:"in_use"`
	MBps    float64 `json:"mbps"`
	AvgMBps float64 `json:"avg_mbps"`
}

// PortLatency is GET /v1/latency: every port's recent intervals.
type PortLatency struct {
	Node    string          `json:"node"`
	Port    string          `json:"port"`
	Samples []LatencySample `json:"samples"`
}

// RebalanceReply is POST /v1/rebalance.
type RebalanceReply struct {
	Moves   int         `json:"moves"`
	Reason  string      `json:"reason,omitempty"`
	Batches []BatchInfo `json:"batches"`
}

// BatchInfo is one planned batch.
type BatchInfo struct {
	LUNs  []uint64 `json:"luns"`
	To    string   `json:"to"`
	Cause string   `json:"cause"`
}

// Rebalance asks the ownership core for a balance plan now.
// ClearRequest names a latched report to clear: path-flapping with its
// LUN, or host-type-incorrect with its host.
type ClearRequest struct {
	Condition string `json:"condition"`
	LUN       uint64 `json:"lun"`
	Host      string `json:"host"`
	Node      string `json:"node,omitempty"`
}

// Event is one entry of the feed. Nexus events carry the initiator name,
// ISID, target port and node; io events the counts of one interval.
type Event struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Kind       string    `json:"kind"`
	Initiator  string    `json:"initiator,omitempty"`
	ISID       string    `json:"isid,omitempty"`
	Host       string    `json:"host,omitempty"`
	TargetPort uint16    `json:"target_port,omitempty"`
	Node       string    `json:"node,omitempty"`
	LUN        *uint64   `json:"lun,omitempty"`
	// Extended: the RTPG asked for the extended header.
	Extended bool          `json:"extended,omitempty"`
	Reason   string        `json:"reason,omitempty"`
	IO       *IOInterval   `json:"io,omitempty"`
	Change   *ChangeInfo   `json:"change,omitempty"`
	Report   *ReportInfo   `json:"report,omitempty"`
	Fault    *Fault        `json:"fault,omitempty"`
	Path     *PathInterval `json:"path,omitempty"`
}

// PathInterval is one interval of a nexus's exchanges: Exchange/Exchanges
// is the mean time from command in to status out, fabric included.
type PathInterval struct {
	Interval  time.Duration `json:"interval_ns"`
	Exchanges uint64        `json:"exchanges"`
	Exchange  time.Duration `json:"exchange_ns"`
}

// ReportInfo is a report condition as the feed reports it.
type ReportInfo struct {
	Condition string `json:"condition"`
	Raised    bool   `json:"raised"`
	Host      string `json:"host,omitempty"`
	Node      string `json:"node,omitempty"`
	LUN       uint64 `json:"lun"`
	Port      uint16 `json:"port,omitempty"`
	Cause     string `json:"cause,omitempty"`
}

// IOInterval is the I/O of one nexus to one LUN over one interval.
type IOInterval struct {
	Interval time.Duration `json:"interval_ns"`
	Reads    uint64        `json:"reads"`
	Writes   uint64        `json:"writes"`
	Other    uint64        `json:"other"`
	// Syncs: SYNCHRONIZE CACHE and VERIFY that completed GOOD (also in
	// Other). Reads+Writes+Syncs are the media commands that show the
	// host's driver uses the path.
	Syncs        uint64 `json:"syncs"`
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
	// Busy is the summed command time; Busy/(Reads+Writes+Other) is the
	// mean response time inside the array.
	Busy time.Duration `json:"busy_ns"`
	// NonOptimized counts the commands that arrived while this path was
	// active/non-optimized (the array forwarded them to the owner).
	NonOptimized uint64 `json:"non_optimized"`
}

// ChangeInfo is an ALUA change as the feed reports it.
type ChangeInfo struct {
	LUNs   []uint64 `json:"luns"`
	From   string   `json:"from,omitempty"`
	To     string   `json:"to,omitempty"`
	Cause  string   `json:"cause"`
	Failed bool     `json:"failed,omitempty"`
	Error  string   `json:"error,omitempty"`
	// Flush is the old owner's destage under I/O; Stop is how long I/O
	// to the batch was held.
	Flush time.Duration `json:"flush_ns"`
	Stop  time.Duration `json:"stop_ns"`
	// Replayed counts mirrored pages a takeover replayed; Lost lists the
	// acknowledged data a crash lost (mirroring off).
	Replayed int          `json:"replayed_pages,omitempty"`
	Lost     []array.Loss `json:"lost,omitempty"`
}

// Fault is one fault to inject on the running daemon.
type Fault struct {
	Kind string `json:"kind"`
	Node string `json:"node,omitempty"`
	// Port is a port name (a0) or relative target port id (1).
	Port      string        `json:"port,omitempty"`
	Initiator string        `json:"initiator,omitempty"`
	Delay     time.Duration `json:"delay_ns,omitempty"`
}

// FaultResult is what an injected fault did.
type FaultResult struct {
	Fault  Fault       `json:"fault"`
	Change *ChangeInfo `json:"change,omitempty"`
}

// Fault kinds that Inject understands. Each has the wire behaviour of
// the real event (fabric.PortMode), since a host's recovery time depends
// on how it learns of the fault.
const (
	// FaultPowerLoss: a controller loses power. Its cache is lost (the
	// partner's mirror takes over) and its ports go silent: no answer to
	// commands in flight, no FIN or RST, no answer to new connections.
	FaultPowerLoss = "power-loss"
	// FaultPanic: a controller panics and reboots. Its cache is lost, its
	// connections are reset and its portals refuse connections until it
	// is back (restart).
	FaultPanic = "panic"
	// FaultCrash: a controller's target software dies while its OS runs
	// on. Its cache is lost, its connections are closed (FIN) and new
	// ones are closed as soon as they are accepted.
	FaultCrash   = "crash"
	FaultRestart = "restart" // a failed node comes back (empty cache)
	// FaultPortDown: a target port is disabled: connections closed, new
	// ones closed at once. FaultPortUp brings a port back from any fault.
	FaultPortDown = "port-down"
	FaultPortUp   = "port-up"
	// FaultCablePull: one port loses its link: silent on that port only.
	// FaultCablePlug restores it (the connections it held are reset).
	FaultCablePull = "cable-pull"
	FaultCablePlug = "cable-plug"
	FaultPathDown  = "path-down" // one initiator's path to a port is cut
	FaultPathUp    = "path-up"
	FaultDelay     = "delay" // latency added on a port (or one initiator's path to it)
	FaultClear     = "clear" // every port, path and delay restored (nodes stay as they are)
	// FaultInterlinkCut: a controller process's link to the node named is
	// cut at its end, as a network fault would (what it sends is held; the
	// peer learns of it by the heartbeats). FaultInterlinkRestore repairs
	// it (and ends a delay); FaultInterlinkDelay adds latency to what this
	// end sends. Controllers as processes only (aluad controller).
	FaultInterlinkCut     = "interlink-cut"
	FaultInterlinkRestore = "interlink-restore"
	FaultInterlinkDelay   = "interlink-delay"
	// FaultMediaDelay: every read, write and sync of this controller
	// process's LUN files waits the delay first (0 ends it): a slow or
	// stalled file system. Controllers as processes only.
	FaultMediaDelay = "media-delay"
)

// FaultKinds lists the kinds in the order the CLI shows them.
var FaultKinds = []string{FaultPowerLoss, FaultPanic, FaultCrash, FaultRestart, FaultPortDown, FaultPortUp,
	FaultCablePull, FaultCablePlug, FaultPathDown, FaultPathUp, FaultDelay, FaultClear,
	FaultInterlinkCut, FaultInterlinkRestore, FaultInterlinkDelay, FaultMediaDelay}

// LUNInfo is one LUN as the control API reports it.
type LUNInfo struct {
	ID         uint64 `json:"id"`
	Owner      string `json:"owner"`
	Preferred  string `json:"preferred"`
	Media      string `json:"media"`
	Group      string `json:"group"`
	Moving     bool   `json:"moving"`
	Generation uint64 `json:"generation"`
	// Size in bytes, the logical and physical block sizes (READ CAPACITY
	// 16), and the identity hosts see: WWID is the NAA designator of
	// VPD page 83h (Linux multipath names the device 3 followed by its
	// hex digits), Serial the unit serial number (VPD page 80h).
	Size              int64       `json:"size"`
	BlockSize         int         `json:"block_size"`
	PhysicalBlockSize int         `json:"physical_block_size"`
	WWID              string      `json:"wwid"`
	Serial            string      `json:"serial"`
	Groups            []GroupInfo `json:"groups"`
	Nodes             []NodeIO    `json:"nodes"`
}

// GroupInfo is a target port group's state (as a "default" host sees it).
type GroupInfo struct {
	Node   string   `json:"node"`
	ID     uint16   `json:"id"`
	State  string   `json:"state"`
	Pref   bool     `json:"pref"`
	Status byte     `json:"status"`
	Ports  []uint16 `json:"ports"`
}

// NodeIO counts the commands that arrived at a node for a LUN.
type NodeIO struct {
	Node           string `json:"node"`
	Commands       uint64 `json:"commands"`
	Bytes          uint64 `json:"bytes"`
	Forwarded      uint64 `json:"forwarded"`
	ForwardedBytes uint64 `json:"forwarded_bytes"`
}

// PathIO is the cumulative I/O of one nexus (host path) to one LUN.
type PathIO struct {
	Initiator  string `json:"initiator"`
	ISID       string `json:"isid,omitempty"`
	Host       string `json:"host,omitempty"`
	TargetPort uint16 `json:"target_port"`
	Node       string `json:"node,omitempty"`
	LUN        uint64 `json:"lun"`
	Reads      uint64 `json:"reads"`
	Writes     uint64 `json:"writes"`
	Other      uint64 `json:"other"`
	// Media counts READs and WRITEs whatever their status; LastMedia is
	// the arrival of the latest (zero if none).
	Media        uint64    `json:"media"`
	LastMedia    time.Time `json:"last_media"`
	NonOptimized uint64    `json:"non_optimized"`
	Gone         bool      `json:"gone,omitempty"`
}

// CapacityRequest is the body of PUT /v1/nodes/{name}/capacity.
type CapacityRequest struct {
	Capacity float64 `json:"capacity"`
}

// MoveRequest is the body of POST /v1/luns/{id}/move.
type MoveRequest struct {
	To string `json:"to"`
}

// EventsReply is the answer of GET /v1/events.
type EventsReply struct {
	Events []Event `json:"events"`
	Lost   uint64  `json:"lost"`
}

// Connectivity is GET /v1/connectivity: rows of hosts, columns of nodes.
type Connectivity struct {
	Nodes []string          `json:"nodes"`
	Hosts []ConnectivityRow `json:"hosts"`
}

// ConnectivityRow is one host's row.
type ConnectivityRow struct {
	Host     string `json:"host"`
	Declared bool   `json:"declared"`
	Type     string `json:"type"`
	// Cells are in node order: reaches, protocol-only, lost, none,
	// node-offline (logged-in when the core is off).
	Cells []string `json:"cells"`
}

// DefaultAPI is where the management API listens unless told otherwise.
const DefaultAPI = "127.0.0.1:8090"

// MappingReply answers a mapping change: the map now, and how many logged-in
// nexuses were told (3F/0E).
type MappingReply struct {
	Mappings []array.MappingConfig `json:"mappings"`
	Told     int                   `json:"nexuses_told"`
	Changed  []string              `json:"initiators_changed"`
}

// HostSpec is a declared host as aluad host add and POST /v1/hosts give
// it (CHAP credentials are set in the config file only).
type HostSpec struct {
	Name       string   `json:"name"`
	Type       string   `json:"type,omitempty"`
	Initiators []string `json:"initiators"`
	Group      string   `json:"group,omitempty"`
}

// HostChange is PATCH /v1/hosts/{name}: what is set changes.
type HostChange struct {
	Type             string   `json:"type,omitempty"`
	AddInitiators    []string `json:"add_initiators,omitempty"`
	RemoveInitiators []string `json:"remove_initiators,omitempty"`
	// Group: the host group ("-" takes the host out of its group).
	Group string `json:"group,omitempty"`
}

// HostsReply is the answer to a change of the declared hosts.
type HostsReply struct {
	Hosts []HostSpec `json:"hosts"`
	// Retyped: initiators whose access states changed with their host's
	// type (their nexuses were told 2A/06); Views: those whose LUN view
	// changed (told 3F/0E; "*": undeclared initiators'); Told: nexuses
	// told 3F/0E.
	Retyped []string `json:"initiators_retyped"`
	Views   []string `json:"initiators_view_changed"`
	Told    int      `json:"nexuses_told"`
}

// PortalInfo describes one listening target port.
type PortalInfo struct {
	Node, Port, Addr, Target string
	RelativeID               uint16
}

// LatencySample is one stats interval of one port.
type LatencySample struct {
	Time time.Time `json:"time"`
	IOPS float64   `json:"iops"`
	MBps float64   `json:"mbps"`
	// MeanUs is the mean exchange time (command in to status out) in µs;
	// 0 when the port answered nothing in the interval.
	MeanUs float64 `json:"mean_us"`
}

// ReportRecord is one raise or clear in the report history.
type ReportRecord struct {
	Time time.Time `json:"time"`
	ReportInfo
}

// StateInfo is the state file's part of GET /v1/status.
type StateInfo struct {
	Dir       string `json:"dir"`
	LoadError string `json:"load_error,omitempty"`
	SaveError string `json:"save_error,omitempty"`
	Saves     int    `json:"saves"`
}

// NewChangeInfo is an array change as the feed and the API report it.
func NewChangeInfo(c array.Change) *ChangeInfo {
	ci := &ChangeInfo{LUNs: c.LUNs, From: c.From, To: c.To, Cause: string(c.Cause), Failed: c.Failed,
		Flush: c.Flush, Stop: c.Stop, Replayed: c.Replayed, Lost: c.Lost}
	if c.Err != nil {
		ci.Error = c.Err.Error()
	}
	return ci
}

// TraceReply is GET /v1/trace: the array's command trace (what aluad
// qualify measures hosts from), read from cursors. The first read turns
// the trace on; it goes off a minute after the last read, or at DELETE
// /v1/trace. Buckets are BucketNs long; a bucket row is one nexus's
// commands to one LUN within one bucket.
type TraceReply struct {
	BucketNs   int64         `json:"bucket_ns"`
	Buckets    []TraceBucket `json:"buckets"`
	Notes      []TraceNote   `json:"notes"`
	NextBucket uint64        `json:"next_bucket"`
	NextNote   uint64        `json:"next_note"`
	// Lost counts rows the array's bounded trace dropped before a read;
	// Skipped the rows this read's cursors asked for that were no longer
	// kept (dropped unread, or taken by another reader's cursor).
	Lost    uint64 `json:"lost"`
	Skipped uint64 `json:"skipped"`
	// DelayNs: buckets stay open this long after their time; a read sees
	// the older ones.
	DelayNs int64 `json:"delay_ns"`
	// Readers counts the other readers (the reader= of their reads) that
	// read the trace in the last 5 s: the trace keeps one reader's unread
	// rows, so a second one would take the first one's.
	Readers int `json:"other_readers"`
	// Started is when the trace was turned on (Unix ns): when it changes
	// between two reads, the trace was stopped and started again (by
	// DELETE, or a minute unread) and the cursors start from 0.
	Started int64 `json:"started"`
}

// TraceNexus names the path of a trace row.
type TraceNexus struct {
	Initiator  string `json:"initiator"`
	ISID       string `json:"isid,omitempty"`
	Host       string `json:"host,omitempty"`
	TargetPort uint16 `json:"target_port"`
	Node       string `json:"node,omitempty"`
}

// TraceBucket counts one nexus's commands to one LUN in one bucket:
// Arrived media commands (READ, WRITE, SYNCHRONIZE CACHE, VERIFY) that
// arrived, whatever their status; Good media commands that completed
// GOOD (Done: completed, whatever their status); Checks commands that
// ended in CHECK CONDITION; NonOptimized
// arrivals on an active/non-optimized port. Start is Unix nanoseconds;
// the First/Last times are nanoseconds after Start (0 when the count is 0).
type TraceBucket struct {
	TraceNexus
	LUN          uint64 `json:"lun"`
	Start        int64  `json:"start"`
	Arrived      uint32 `json:"arrived,omitempty"`
	Done         uint32 `json:"done,omitempty"`
	Good         uint32 `json:"good,omitempty"`
	Checks       uint32 `json:"checks,omitempty"`
	NonOptimized uint32 `json:"non_optimized,omitempty"`
	FirstArrival int64  `json:"first_arrival,omitempty"`
	LastArrival  int64  `json:"last_arrival,omitempty"`
	FirstGood    int64  `json:"first_good,omitempty"`
	LastGood     int64  `json:"last_good,omitempty"`
}

// TraceNote is one CHECK CONDITION (Kind "check": Opcode and Sense
// "KEY/ASC/ASCQ" in hex) or task management function (Kind "tmf":
// Function abort-task, abort-task-set, clear-aca, clear-task-set,
// lun-reset, target-warm-reset, target-cold-reset) at Time (Unix ns).
type TraceNote struct {
	TraceNexus
	Time     int64  `json:"time"`
	LUN      uint64 `json:"lun"`
	Kind     string `json:"kind"`
	Opcode   byte   `json:"opcode,omitempty"`
	Sense    string `json:"sense,omitempty"`
	Function string `json:"function,omitempty"`
}

// Trace note kinds.
const (
	TraceCheck = "check"
	TraceTMF   = "tmf"
)

// TMFNames are the task management functions' names by SAM-5 code.
var TMFNames = map[int]string{1: "abort-task", 2: "abort-task-set", 3: "clear-aca", 4: "clear-task-set",
	5: "lun-reset", 6: "target-warm-reset", 7: "target-cold-reset"}
