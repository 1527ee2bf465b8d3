// Package array owns the storage array's structure and its ALUA state:
// storage nodes (controllers) = target port groups, their target ports,
// the LUNs with their preferred and current owners, the access state each
// group reports per LUN and host type, ownership moves (TRANSITIONING,
// drain, flush, one atomic switch, then an announced Change), and the
// routing of every command to the owner node (I/O arriving on a non-owner
// port is forwarded over the inter-node link and counted). It implements
// scsi.Backend without importing pkg/scsi (pkg/daemon adapts its ALUA view
// to scsi.ALUA); it sits above pkg/media and must not import pkg/iscsi.
// Who should own a LUN is not decided here: that is the ownership core's.
package array

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/cache"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/media"
)

// Node is one storage node (controller).
type Node struct {
	Name  string
	Index int
	// GroupID is the ALUA target port group id of the node's ports.
	GroupID uint16
	Ports   []*Port
	// Cache is the node's cache: it holds the pages of the LUNs the node
	// owns, and the mirror of its partner's dirty pages.
	Cache  *cache.Cache
	up     atomic.Bool
	remote bool // runs in another process (cluster mode)
}

// Up reports whether the node is serving.
func (n *Node) Up() bool { return n.up.Load() }

// Port is one target port.
type Port struct {
	Name string
	Addr string
	// RelativeID is the SCSI relative target port identifier (also the iSCSI TPGT).
	RelativeID uint16
	Node       *Node
}

// LUN is one logical unit of the array.
type LUN struct {
	ID        uint64
	Size      int64
	BlockSize int
	// PhysicalBlockSize: see LUNConfig.
	PhysicalBlockSize int
	Media             string
	Group             string
	Preferred         *Node
	alua              atomic.Pointer[aluaSnap]
	// io is held shared by every media operation and exclusively by a
	// move, which thereby drains in-flight commands before the hand-over.
	io     drainLock
	moveMu ChanMutex
	// replayMu orders the hand-overs of the LUN's mirrored pages (a
	// restart replaying them onto its node, a takeover onto a new owner):
	// the copies go to one node, and the owner is read under it.
	replayMu sync.Mutex
	// released: this controller is handing the LUN over (cluster mode;
	// writes go through until the record says who owns it).
	released bool
	store    media.Store
	file     media.Store // store below its profile and wrappers (DropCache)
	arr      *Array
	stats    []NodeStats // per node the command arrived on
}

// NodeStats counts commands that arrived at one node for one LUN.
type NodeStats struct {
	Commands       atomic.Uint64
	Bytes          atomic.Uint64
	Forwarded      atomic.Uint64 // commands shipped to the owner over the interlink
	ForwardedBytes atomic.Uint64
}

// Owner returns the node that currently owns the LUN.
func (l *LUN) Owner() *Node { return l.alua.Load().owner }

// Stats returns the per-node counters (indexed by Node.Index).
func (l *LUN) Stats() []NodeStats { return l.stats }

// Array is the set of nodes, ports and LUNs.
type Array struct {
	cfg      Config
	Nodes    []*Node
	Ports    []*Port
	LUNs     []*LUN
	portByID map[uint16]*Port
	lunByID  map[uint64]*LUN
	penalty  atomic.Int64 // the interlink penalty (time.Duration)
	sleep    func(time.Duration)
	now      func() time.Time
	// hosts maps a lower-cased initiator name to its declared host.
	// It is replaced whole by SetHosts (hosts.go).
	hosts atomic.Pointer[map[string]Host]
	// handoff: per host name, the nodes for whose LUNs that host's
	// non-owner paths report ANO although its type reports STANDBY (the
	// ownership core's STANDBY hand-off); replaced whole on a change.
	handoff        atomic.Pointer[map[string]map[string]bool]
	handoffMu      sync.Mutex
	handoffDefault atomic.Bool
	mapMu          sync.Mutex
	mappings       []MappingConfig
	lunMap         atomic.Pointer[LUNMap]
	mu             sync.Mutex
	listeners      []func(Change)
	closed         bool
	log            *slog.Logger
	bg             sync.WaitGroup // background destages
	opt            Options
	local          *Node // this process's node in cluster mode
	// topo orders a node's crash against a move's switch: no move
	// publishes a new owner that is down.
	topo sync.Mutex
}

