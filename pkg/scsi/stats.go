package scsi

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ioClass sorts commands for the per-nexus I/O counters.
type ioClass byte

const (
	ioOther ioClass = iota
	ioRead
	ioWrite
	// ioMediaOther: a media command that moves no data (SYNCHRONIZE
	// CACHE, VERIFY): counted in Other, and in Syncs when GOOD.
	ioMediaOther
)

// NexusIO is the cumulative I/O of one I_T nexus to one LU since the nexus
// was first seen: what the ownership core's workload analyzer consumes as
// per-interval differences.
type NexusIO struct {
	Nexus Nexus
	LUN   uint64
	// Reads and Writes count media commands that completed GOOD; Other
	// counts everything else that reached the LU (including errors).
	Reads, Writes, Other    uint64
	BytesRead, BytesWritten uint64
	// Syncs counts the media commands that move no data (SYNCHRONIZE
	// CACHE, VERIFY) and completed GOOD; they are in Other too.
	// Reads+Writes+Syncs is the evidence that a host's driver uses the
	// path: a disk probe (INQUIRY, TUR, READ CAPACITY) is not.
	Syncs uint64
	// NonOptimized counts the commands (of any kind) that arrived through
	// an active/non-optimized port: the I/O the array forwards.
	NonOptimized uint64
	// Busy is the summed time from the gate to the response.
	Busy time.Duration
	// Media counts the READ and WRITE commands that arrived, whatever
	// their status (a read refused with 04/0B on a standby path counts);
	// LastMedia is when the latest of them arrived. Together they tell
	// when a host stopped using a path and started using another.
	Media     uint64
	LastMedia time.Time
	// Gone: the nexus has ended; once its last counts are read, ForgetIO
	// releases them.
	Gone bool
}

type ioCounters struct {
	reads, writes, other    atomic.Uint64
	syncs                   atomic.Uint64
	bytesRead, bytesWritten atomic.Uint64
	nonOpt                  atomic.Uint64
	busy                    atomic.Int64
	media                   atomic.Uint64
	lastMedia               atomic.Int64 // arrival, Unix nanoseconds
	gone                    atomic.Bool
}

// ioStats holds counters per nexus for one LU. Lookups of an existing
// nexus take no lock (sync.Map), so the hot path does not serialise.
type ioStats struct{ m sync.Map } // Nexus -> *ioCounters

func (st *ioStats) counters(n Nexus) *ioCounters {
	if v, ok := st.m.Load(n); ok {
		return v.(*ioCounters)
	}
	v, _ := st.m.LoadOrStore(n, &ioCounters{})
	return v.(*ioCounters)
}

func (st *ioStats) record(n Nexus, class ioClass, r *Response, nonOpt bool, arrived time.Time, busy time.Duration) {
	c := st.counters(n)
	if nonOpt {
		c.nonOpt.Add(1)
	}
	if class == ioRead || class == ioWrite {
		c.media.Add(1)
		c.lastMedia.Store(arrived.UnixNano())
	}
	good := r.Status == StatusGood
	switch {
	case class == ioRead && good:
		c.reads.Add(1)
		c.bytesRead.Add(uint64(len(r.Data)))
	case class == ioWrite && good:
		c.writes.Add(1)
		c.bytesWritten.Add(uint64(r.DataOutLen))
	case class == ioMediaOther && good:
		c.syncs.Add(1)
		c.other.Add(1)
	default:
		c.other.Add(1)
	}
	c.busy.Add(int64(busy))
}

// IOStats returns the cumulative I/O per (nexus, LU), ordered by LUN then
// initiator port then target port.
func (s *Server) IOStats() []NexusIO {
	var out []NexusIO
	for _, lun := range s.LUNs() {
		lu := s.LU(lun)
		if lu == nil {
			continue
		}
		lu.io.m.Range(func(k, v any) bool {
			c := v.(*ioCounters)
			var last time.Time
			if ns := c.lastMedia.Load(); ns != 0 {
				last = time.Unix(0, ns)
			}
			out = append(out, NexusIO{Media: c.media.Load(), LastMedia: last, Nexus: k.(Nexus), LUN: lun,
				Reads: c.reads.Load(), Writes: c.writes.Load(), Other: c.other.Load(), Syncs: c.syncs.Load(),
				BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(), NonOptimized: c.nonOpt.Load(),
				Busy: time.Duration(c.busy.Load()), Gone: c.gone.Load()})
			return true
		})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.LUN != b.LUN {
			return a.LUN < b.LUN
		}
		if a.Nexus.InitiatorPort != b.Nexus.InitiatorPort {
			return a.Nexus.InitiatorPort < b.Nexus.InitiatorPort
		}
		return a.Nexus.TargetPort < b.Nexus.TargetPort
	})
	return out
}

// markGone flags (or unflags) n's counters on every LU.
func (s *Server) markIOGone(n Nexus, gone bool) {
	for _, lun := range s.LUNs() {
		if lu := s.LU(lun); lu != nil {
			if v, ok := lu.io.m.Load(n); ok {
				v.(*ioCounters).gone.Store(gone)
			}
		}
	}
}

// ForgetIO drops the counters of an ended nexus on lun after their last
// read, so short-lived sessions do not accumulate.
func (s *Server) ForgetIO(n Nexus, lun uint64) {
	if lu := s.LU(lun); lu != nil {
		if v, ok := lu.io.m.Load(n); ok && v.(*ioCounters).gone.Load() {
			lu.io.m.Delete(n)
		}
	}
}

// CountAnswered counts cmds commands of n to lun that the fabric answered
// itself without handing them to the device server (LIO on the TCMU
// fabric: REPORT LUNS, its own unit attentions, what its ALUA gate
// refuses). They reached the LU on that path, as every command does on
// the pure-Go fabric, and count in Other.
func (s *Server) CountAnswered(n Nexus, lun uint64, cmds uint64) {
	if lu := s.LU(lun); lu != nil && cmds > 0 {
		lu.io.counters(n).other.Add(cmds)
	}
}
