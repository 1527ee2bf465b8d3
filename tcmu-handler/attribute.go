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
// command reaches the ring). For each ring command the counts are read
// again, and the command is credited to a host LIO counted more commands
// from than were credited to it: the one whose count grew at the latest
// read first, then the one with the most such credit. While one host at a
// time sends on a device, that is the host that sent it. When two send at
// once, each is still credited as many commands as LIO counted from it
// and the ring delivered, but which is whose may be swapped; so it may
// when a command LIO answered itself (REPORT LUNS, a unit attention it
// queued, what its own ALUA gate refuses) and another host's command are
// counted between two reads. Such answers are never taken by the ring:
// credit LIO had counted lapsePolls polls ago and still not taken lapses
// then, and is handed to the device server as commands of that host
// answered by the fabric (they reached the LU on that path, as on the
// pure-Go fabric). A session's credit starts at LIO's count when the poll
// first sees it. Hosts that are not declared, or that logged in under a
// dynamic ACL (a name that differs from the configured one: LIO matches
// names byte for byte), have no count: a command goes to one only while
// it is the one such host on the port and no declared host's count
// explains it. Reading the counts costs one configfs read per declared
// session on the port per command, on shared ports only.

// lapsePolls is how many polls of the sessions credit stands unused
// before it lapses (1 s at the default poll): a command LIO counted has
// long reached the ring by then unless LIO answered it.
const lapsePolls = 4

// devCredit is one device's counts: LIO's per declared initiator against
// the commands credited to each.
type devCredit struct {
	mu   sync.Mutex
	by   map[string]*credit
	read time.Time // last read of LIO's counts
	seq  uint64    // reads so far
}

type credit struct {
	lio   uint64             // LIO's count at the last read
	taken uint64             // of it: credited to ring commands, or lapsed
	polls [lapsePolls]uint64 // LIO's count at the last polls, newest first
	moved uint64             // the read at which lio last grew
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
		n, err := f.opt.Layout.ACLCommands(f.fs, f.iqnOf[d.port], d.port, f.aclName[ini], d.lun)
		if err != nil {
			continue
		}
		c := dc.get(ini)
		if n > c.lio {
			c.moved = dc.seq
		}
		c.lio = n
		// More credited than LIO counted: commands of a host the poll
		// had not seen yet went to the port's one session.
		c.taken = min(c.taken, c.lio)
	}
}

// baseline starts ini's credit on port's devices from LIO's count now: a
// new session owes nothing for an earlier one's commands.
func (f *Frontend) baseline(port uint16, ini string) {
	for _, d := range f.devs {
		if d.port != port {
			continue
		}
		dc := &d.cred
		dc.mu.Lock()
		f.refresh(d, []string{ini})
		c := dc.get(ini)
		c.taken = c.lio
		for i := range c.polls {
			c.polls[i] = c.lio
		}
		dc.mu.Unlock()
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
		// Read the counts for every command: credit left at the last
		// read may be a command LIO answered itself, and the next ring
		// command another host's.
		dc.mu.Lock()
		f.refresh(d, declared)
		ini := dc.pick(declared)
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

// sessionsOf splits port's sessions into those under a declared host's
// ACL (with counts) and others, each sorted.
func (f *Frontend) sessionsOf(port uint16) (declared, other []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ini := range f.sessions[port] {
		if f.viaACL[port][ini] {
			declared = append(declared, ini)
		} else {
			other = append(other, ini)
		}
	}
	sort.Strings(declared)
	sort.Strings(other)
	return declared, other
}

// answered is what lapsed on one device for one initiator: commands LIO
// answered itself.
type answered struct {
	n    scsi.Nexus
	lun  uint64
	cmds uint64
}

// lapse reads the counts of every device whose port has a declared
// session, and lets credit lapse that LIO had counted lapsePolls polls
// ago and the ring has not taken (commands LIO answered itself).
func (f *Frontend) lapse() []answered {
	var out []answered
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
			if old := c.polls[lapsePolls-1]; old > c.taken {
				out = append(out, answered{scsi.Nexus{InitiatorName: ini, TargetPort: d.port}, d.lun, old - c.taken})
				c.taken = old
			}
			copy(c.polls[1:], c.polls[:lapsePolls-1])
			c.polls[0] = c.lio
		}
		dc.mu.Unlock()
	}
	return out
}

// declaredSessions lists the declared initiators (lower case) with a
// session under their ACL on a port.
func (f *Frontend) declaredSessions(port uint16) []string {
	var out []string
	for _, ini := range f.opt.Layout.Initiators {
		if ok, err := f.opt.Layout.ACLSession(f.fs, f.iqnOf[port], port, ini); err == nil && ok {
			out = append(out, strings.ToLower(ini))
		}
	}
	return out
}
