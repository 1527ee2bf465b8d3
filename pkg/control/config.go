package control

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/aluad/aluad/ownership"
)

// Config is the configuration file's ownership section: it tunes the
// ownership core this package runs (see ownership.Config); zero fields
// keep the core's defaults. Windows are durations, counted in ticks.
type Config struct {
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
	// AlertDelays sets the delay of single conditions of the report
	// catalog by name (node-offline: 0s raises Node Offline at the first
	// tick it holds); the others keep AlertDelay.
	AlertDelays map[ownership.Condition]time.Duration `yaml:"alert_delays,omitempty"`
	// PathDegradedFactor: a path is reported degraded when its exchange
	// time expands this many times over its best, and that many times
	// more than its node's and its peer paths' (default 3).
	PathDegradedFactor float64 `yaml:"path_degraded_factor"`
	// PathDegradedMin: and its exchanges take at least this much longer
	// than its best (default 1ms; a slowdown no host notices, such as a
	// loopback path on a busy machine, is not a path fault).
	PathDegradedMin time.Duration `yaml:"path_degraded_min"`
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
	// HandbackHold: a host of a STANDBY type handed off to ANO on its
	// non-owner paths (it did not reach the owner's node) gets STANDBY
	// again once its multipath stack has probed its path there for this
	// long (default 5 ticks).
	HandbackHold time.Duration `yaml:"handback_hold"`
	// CrashCount failures of one node within CrashWindow make it
	// unstable: no automatic failback to it until it has been up for
	// CrashStable, or the operator clears Node Unstable (defaults 3,
	// 30 min, 30 min; a negative count turns the hold off).
	CrashCount  int           `yaml:"crash_count"`
	CrashWindow time.Duration `yaml:"crash_window"`
	CrashStable time.Duration `yaml:"crash_stable"`
	// Off disables the core: ownership then moves only by operator or STPG.
	Off bool `yaml:"off"`
}

// Validate checks the section.
func (o Config) Validate() error {
	if o.PathDegradedFactor != 0 && o.PathDegradedFactor <= 1 {
		return fmt.Errorf("ownership: path_degraded_factor must be above 1")
	}
	if o.PathDegradedMin < 0 {
		return fmt.Errorf("ownership: path_degraded_min must not be negative")
	}
	for _, d := range []time.Duration{o.Tick, o.FailbackWindow, o.DiscoveryWindow, o.Cooldown, o.PlanInterval, o.ShipWindow, o.AlertDelay,
		o.HandbackHold, o.CrashWindow, o.CrashStable} {
		if d < 0 {
			return fmt.Errorf("ownership: durations must not be negative")
		}
	}
	if o.NodeCapacity < 0 {
		return fmt.Errorf("ownership: node_capacity must not be negative")
	}
	for cond, d := range o.AlertDelays {
		if _, ok := ownership.Lookup(cond); !ok {
			names := make([]string, len(ownership.Conditions))
			for i, c := range ownership.Conditions {
				names[i] = string(c)
			}
			sort.Strings(names)
			return fmt.Errorf("ownership.alert_delays: %q is not a report condition (%s)", cond, strings.Join(names, ", "))
		}
		if d < 0 {
			return fmt.Errorf("ownership.alert_delays: %s must not be negative", cond)
		}
	}
	return nil
}

// Core maps the section onto the core's tunables (passive for explicit
// ALUA), and gives the tick.
func (o Config) Core(explicit bool) (ownership.Config, time.Duration) {
	oc := ownership.DefaultConfig()
	tick := o.Tick
	if tick <= 0 {
		tick = time.Second
	}
	oc.TickMicros = float64(tick) / float64(time.Microsecond)
	// Rates given per 1 s tick scale with the tick: shipping needs 10
	// work units a second, an expansion sample 50 commands a second.
	perSecond := tick.Seconds()
	oc.ShipMinWork *= perSecond
	oc.MinExpansionOps *= perSecond
	ticks := func(d time.Duration, def int) int {
		if d <= 0 {
			return def
		}
		return max(1, int(math.Ceil(float64(d)/float64(tick))))
	}
	oc.FailbackWindow = ticks(o.FailbackWindow, oc.FailbackWindow)
	oc.DiscoveryWindow = ticks(o.DiscoveryWindow, oc.DiscoveryWindow)
	oc.Cooldown = ticks(o.Cooldown, oc.Cooldown)
	oc.PlanInterval = ticks(o.PlanInterval, oc.PlanInterval)
	oc.ShipWindow = ticks(o.ShipWindow, oc.ShipWindow)
	oc.Debounce = ticks(o.AlertDelay, oc.Debounce)
	// These default to wall time, whatever the tick: a host follows a
	// move within its path checker's interval, not within so many ticks.
	wall := func(d, def time.Duration) int {
		if d <= 0 {
			d = def
		}
		return ticks(d, 1)
	}
	// Stress must hold for three plan intervals, and a failback waits
	// twice its window after the last move, unless configured.
	oc.StressWindow = ticks(o.StressWindow, 3*oc.PlanInterval)
	oc.FailbackCooldown = ticks(o.FailbackCooldown, 2*oc.FailbackWindow)
	oc.DampWindow = wall(o.DampWindow, 30*time.Minute)
	oc.DampClear = wall(o.DampClear, time.Hour)
	oc.FollowWindow = wall(o.FollowWindow, 30*time.Second)
	oc.SilenceWindow = wall(0, time.Minute)
	oc.AttachWindow = wall(0, 150*time.Second)
	oc.HandbackHold = ticks(o.HandbackHold, oc.HandbackHold)
	oc.CrashWindow = wall(o.CrashWindow, 30*time.Minute)
	oc.CrashStable = wall(o.CrashStable, 30*time.Minute)
	switch {
	case o.CrashCount > 0:
		oc.CrashCount = o.CrashCount
	case o.CrashCount < 0:
		oc.CrashCount = 0 // off
	}
	if o.StressFloor > 0 {
		oc.StressFloor = o.StressFloor
	}
	if o.DampCount > 0 {
		oc.DampCount = o.DampCount
	}
	if o.PathDegradedFactor > 0 {
		oc.PathDegradedFactor = o.PathDegradedFactor
	}
	if o.PathDegradedMin > 0 {
		oc.PathDegradedMicros = float64(o.PathDegradedMin) / float64(time.Microsecond)
	}
	if len(o.AlertDelays) > 0 {
		oc.Debounces = map[ownership.Condition]int{}
		for cond, d := range o.AlertDelays {
			oc.Debounces[cond] = 0
			if d > 0 {
				oc.Debounces[cond] = ticks(d, 0)
			}
		}
	}
	oc.Passive = explicit
	return oc, tick
}
