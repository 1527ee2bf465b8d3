package tcmu

import (
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/scsi"
)

// A TCMU ring entry does not say which initiator sent the command. On a
// port with one session that is no question. On a port several hosts are
// logged in to, the front end tells them apart by LIO's own count of each
// declared host's commands on each (LUN, port) (an explicit node ACL's
// scsi_auth_intr/num_cmds, counted when LIO looks the LUN up, before the
// command reaches the ring): a command is credited to a host LIO counted
// more commands from than the ring has delivered. Which host a command
// came from is exact while one host at a time sends on that device;
// when two send at the same moment, each is still credited as many
// commands as LIO counted from it, but which of them is whose may be
// swapped. LIO answers some commands itself (REPORT LUNS, a unit
// attention it queued, a state its own ALUA gate refuses): their credit is
// never taken by the ring, and lapses when it has stood unused over two
// polls of the sessions. Hosts that are not declared (demo mode) have no
// count: a command goes to one only while it is the one such host on the
// port and no declared host's count explains it.

// freshFor is how long a read of the counts serves commands that find
// credit in it; after that (or when none do) they are read again.
const freshFor = time.Millisecond

// devCredit is one device's counts: LIO's per declared initiator against
// the commands credited to each.
type devCredit struct {
	mu   sync.Mutex
	by   map[string]*credit
	read time.Time // last read of LIO's counts
	seq  uint64    // reads so far
}

type credit struct {
	lio   uint64 // LIO's count at the last read
	taken uint64 // of it: credited to ring commands, or lapsed
	stale uint64 // outstanding at the last poll
	moved uint64 // the read at which lio last grew
}

func (c *credit) pending() uint64 {
	if c.lio > c.taken {
		return c.lio - c.taken
	}
	return 0
}

func (dc *devCredit) get(ini string) *credit {
	if dc.by == nil {
		dc.by = map[string]*credit{}
	}
	c := dc.by[ini]
	if c == nil {
		c = &credit{}
		dc.by[ini] = c
	}
	return c
}

// pick is the initiator a ring command is credited to among inis: one
// with credit, the one whose count grew last first, then the most
// credit, then by name; "" when none has any.
func (dc *devCredit) pick(inis []string) string {
	best := ""
	var bc *credit
	for _, ini := range inis {
		c := dc.by[ini]
		if c == nil || c.pending() == 0 {
			continue
		}
		if bc == nil || c.moved > bc.moved || (c.moved == bc.moved && c.pending() > bc.pending()) {
			best, bc = ini, c
		}
	}
	return best
}

// refresh reads LIO's counts for inis on d; called with dc.mu held.
func (f *Frontend) refresh(d *device, inis []string) {
	dc := &d.cred
	dc.seq++
	dc.read = time.Now()
	for _, ini := range inis {
		n, err := f.opt.Layout.ACLCommands(f.fs, f.iqnOf[d.port], d.port, ini, d.lun)
		if err != nil {
			continue
		}
		c := dc.get(ini)
		if n > c.lio {
			c.moved = dc.seq
		}
		c.lio = n
	}
}

// nexus is the I_T nexus a command on d is credited to (see above); no
// initiator when the front end cannot tell.
func (f *Frontend) nexus(d *device) scsi.Nexus {
	n := scsi.Nexus{TargetPort: d.port}
	declared, other := f.sessionsOf(d.port)
	dc := &d.cred
	switch {
	case len(declared)+len(other) == 1:
		if len(declared) == 1 {
			n.InitiatorName = declared[0]
			dc.mu.Lock()
			dc.get(declared[0]).taken++ // keeps the count in step
			dc.mu.Unlock()
		} else {
			n.InitiatorName = other[0]
		}
		return n
	case len(declared) > 0:
		dc.mu.Lock()
		ini := dc.pick(declared)
		if ini == "" || time.Since(dc.read) > freshFor {
			f.refresh(d, declared)
			ini = dc.pick(declared)
		}
		if ini != "" {
			dc.get(ini).taken++
		}
		dc.mu.Unlock()
		if ini != "" {
			n.InitiatorName = ini
			return n
		}
	}
	if len(other) == 1 {
		n.InitiatorName = other[0]
	}
	return n
}

// sessionsOf splits port's sessions into declared initiators (with
// counts) and others, each sorted.
func (f *Frontend) sessionsOf(port uint16) (declared, other []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ini := range f.sessions[port] {
		if f.declared[ini] {
			declared = append(declared, ini)
		} else {
			other = append(other, ini)
		}
	}
	sort.Strings(declared)
	sort.Strings(other)
	return declared, other
}

// lapse reads the counts of every device whose port has a declared
// session, and lets credit lapse that stood unused since the last poll
// (commands LIO answered itself). It returns what lapsed per (initiator,
// port), for the log.
func (f *Frontend) lapse() map[pathKey]uint64 {
	out := map[pathKey]uint64{}
	for _, d := range f.devs {
		declared, _ := f.sessionsOf(d.port)
		if len(declared) == 0 {
			continue
		}
		dc := &d.cred
		dc.mu.Lock()
		f.refresh(d, declared)
		for _, ini := range declared {
			c := dc.get(ini)
			p := c.pending()
			gone := min(p, c.stale)
			c.taken += gone
			c.stale = p - gone
			if gone > 0 {
				out[pathKey{ini, d.port}] += gone
			}
		}
		dc.mu.Unlock()
	}
	return out
}

// declaredSessions lists the declared initiators with a session under
// their ACL on a port.
func (f *Frontend) declaredSessions(port uint16) []string {
	var out []string
	for _, ini := range f.opt.Layout.Initiators {
		if ok, err := f.opt.Layout.ACLSession(f.fs, f.iqnOf[port], port, ini); err == nil && ok {
			out = append(out, strings.ToLower(ini))
		}
	}
	return out
}
