package ownership

import "fmt"

// Config holds the core's tunables. Durations are in ticks.
type Config struct {
	// TickMicros is the length of a tick in microseconds (for stop-time
	// costs); the array ticks once a second.
	TickMicros float64
	// Alpha is the weight of the old value in the rolling averages
	// a*old + (1-a)*new.
	Alpha float64
	// DiscoveryWindow: a nexus logged in this long with no RTPG and no I/O
	// on it means the host's multipath driver is not discovering the path.
	DiscoveryWindow int
	// Settle: a new host's connectivity constrains owners only once its
	// logins and path discovery have not changed for this long, so a host
	// still logging in to its paths one by one does not trigger
	// failovers. (Until then its I/O on a non-owner path is forwarded,
	// not lost.) A host that comes back after it had no session at all
	// (a reboot) waits the longer DiscoveryWindow the same way.
	Settle int
	// MediaTicks: media I/O through a node counts as discovery (and to a
	// LUN as use) once it has arrived in this many distinct ticks spanning
	// a third of the discovery window, with no gap of a discovery window
	// (an RTPG counts at once). A disk scan reads a burst of blocks on
	// every path at login; a multipath driver that uses a path keeps
	// using it.
	MediaTicks int
	// SilenceWindow: a host whose standing as a multipath stack is not
	// confirmed loses it when its up paths to a node have had no command
	// for this long (never under the discovery window) while it works
	// elsewhere or idles everywhere: a checker probes every path every
	// 5-20 s (40 s with some vendors' polling_interval). AttachWindow: how
	// long after its latest login a host's use of two nodes at once may
	// be the scan of the disks it attached (udev reading every disk on
	// every path: 15 s on a quiet machine, minutes on a loaded one); its
	// standing is confirmed when it shows it later.
	SilenceWindow, AttachWindow int
	// FailbackWindow: every host using a failed-over LUN must reach its
	// preferred owner for this long before it fails back.
	FailbackWindow int
	// Cooldown: a LUN that moved is not moved again for balance or
	// shipping for this long (failover is never held back). An operator's
	// move also holds back balance moves of other LUNs for this long,
	// unless a node is at StressUtil.
	Cooldown int
	// FailbackCooldown: no failback within this long of the LUN's last
	// move.
	FailbackCooldown int
	// DampCount failovers of one LUN within DampWindow damp it: it stays
	// on its reachable owner (no failback) and Path Flapping is raised,
	// until no failover for DampClear or the operator clears the report.
	DampCount  int
	DampWindow int
	DampClear  int
	// HandbackHold: a host of a STANDBY type whose non-owner paths were
	// handed off to ANO (it did not reach the owner) gets STANDBY there
	// again once it has reached the owner's node without a break for
	// this long (handoff.go).
	HandbackHold int
	// CrashCount node failures within CrashWindow make a node unstable:
	// no automatic failback to it until it has been up without a break
	// for CrashStable (or the operator clears Node Unstable).
	CrashCount  int
	CrashWindow int
	CrashStable int
	// FollowWindow: after a planned move, a host's I/O to the LUN must
	// arrive mostly (ShipShare) at the new owner within this long, or
	// the host is observed not to follow.
	FollowWindow int
	// PlanInterval: how often the balancer and the shipping check run.
	PlanInterval int
	// StressUtil and StressExpansion: the array is stressed, and a
	// rebalance worth considering, when a node's utilisation reaches
	// StressUtil, or its expansion factor reaches StressExpansion while its
	// utilisation is at least StressFloor and it served at least
	// MinExpansionOps a tick (expansion on a near-idle node is noise).
	// The stress must hold for StressWindow before a balance move.
	StressUtil      float64
	StressExpansion float64
	StressFloor     float64
	StressWindow    int
	// MinExpansionOps: intervals with fewer operations do not set a node's
	// best response time.
	MinExpansionOps float64
	// Tolerance: nodes are balanced when the spread of their utilisation
	// is at most this fraction of the mean utilisation.
	Tolerance float64
	// ROIHorizon is how long a rebalance is expected to pay off; ROIFactor
	// how many times the cost its gain must be.
	ROIHorizon float64
	ROIFactor  float64
	// MoveCost is a fixed cost per moved LUN in work units (hosts
	// re-reading RTPG and redirecting).
	MoveCost float64
	// ShipShare: a LUN whose I/O arrives at one non-owner node for at
	// least this share moves there; ShipMinWork is the least load (work
	// per tick) for which that is worth it.
	ShipShare   float64
	ShipMinWork float64
	// ShipWindow: the share must have held this long.
	ShipWindow int
	// BytesPerWork: one unit of work is one command or this many bytes.
	BytesPerWork float64
	// StopMicros is the expected I/O stop of one LUN's transfer by media
	// type; StopBudget the most a batch may stop, in microseconds.
	StopMicros map[string]float64
	StopBudget float64
	// MaxMovesPerPlan bounds one rebalance.
	MaxMovesPerPlan int
	// Debounce: a condition must hold (or have ended) this long before it
	// is raised (or cleared).
	Debounce int
	// Debounces overrides it (and the catalog entry's TimeToVisible) per
	// condition.
	Debounces map[Condition]int
	// PathDegradedFactor: a path is degraded when its exchange time has
	// expanded this many times over its best interval and this many times
	// more than its node and its peer paths have (reference 004: an
	// expansion factor of 3-4 is the knee of the queue).
	PathDegradedFactor float64
	// PathDegradedMicros: and its exchanges take at least this much
	// longer than its best (µs). A slowdown no host notices is not a
	// path fault: a loopback path on a busy machine expands tenfold from
	// tens of microseconds and stays far below a millisecond.
	PathDegradedMicros float64
	// PathMinOps: an interval with fewer exchanges is not judged.
	PathMinOps float64
	// ThrashCount owner changes of one LUN within ThrashWindow is thrash.
	ThrashCount  int
	ThrashWindow int
	// Passive: the explicit-ALUA baseline, where hosts move LUNs with
	// SET TARGET PORT GROUPS; the core tracks and reports but never moves.
	Passive bool
}

