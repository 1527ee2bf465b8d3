package control

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/scsi"
)

// Failed paths: a nexus that ended by a fault (its connection dropped, a
// ping unanswered, a port down), not by the host's Logout, is a path the
// host had and lost. The views keep showing it, as failed, until the
// host logs in again through that port or logs out of it on purpose: an
// operator looks for the path that is gone, not only for the ones left.

// LostPath is a path that ended by a fault.
type LostPath struct {
	Nexus  scsi.Nexus
	At     time.Time
	Reason string
}

// maxLost bounds the table (the oldest go first).
const maxLost = 1024

type lostPaths struct {
	mu   sync.Mutex
	list []LostPath
}

func samePath(a, b scsi.Nexus) bool {
	return strings.EqualFold(a.InitiatorName, b.InitiatorName) && a.TargetPort == b.TargetPort
}

// note takes a fabric event.
func (l *lostPaths) note(e fabric.Event, now time.Time, kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = slices.DeleteFunc(l.list, func(p LostPath) bool { return samePath(p.Nexus, e.Nexus) })
	if kind == "logout" && e.Reason != fabric.ReasonLogout {
		if len(l.list) >= maxLost {
			l.list = l.list[1:]
		}
		l.list = append(l.list, LostPath{Nexus: e.Nexus, At: now, Reason: e.Reason})
	}
}

// LostPaths lists the paths that ended by a fault and have not come back,
// oldest first.
func (p *Path) LostPaths() []LostPath {
	p.lost.mu.Lock()
	defer p.lost.mu.Unlock()
	return slices.Clone(p.lost.list)
}

// ForgetLostPaths drops the failed paths of an initiator: its host was
// removed, or it was taken off its host (it will not come back as that
// host's path).
func (p *Path) ForgetLostPaths(initiator string) {
	p.lost.mu.Lock()
	defer p.lost.mu.Unlock()
	p.lost.list = slices.DeleteFunc(p.lost.list, func(l LostPath) bool {
		return strings.EqualFold(l.Nexus.InitiatorName, initiator)
	})
}