// hook calls the move hook, if any.
func (a *Array) hook(p MovePoint) {
	if a.opt.MoveHook != nil {
		a.opt.MoveHook(p)
	}
}

func (a *Array) logf(format string, args ...any) { a.log.Warn(fmt.Sprintf(format, args...)) }

// Options are the array's injected dependencies.
type Options struct {
	// Sleep implements delays (inter-node penalty, media profiles); nil
	// uses media.PreciseWait (time.Sleep is ~1 ms coarse on some machines).
	Sleep func(time.Duration)
	// Now reads the clock (transition stop times); nil uses time.Now.
	Now func() time.Time
	// Clock paces the caches' destagers (nil: the real one).
	Clock clock.Clock
	// WrapStore, if set, wraps each LUN's media store (fault injection:
	// errors, latency, a flush that blocks).
	WrapStore func(lun uint64, s media.Store) media.Store
	// Logger receives what the array cannot return (nil: slog.Default).
	Logger *slog.Logger
	// OpenStore opens a LUN's backing store (nil: a sparse file per LUN
	// under Config.Data). The simulation uses in-memory stores.
	OpenStore func(lun uint64, size int64) (media.Store, error)
	// Background runs the array's background work (destaging data that
	// lost its mirror copy); nil runs it on a goroutine. Close waits for
	// what it started either way.
	Background func(f func())
	// ManualDestage: no destager goroutine per cache; the caller drives
	// destaging (Cache.DestagePass, Cache.DestageSome).
	ManualDestage bool
	// MoveHook, if set, is called at each phase point of a move and a
	// takeover, on the moving goroutine, with no lock of the array held
	// but the batch's own (its I/O locks from the hold on). The
	// simulation injects events there.
	MoveHook func(MovePoint)
	// Local and Remote make the array one controller of a cluster: the
	// node this process runs, and the other processes (see Remote). Both
	// or neither.
	Local  string
	Remote Remote
}

// MovePoint is a phase point of a move, given to Options.MoveHook.
type MovePoint struct {
	Phase    MovePhase
	LUNs     []uint64 // the batch
	From, To string
	// LUN is the LUN a per-LUN point is about.
	LUN uint64
}

// MovePhase names a point in a move.
type MovePhase string

// The phase points of a move, in order.
const (
	PhaseFlush    MovePhase = "flush"    // before each LUN's flush under I/O
	PhaseHold     MovePhase = "hold"     // I/O to the batch is held (its I/O locks taken)
	PhaseDestage  MovePhase = "destage"  // before each LUN's last destage in the hold
	PhaseSwitch   MovePhase = "switch"   // just before the new owner is published
	PhaseTakeover MovePhase = "takeover" // before each LUN of a takeover replays the mirror
)