// DefaultConfig returns the tunables the array runs with (1 s ticks).
func DefaultConfig() Config {
	return Config{
		TickMicros: 1e6, Alpha: 0.7,
		DiscoveryWindow: 30, Settle: 5, MediaTicks: 3, SilenceWindow: 60, AttachWindow: 150, FailbackWindow: 30, Cooldown: 300, PlanInterval: 10,
		FailbackCooldown: 60, DampCount: 3, DampWindow: 1800, DampClear: 3600, FollowWindow: 30,
		StressUtil: 0.5, StressExpansion: 2.0, StressFloor: 0.25, StressWindow: 30, MinExpansionOps: 50,
		Tolerance: 0.10, ROIHorizon: 600, ROIFactor: 2, MoveCost: 100,
		ShipShare: 0.75, ShipMinWork: 10, ShipWindow: 30, BytesPerWork: 65536,
		StopMicros: map[string]float64{"ram": 500, "ssd": 2000, "hdd": 30000},
		StopBudget: 60000, MaxMovesPerPlan: 64,
		Debounce: 3, ThrashCount: 4, ThrashWindow: 60,
		PathDegradedFactor: 3, PathDegradedMicros: 1000, PathMinOps: 5,
		HandbackHold: 5, CrashCount: 3, CrashWindow: 1800, CrashStable: 1800,
	}
}

// Validate checks the tunables.
func (c Config) Validate() error {
	switch {
	case c.TickMicros <= 0:
		return fmt.Errorf("ownership: TickMicros must be positive")
	case c.Alpha < 0 || c.Alpha >= 1:
		return fmt.Errorf("ownership: Alpha must be in [0, 1)")
	case c.PlanInterval < 1:
		return fmt.Errorf("ownership: PlanInterval must be at least 1 tick")
	case c.Tolerance <= 0:
		return fmt.Errorf("ownership: Tolerance must be positive")
	case c.ShipShare <= 0.5 || c.ShipShare > 1:
		return fmt.Errorf("ownership: ShipShare must be in (0.5, 1]")
	case c.BytesPerWork <= 0:
		return fmt.Errorf("ownership: BytesPerWork must be positive")
	case c.PathDegradedFactor <= 1:
		return fmt.Errorf("ownership: PathDegradedFactor must be above 1")
	case c.PathDegradedMicros < 0:
		return fmt.Errorf("ownership: PathDegradedMicros must not be negative")
	case c.ThrashCount < 2:
		return fmt.Errorf("ownership: ThrashCount must be at least 2")
	case c.DampCount < 1 || c.MediaTicks < 1:
		return fmt.Errorf("ownership: DampCount and MediaTicks must be at least 1")
	case c.StressFloor < 0 || c.StressFloor > c.StressUtil:
		return fmt.Errorf("ownership: StressFloor must be in [0, StressUtil]")
	case c.FailbackCooldown < 0 || c.DampWindow < 1 || c.DampClear < 0 || c.FollowWindow < 1 || c.StressWindow < 0:
		return fmt.Errorf("ownership: damping, follow and stress windows must not be negative")
	case !debouncesValid(c.Debounces):
		return fmt.Errorf("ownership: Debounces must name catalog conditions with non-negative ticks")
	case c.HandbackHold < 0 || c.CrashCount < 0 || c.CrashWindow < 0 || c.CrashStable < 0:
		return fmt.Errorf("ownership: hand-back and crash-loop windows must not be negative")
	case c.DiscoveryWindow < 0 || c.SilenceWindow < 0 || c.AttachWindow < 0 || c.Settle < 0 || c.ShipWindow < 0 || c.FailbackWindow < 0 || c.Cooldown < 0 || c.Debounce < 0 || c.ThrashWindow < 1 || c.PathMinOps < 0:
		return fmt.Errorf("ownership: windows must not be negative")
	}
	return nil
}

func (c Config) stopMicros(media string) float64 {
	if s, ok := c.StopMicros[media]; ok {
		return s
	}
	return c.StopMicros["ram"]
}

func debouncesValid(m map[Condition]int) bool {
	for cond, d := range m {
		if _, ok := Lookup(cond); !ok || d < 0 {
			return false
		}
	}
	return true
}
