package array

import (
	"errors"
	"fmt"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/cache"
	"github.com/aluad/aluad/pkg/media"
)

// Cluster mode: this process is one controller of an array whose other
// nodes run in other processes (Options.Local names it). The array still
// knows every node, port and LUN (RTPG reports every group), but only the
// local node has a cache and serves as owner; a command for a LUN another
// process owns is forwarded to it, and the local cache mirrors its dirty
// pages to a partner in another process. Who owns what is not decided
// here nor by this process's array: the cluster's records say it, and
// the controller installs them (Adopt) and releases a LUN it hands over
// (Release).

// OpKind is the kind of a command forwarded to the owner.
type OpKind int

// The forwarded operations.
const (
	OpRead OpKind = iota
	OpWrite
	OpFlush
	OpUnmap
	OpLBAStatus
)

// Op is one forwarded operation, in bytes. A read fills Data; an LBA
// status query fills End and Mapped.
type Op struct {
	Kind     OpKind
	Off, Len int64
	Data     []byte
	FUA      bool
	End      int64
	Mapped   bool
}

// Remote is what a controller process gets from the rest of its cluster.
type Remote interface {
	// Forward runs op for LUN l on owner, a node of another process.
	Forward(owner *Node, l *LUN, op *Op) error
	// Serves reports whether this process may serve the LUN as owner
	// now: the record names it, no move is under way, its lease holds.
	Serves(lun uint64) bool
	// Holds reports whether this process may still write the LUN's data
	// to the media (it owns it, a hand-over under way included).
	Holds(lun uint64) bool
	// Mirror is the local cache's partner in another process.
	Mirror() cache.Remote
}

// ErrClusterMode refuses what only the embedded array does by itself
// (moves, crashes and restarts as flags): in a cluster the records and
// the processes decide.
var ErrClusterMode = errors.New("array: a controller of a cluster moves LUNs only as the cluster's records say")

// ErrNotServing answers a forwarded command this process does not serve
// as owner now (the sender retries; the host sees TRANSITIONING).
var ErrNotServing error = notServing{}

type notServing struct{}

func (notServing) Error() string           { return "array: this controller does not serve the LUN as owner now" }
func (notServing) ALUATransitioning() bool { return true }

// Local is this process's node in cluster mode (nil: every node is in
// this process).
func (a *Array) Local() *Node { return a.local }

// Remote reports whether the node runs in another process.
func (n *Node) Remote() bool { return n.remote }

// forward sends op to a remote owner; the sender holds the LUN's I/O lock
// shared.
func (l *LUN) forward(owner *Node, op *Op) error {
	return l.arr.opt.Remote.Forward(owner, l, op)
}

// ServeForwarded runs a command another controller forwarded, on the
// local cache, only while this process serves the LUN as owner. A write
// or an unmap takes effect only if admit (when set) allows it where it
// does (cache.WriteAtIf): the forwarder gives up on the command at a
// deadline, and a command admitted before it is ordered before every
// later command of the LUN. A refusal is admit's error. Reads, LBA
// status and cache syncs change nothing a later command could see out of
// order, and are not judged.
func (a *Array) ServeForwarded(lun uint64, op *Op, admit cache.Admit) error {
	l := a.LUN(lun)
	if l == nil || a.local == nil {
		return fmt.Errorf("array: no LUN %d here", lun)
	}
	if op.Off < 0 || op.Len < 0 || op.Off+op.Len > l.Size {
		return fmt.Errorf("array: LUN %d: %d bytes at %d are out of range", lun, op.Len, op.Off)
	}
	l.io.RLock()
	defer l.io.RUnlock()
	if l.Owner() != a.local || !a.opt.Remote.Serves(lun) {
		return ErrNotServing
	}
	c := a.local.Cache
	switch op.Kind {
	case OpRead:
		if int64(len(op.Data)) != op.Len {
			op.Data = make([]byte, op.Len)
		}
		return cacheErr(c.ReadAt(lun, op.Data, op.Off))
	case OpWrite:
		if int64(len(op.Data)) != op.Len {
			return fmt.Errorf("array: a %d-byte write carries %d bytes", op.Len, len(op.Data))
		}
		return cacheErr(c.WriteAtIf(lun, op.Data, op.Off, op.FUA, admit))
	case OpFlush:
		return cacheErr(c.Flush(lun))
	case OpUnmap:
		return cacheErr(c.UnmapIf(lun, op.Off, op.Len, admit))
	case OpLBAStatus:
		var err error
		op.End, op.Mapped, err = c.Mapped(lun, op.Off)
		return cacheErr(err)
	}
	return fmt.Errorf("array: unknown forwarded operation %d", op.Kind)
}