// New builds the array and opens each LUN's backing file under cfg.Data.
func New(cfg Config, opt Options) (*Array, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opt.Sleep == nil {
		opt.Sleep = media.PreciseWait
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.OpenStore == nil {
		opt.OpenStore = func(id uint64, size int64) (media.Store, error) {
			return media.OpenFile(filepath.Join(cfg.Data, fmt.Sprintf("lun%d.img", id)), size)
		}
	}
	a := &Array{opt: opt, log: opt.Logger, cfg: cfg, portByID: map[uint16]*Port{}, lunByID: map[uint64]*LUN{}, sleep: opt.Sleep,
		now: opt.Now}
	a.penalty.Store(int64(cfg.Interlink.Penalty))
	a.hosts.Store(hostTable(cfg.Hosts))
	if _, err := a.setMappingsLocked(append([]MappingConfig(nil), cfg.Mappings...)); err != nil {
		return nil, err
	}
	byName := map[string]*Node{}
	var rel uint16 = 1
	ccfg := cfg.cacheConfig()
	ccfg.Clock = opt.Clock
	for i, nc := range cfg.Nodes {
		n := &Node{Name: nc.Name, Index: i, GroupID: uint16(i + 1), Cache: cache.New(nc.Name, ccfg),
			remote: opt.Local != "" && nc.Name != opt.Local}
		if opt.Local == nc.Name {
			a.local = n
		}
		n.up.Store(true)
		for _, pc := range nc.Ports {
			p := &Port{Name: pc.Name, Addr: pc.Addr, RelativeID: rel, Node: n}
			rel++
			n.Ports = append(n.Ports, p)
			a.Ports = append(a.Ports, p)
			a.portByID[p.RelativeID] = p
		}
		a.Nodes = append(a.Nodes, n)
		byName[n.Name] = n
	}
	if (opt.Local != "") != (opt.Remote != nil) || opt.Local != "" && a.local == nil {
		a.Close()
		return nil, fmt.Errorf("array: cluster mode needs a local node of the configuration (%q) and the cluster's remote", opt.Local)
	}
	for _, lc := range cfg.LUNs {
		prof, ok := media.Profiles[lc.Media]
		if !ok {
			a.Close()
			return nil, fmt.Errorf("LUN %d: unknown media profile %q (ram, ssd, hdd)", lc.ID, lc.Media)
		}
		f, err := opt.OpenStore(lc.ID, int64(lc.Size))
		if err != nil {
			a.Close()
			return nil, err
		}
		if d, ok := f.(media.CacheDropper); ok && opt.Local != "" {
			// A controller of a cluster: its machine may have cached the
			// file before another machine wrote it (shared storage).
			if err := d.DropCache(); err != nil {
				a.Close()
				return nil, fmt.Errorf("LUN %d: dropping the page cache of its media: %w", lc.ID, err)
			}
		}
		var st media.Store = media.WithProfile(f, prof, opt.Sleep)
		if opt.WrapStore != nil {
			st = opt.WrapStore(lc.ID, st)
		}
		l := &LUN{ID: lc.ID, Size: int64(lc.Size), BlockSize: lc.BlockSize, PhysicalBlockSize: lc.PhysicalBlockSize, Media: lc.Media, Group: lc.Group,
			Preferred: byName[lc.Preferred], store: st, file: f, arr: a,
			stats: make([]NodeStats, len(a.Nodes))}
		l.alua.Store(&aluaSnap{owner: l.Preferred, status: make([]byte, len(a.Nodes))})
		a.LUNs = append(a.LUNs, l)
		a.lunByID[l.ID] = l
	}
	sort.Slice(a.LUNs, func(i, j int) bool { return a.LUNs[i].ID < a.LUNs[j].ID })
	a.wireCaches()
	return a, nil
}

// wireCaches attaches every LUN to every node's cache (the back end is
// shared) and makes each node's mirror partner the next node up in order.
func (a *Array) wireCaches() {
	bw := float64(a.cfg.Interlink.Bandwidth)
	link := func(n int) {
		a.sleep(time.Duration(a.penalty.Load()) + time.Duration(float64(n)/bw*float64(time.Second)))
	}
	for _, n := range a.Nodes {
		for _, l := range a.LUNs {
			n.Cache.Attach(l.ID, l.store)
		}
		if a.local != nil {
			if n == a.local {
				n.Cache.SetRemote(a.opt.Remote.Mirror())
				n.Cache.SetGate(a.opt.Remote.Holds)
				if !a.opt.ManualDestage {
					n.Cache.Start()
				}
			}
			continue
		}
		var peers []*cache.Cache
		for _, m := range a.Nodes {
			if m != n {
				peers = append(peers, m.Cache)
			}
		}
		n.Cache.SetPeers(func() *cache.Cache {
			if p := a.partner(n); p != nil {
				return p.Cache
			}
			return nil
		}, peers, link)
		if !a.opt.ManualDestage {
			n.Cache.Start()
		}
	}
}

// partner is the node that mirrors n's write cache: the next node up
// after n in configuration order, or nil.
func (a *Array) partner(n *Node) *Node {
	for i := 1; i < len(a.Nodes); i++ {
		if m := a.Nodes[(n.Index+i)%len(a.Nodes)]; m.Up() {
			return m
		}
	}
	return nil
}

// Config returns the validated configuration.
func (a *Array) Config() Config {
	a.mapMu.Lock()
	defer a.mapMu.Unlock()
	c := a.cfg
	c.Hosts = slices.Clone(a.cfg.Hosts)
	c.Mappings = append([]MappingConfig(nil), a.mappings...)
	return c
}

// SetInterlinkPenalty changes the delay added to every forwarded command
// and mirror copy (a slow or congested inter-node link).
func (a *Array) SetInterlinkPenalty(d time.Duration) { a.penalty.Store(int64(max(d, 0))) }

// Port returns a port by relative id.
func (a *Array) Port(id uint16) *Port { return a.portByID[id] }

// LUN returns a LUN by id.
func (a *Array) LUN(id uint64) *LUN { return a.lunByID[id] }

// Node returns a node by name.
func (a *Array) Node(name string) *Node {
	for _, n := range a.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// NAA returns the LU's NAA designator in the locally assigned format
// (NAA 3h, SPC-4 7.8.6.6.3: 60 bits the array assigns): a hash of the
// array id and the LUN id, so it is the same on every path and across
// restarts, and two arrays with different ids do not share one (but by a
// 2^-60 chance). No IEEE company id is claimed.
func (a *Array) NAA(l *LUN) []byte {
	sum := a.identity(l)
	b := make([]byte, 8)
	copy(b, sum[:8])
	b[0] = 0x30 | b[0]&0x0f
	return b
}

// Serial is the LU's unit serial number (VPD 0x80): the LUN id and 48
// bits of the same hash.
func (a *Array) Serial(l *LUN) string {
	sum := a.identity(l)
	return fmt.Sprintf("ALUAD%03d%X", l.ID, sum[8:14])
}

// ID is the array id the LUNs' identities derive from (the config's
// array_id; the target name when none is set, as in tests built
// without a daemon).
func (a *Array) ID() string {
	if a.cfg.ArrayID != "" {
		return a.cfg.ArrayID
	}
	return a.cfg.Target
}

func (a *Array) identity(l *LUN) [32]byte {
	return sha256.Sum256(fmt.Appendf(nil, "aluad-lu\x00%s\x00%d", a.ID(), l.ID))
}

// ErrOwnerDown is returned for I/O to a LUN whose owner has failed and
// whose failover has not completed; the device server answers 04/0A
// (transitioning) so the host retries.
var ErrOwnerDown error = ownerDown{}

type ownerDown struct{}

func (ownerDown) Error() string { return "array: the owner node is down (failover in progress)" }

// ALUATransitioning marks the error for the device server (04/0A).
func (ownerDown) ALUATransitioning() bool { return true }

// route accounts a command arriving on port via and returns the owner
// whose cache serves it. When that port's node is not the owner the
// command is counted as forwarded and data transfers (n > 0) pay the
// interlink penalty; control operations (flush, unmap) ship no data.
func (l *LUN) route(via uint16, n int) (*Node, error) {
	p := l.arr.portByID[via]
	if p == nil {
		return nil, fmt.Errorf("array: command on unknown port %d", via)
	}
	st := &l.stats[p.Node.Index]
	st.Commands.Add(1)
	st.Bytes.Add(uint64(n))
	owner := l.Owner()
	if !owner.Up() {
		return nil, ErrOwnerDown
	}
	if owner == l.arr.local && !l.arr.opt.Remote.Serves(l.ID) {
		return nil, ErrOwnerDown // fenced, or in a hand-over: the host retries
	}
	if owner != p.Node {
		st.Forwarded.Add(1)
		st.ForwardedBytes.Add(uint64(n))
		if p := time.Duration(l.arr.penalty.Load()); p > 0 && n > 0 && !owner.remote {
			l.arr.sleep(p)
		}
	}
	return owner, nil
}

// cacheErr turns a crashed cache's refusal into ErrOwnerDown.
func cacheErr(err error) error {
	if errors.Is(err, cache.ErrDown) || errors.Is(err, cache.ErrNotHeld) {
		return ErrOwnerDown
	}
	return err
}

// ReadAt implements scsi.Backend.
func (l *LUN) ReadAt(via uint16, p []byte, off int64) error {
	l.io.RLock()
	defer l.io.RUnlock()
	owner, err := l.route(via, len(p))
	if err != nil {
		return err
	}
	if owner.remote {
		return l.forward(owner, &Op{Kind: OpRead, Off: off, Len: int64(len(p)), Data: p})
	}
	return cacheErr(owner.Cache.ReadAt(l.ID, p, off))
}

// ReadRef lends the bytes of a large read where they lie on the owner's
// media (the device server sends them without a copy), when the command
// came in on the owner's own port and its cache holds no newer page of
// them. Nil bytes and no error: use ReadAt. Counted and checked (owner
// up, not fenced) as ReadAt would, once.
func (l *LUN) ReadRef(via uint16, off int64, n int) ([]byte, interface{ Unref() }, error) {
	l.io.RLock()
	defer l.io.RUnlock()
	owner := l.Owner()
	if p := l.arr.portByID[via]; p == nil || owner != p.Node || owner.remote {
		return nil, nil, nil // not the owner's port: ReadAt forwards
	}
	b, r, ok := owner.Cache.ReadRef(l.ID, off, n)
	if !ok {
		return nil, nil, nil
	}
	if _, err := l.route(via, n); err != nil {
		r.Unref()
		return nil, nil, err // as ReadAt would have answered
	}
	return b, r, nil
}

// WriteAt implements scsi.Backend; fua makes the write durable before it completes.
func (l *LUN) WriteAt(via uint16, p []byte, off int64, fua bool) error {
	return l.WriteAtIf(via, p, off, fua, nil)
}

// WriteAtIf implements scsi.GuardedBackend: the write goes ahead only if
// live (when set) still holds once nothing holds it (a move's stop may
// have held it while a PREEMPT AND ABORT aborted its task).
func (l *LUN) WriteAtIf(via uint16, p []byte, off int64, fua bool, live interface{ Live() bool }) error {
	l.io.RLock()
	defer l.io.RUnlock()
	if live != nil && !live.Live() {
		return ErrTaskAborted
	}
	owner, err := l.route(via, len(p))
	if err != nil {
		return err
	}
	if owner.remote {
		return l.forward(owner, &Op{Kind: OpWrite, Off: off, Len: int64(len(p)), Data: p, FUA: fua})
	}
	return cacheErr(owner.Cache.WriteAt(l.ID, p, off, fua))
}

// UnmapIf implements scsi.GuardedBackend, as WriteAtIf.
func (l *LUN) UnmapIf(via uint16, off, length int64, live interface{ Live() bool }) error {
	l.io.RLock()
	defer l.io.RUnlock()
	if live != nil && !live.Live() {
		return ErrTaskAborted
	}
	owner, err := l.route(via, 0)
	if err != nil {
		return err
	}
	if owner.remote {
		return l.forward(owner, &Op{Kind: OpUnmap, Off: off, Len: length})
	}
	return cacheErr(owner.Cache.Unmap(l.ID, off, length))
}

// ErrTaskAborted is returned for a write whose task was aborted while it
// waited (the device server answers TASK ABORTED).
var ErrTaskAborted error = taskAborted{}

type taskAborted struct{}

func (taskAborted) Error() string     { return "array: task aborted (PREEMPT AND ABORT) while it waited" }
func (taskAborted) TaskAborted() bool { return true }

// Flush implements scsi.Backend (SYNCHRONIZE CACHE).
func (l *LUN) Flush(via uint16) error {
	l.io.RLock()
	defer l.io.RUnlock()
	owner, err := l.route(via, 0)
	if err != nil {
		return err
	}
	if owner.remote {
		return l.forward(owner, &Op{Kind: OpFlush})
	}
	return cacheErr(owner.Cache.Flush(l.ID))
}

// Unmap implements scsi.Backend.
func (l *LUN) Unmap(via uint16, off, length int64) error {
	return l.UnmapIf(via, off, length, nil)
}

// LBAStatus implements scsi.LBAStatuser: the provisioning of the bytes
// from off as the owner's cache and the media see it.
func (l *LUN) LBAStatus(via uint16, off int64) (end int64, mapped bool, err error) {
	l.io.RLock()
	defer l.io.RUnlock()
	owner, err := l.route(via, 0)
	if err != nil {
		return 0, false, err
	}
	if owner.remote {
		op := Op{Kind: OpLBAStatus, Off: off}
		err := l.forward(owner, &op)
		return op.End, op.Mapped, err
	}
	end, mapped, err = owner.Cache.Mapped(l.ID, off)
	return end, mapped, cacheErr(err)
}

// Sync destages every node's cache and flushes every LUN to stable storage.
func (a *Array) Sync() error {
	var errs []error
	for _, n := range a.Nodes {
		if n.Up() {
			if err := n.Cache.FlushAll(); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			}
		}
	}
	for _, l := range a.LUNs {
		if err := l.store.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("LUN %d: %w", l.ID, err))
		}
	}
	return errors.Join(errs...)
}

// Close syncs and closes every LUN.
func (a *Array) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	a.bg.Wait()
	var errs []error
	for _, n := range a.Nodes {
		if n.Up() {
			if err := n.Cache.FlushAll(); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			}
		}
		n.Cache.Close()
	}
	for _, l := range a.LUNs {
		if err := l.store.Sync(); err != nil {
			errs = append(errs, err)
		}
		if err := l.store.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
