package qualify

import "time"

// Report is one qualification run: the steps run, what every host did in
// each, the verdicts and what to change.
type Report struct {
	Schedule string       `json:"schedule"`
	Target   string       `json:"target"`
	ALUA     string       `json:"alua"`
	Nodes    []string     `json:"nodes"`
	Start    time.Time    `json:"start"`
	End      time.Time    `json:"end"`
	Hosts    []HostReport `json:"hosts"`
	Steps    []Step       `json:"steps"`
	Results  []Result     `json:"results"`
	// Findings are the failed checks with their advice (the HTML's cards).
	Findings []Finding `json:"findings"`
	// Array are the array-side checks (every LUN back on its preferred
	// owner after an upgrade, the trace complete).
	Array []Check `json:"array_checks"`
	// Timeline is each host's completed commands per TimelineBucket and
	// node, for the charts.
	Timeline       map[string]map[string][]int `json:"timeline"`
	TimelineBucket time.Duration               `json:"timeline_bucket_ns"`
	Pass           bool                        `json:"pass"`
	// Error is why the run ended early ("": it ran every step); NotRun
	// lists the steps it did not run.
	Error  string   `json:"error,omitempty"`
	NotRun []string `json:"not_run,omitempty"`
	// Restored says what the run undid after an error (a port it had
	// taken down, a node it had failed, LUNs it had moved).
	Restored []string `json:"restored,omitempty"`
}

// HostReport is one qualified host.
type HostReport struct {
	Name string   `json:"name"`
	Type string   `json:"type"`
	LUNs []uint64 `json:"luns"`
	// Nodes is the array's view of the host per node at the start
	// (reaches, protocol-only, ...).
	Nodes  map[string]string `json:"nodes"`
	Pass   bool              `json:"pass"`
	Failed int               `json:"failed"`
	Steps  int               `json:"steps"`
}

// Step is one array event the run made (a schedule event gives one or
// more).
type Step struct {
	Index int    `json:"index"`
	Event string `json:"event"`
	Name  string `json:"name"`
	// Class: planned (a planned move the hosts should follow), failure
	// (a controller failed: the hosts must move), port (a port fault or
	// repair), restart (a drained controller restarted), discovery (the
	// paths at the start).
	Class string `json:"class"`
	// Cause is the cause of the ownership changes the step makes (manual,
	// balance, failover, failback; empty: none expected): the change a
	// host's follow is measured from.
	Cause   string    `json:"cause,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Marks   []Mark    `json:"marks"`
	Changes []Change  `json:"changes"`
	// Note says what the array did or declined (a rebalance it saw no
	// reason for).
	Note string `json:"note,omitempty"`
	// Port and Node name what a port or controller step acted on.
	Port string `json:"port,omitempty"`
	Node string `json:"node,omitempty"`
}

// Mark is one action inside a step.
type Mark struct {
	Time  time.Time `json:"time"`
	Label string    `json:"label"`
}

// Change is one ownership change the array made during a step.
type Change struct {
	Time  time.Time `json:"time"`
	LUNs  []uint64  `json:"luns"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Cause string    `json:"cause"`
	// Hold is how long the array held I/O to the batch.
	HoldMs float64 `json:"hold_ms"`
}

// Result is one host in one step.
type Result struct {
	Host string `json:"host"`
	Type string `json:"type"`
	Step int    `json:"step"`
	// FollowMs is the slowest follow over the LUNs that moved (nil: no
	// LUN the host uses moved; -1: a LUN's I/O never all reached the new
	// owner within the step).
	FollowMs *float64 `json:"follow_ms,omitempty"`
	// StallMs is the longest gap without a completed command to any LUN
	// the host uses.
	StallMs  float64        `json:"stall_ms"`
	Checks   map[string]int `json:"checks,omitempty"`
	TMFs     map[string]int `json:"tmfs,omitempty"`
	Drops    int            `json:"session_drops"`
	Logouts  int            `json:"logouts"`
	Relogins int            `json:"relogins"`
	// LoginsHere counts the logins through the port or to the node the
	// step acted on.
	LoginsHere int `json:"logins_here"`
	// RTPG: "yes" (it read RTPG after every unit attention 2A/06 it was
	// given), "no", or "" (no such unit attention).
	RTPG     string      `json:"rtpg_after_ua,omitempty"`
	LUNs     []LUNResult `json:"luns"`
	Verdict  string      `json:"verdict"` // pass, fail, n/a
	Failures []string    `json:"failures,omitempty"`
	fails    []failure
}

// LUNResult is one host's I/O to one LUN in one step.
type LUNResult struct {
	LUN uint64 `json:"lun"`
	// Moved: the LUN changed owner in the step (From -> To, the last
	// change at Moved).
	Moved   bool      `json:"moved"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to,omitempty"`
	MovedAt time.Time `json:"moved_at,omitempty"`
	// Then: the array moved the LUN again within the step (shipping it
	// back to where a host's I/O stayed, say): its cause, node and when,
	// after MovedAt. Follow is measured up to it.
	Then string `json:"then,omitempty"`
	// Until is when that next change came (zero: none; the follow window
	// is the step's end).
	Until    time.Time `json:"until,omitempty"`
	FollowMs *float64  `json:"follow_ms,omitempty"`
	// UAMs: from the change to the host's first 2A/06 for the LUN.
	UAMs    *float64 `json:"ua_ms,omitempty"`
	StallMs float64  `json:"stall_ms"`
	// StallAt is when the longest gap began.
	StallAt time.Time      `json:"stall_at"`
	Checks  map[string]int `json:"checks,omitempty"`
	TMFs    map[string]int `json:"tmfs,omitempty"`
	UA      bool           `json:"ua"`
	RTPG    bool           `json:"rtpg"`
	// OnOwner: at the end of the step all of the host's I/O to the LUN
	// arrived at its owner.
	OnOwner bool `json:"on_owner"`
	Idle    bool `json:"idle,omitempty"`
}

// Finding is a failed check with what the array observed and what to
// change.
type Finding struct {
	Host     string `json:"host"`
	Type     string `json:"type"`
	Step     int    `json:"step"`
	StepName string `json:"step_name"`
	Check    string `json:"check"`
	Observed string `json:"observed"`
	Advice   string `json:"advice"`
}

// Check is an array-side pass/fail condition.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func msp(d time.Duration) *float64 { v := ms(d); return &v }

// Failed is the report of a run that could not start (hosts not ready,
// another run reading the trace): its outputs say why, so a CI gate reading
// junit.xml fails instead of reading an old file.
func Failed(schedule string, err error) *Report {
	now := time.Now()
	return &Report{Schedule: schedule, Start: now, End: now, Error: err.Error(), Steps: []Step{{Name: "not started", Start: now, End: now}}}
}