// Adopt installs owner as the LUN's owner, as the cluster's record now
// says, and announces the change (cause as the record's writer gave it).
// In-flight commands drain first. When the local node becomes the owner
// it drops its stale pages and, for a takeover, replays the mirror copies
// replay keeps of those it holds and writes them to the media before it
// serves; after a planned hand-over (replay nil) the old owner destaged
// everything and the copies are dropped. When the local node stops being
// the owner it drops what it holds of the LUN, dirty pages included: it
// was fenced out, and a node whose LUN was taken over never destages it
// again. A record that names the owner already ends a hand-over that was
// rolled back (ErrNoChange).
func (a *Array) Adopt(lun uint64, owner string, cause alua.Cause, replay func([]cache.MirrorPage) []cache.MirrorPage) (Change, error) {
	l := a.LUN(lun)
	dst := a.Node(owner)
	if l == nil || dst == nil || a.local == nil {
		return Change{}, fmt.Errorf("array: cannot adopt LUN %d on node %q", lun, owner)
	}
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	l.io.Lock()
	defer l.io.Unlock()
	cur := l.alua.Load()
	from := cur.owner
	c := Change{LUNs: []uint64{lun}, From: from.Name, To: dst.Name, Cause: cause}
	loc := a.local.Cache
	if dst == a.local && (from != dst || l.released) {
		// What this machine's page cache holds of the media may be older
		// than what another owner wrote (its flush went to shared storage
		// from another machine): read it afresh. So too for a LUN this
		// node handed over and owns again without having seen the other
		// owner (a record missed while its watch was down): what its own
		// cache kept is older too.
		if err := dropCache(l); err != nil {
			return c, fmt.Errorf("LUN %d: dropping the page cache of its media: %w", lun, err)
		}
		if from == dst {
			loc.Invalidate(lun) // (released: destaged, only clean pages)
		}
	}
	if l.released {
		l.released = false
		loc.SetWriteThrough(lun, false)
	}
	if from == dst {
		return Change{}, ErrNoChange
	}
	if dst == a.local {
		l.replayMu.Lock()
		loc.Invalidate(lun)
		pages := loc.TakeMirror(lun)
		if replay != nil {
			pages = replay(pages)
		} else {
			pages = nil
		}
		err := loc.Install(lun, newest(pages))
		if err == nil && len(pages) > 0 {
			// On the media before it serves: no partner holds them now.
			err = loc.Flush(lun)
		}
		if err != nil {
			// The copies go back to the mirror for the next attempt.
			loc.Invalidate(lun)
			loc.Hold(lun, pages)
		}
		l.replayMu.Unlock()
		if err != nil {
			return c, fmt.Errorf("LUN %d: replaying %d mirrored pages: %w", lun, len(pages), err)
		}
		c.Replayed = len(pages)
	} else if from == a.local {
		if n := loc.Invalidate(lun); n > 0 {
			a.logf("LUN %d was taken over from this controller: %d dirty pages dropped", lun, n)
		}
	}
	a.topo.Lock()
	l.alua.Store(l.alua.Load().switched(from, dst, cause))
	a.topo.Unlock()
	a.notify(c)
	return c, nil
}

// Release is the old owner's step of a planned hand-over, once this
// process no longer serves the LUN as owner (its record names the new
// owner as the target): writes go through from now on, in-flight commands
// drain, and every dirty page is destaged (each release reaches the
// partner after the copy it releases). Adopt ends it either way.
func (a *Array) Release(lun uint64) error {
	l := a.LUN(lun)
	if l == nil || a.local == nil {
		return fmt.Errorf("array: no LUN %d here", lun)
	}
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	if l.Owner() != a.local {
		return ErrNotServing
	}
	if !l.released {
		l.released = true
		a.local.Cache.SetWriteThrough(lun, true)
	}
	if err := a.local.Cache.Flush(lun); err != nil { // under I/O
		return err
	}
	l.io.Lock() // in-flight commands drain; later ones are refused
	defer l.io.Unlock()
	return a.local.Cache.Flush(lun)
}

// SetRemoteUp records a node of another process going down (its lease
// lost) or coming back, and announces it as a node change.
func (a *Array) SetRemoteUp(name string, up bool) error {
	n := a.Node(name)
	if n == nil || !n.remote {
		return fmt.Errorf("array: no remote node %q", name)
	}
	a.topo.Lock()
	if n.Up() == up {
		a.topo.Unlock()
		return nil
	}
	n.up.Store(up)
	a.markImplicit(n)
	a.topo.Unlock()
	c := Change{Cause: alua.CauseNodeDown, From: name}
	if up {
		c = Change{Cause: alua.CauseNodeUp, To: name}
	}
	for _, l := range a.LUNs {
		c.LUNs = append(c.LUNs, l.ID)
	}
	a.notify(c)
	return nil
}

// dropCache drops this machine's page cache of a LUN's media file.
func dropCache(l *LUN) error {
	if d, ok := l.file.(media.CacheDropper); ok {
		return d.DropCache()
	}
	return nil
}
