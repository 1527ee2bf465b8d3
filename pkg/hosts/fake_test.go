package hosts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/scsi"
)

// fakeTarget is a scripted two-group ALUA target: ports 1,2 in group 1
// (node a) and 3,4 in group 2 (node b), one state per group for every
// LUN, per-nexus unit attention queues, per-initiator path cuts, and a
// log of every command.
type fakeTarget struct {
	mu       sync.Mutex
	state    map[uint16]alua.AccessState
	tt       byte
	explicit bool
	rtpgTime time.Duration
	cut      map[string]bool // "host/port"
	nexi     []*fakeNexus
	log      []fakeCmd
	moves    int
	// pref: the group reported with the PREF bit (0: none).
	pref uint16
	// media holds each written block's first byte. holdWrites parks that
	// many of the next writes at the target: the nexus stops waiting for
	// one when its context ends, and a parked write lands at release
	// unless a task management function ended it (tmfFails: none is
	// answered, the nexus is dropped instead).
	media      map[uint64]byte
	holdWrites int
	parked     []*parkedWrite
	tmfFails   bool
}

// parkedWrite is a write held at the target.
type parkedWrite struct {
	lba   uint64
	b     byte
	ended bool
}

// abandonedErr is what a nexus returns for a parked write it stopped
// waiting for.
type abandonedErr struct {
	err error
	pw  *parkedWrite
}

func (e *abandonedErr) Error() string { return "abandoned: " + e.err.Error() }
func (e *abandonedErr) Unwrap() error { return e.err }

// release lets every parked write that was not ended land.
func (t *fakeTarget) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, pw := range t.parked {
		if !pw.ended {
			t.media[pw.lba] = pw.b
		}
	}
	t.parked = nil
}

// block returns the first byte of the block at lba.
func (t *fakeTarget) block(lba uint64) byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.media[lba]
}

type fakeCmd struct {
	At   time.Time
	Host string
	Port uint16
	Op   string
	OK   bool
}

func newFakeTarget() *fakeTarget {
	return &fakeTarget{state: map[uint16]alua.AccessState{1: alua.ActiveOptimized, 2: alua.ActiveNonOptimized},
		cut: map[string]bool{}, media: map[uint64]byte{}}
}

func groupOfPort(port uint16) uint16 { return (port-1)/2 + 1 }

type senseErr struct{ key, asc, ascq byte }

func (e senseErr) Error() string                 { return fmt.Sprintf("sense %x/%02x/%02x", e.key, e.asc, e.ascq) }
func (e senseErr) KeyASC() (key, asc, ascq byte) { return e.key, e.asc, e.ascq }

var errConnReset = errors.New("connection reset")

// paths returns the four path specs of host on t.
func (t *fakeTarget) paths(host string) []PathSpec {
	var out []PathSpec
	for port := uint16(1); port <= 4; port++ {
		node := map[uint16]string{1: "a", 2: "b"}[groupOfPort(port)]
		out = append(out, PathSpec{Name: fmt.Sprintf("%s:%s%d", host, node, (port-1)%2+1), Node: node, RelID: port,
			Dial: func(ctx context.Context) (Nexus, error) { return t.dial(host, port) }})
	}
	return out
}

func (t *fakeTarget) dial(host string, port uint16) (Nexus, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut[fmt.Sprint(host, "/", port)] {
		return nil, errConnReset
	}
	n := &fakeNexus{t: t, host: host, port: port, done: make(chan struct{})}
	t.nexi = append(t.nexi, n)
	return n, nil
}

// setCut cuts (or restores) host's paths to port, closing live nexuses.
func (t *fakeTarget) setCut(host string, port uint16, cut bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cut[fmt.Sprint(host, "/", port)] = cut
	if cut {
		for _, n := range t.nexi {
			if n.host == host && n.port == port {
				n.close()
			}
		}
	}
}

// move sets the groups' states and queues 2A/06 on every nexus but skip.
func (t *fakeTarget) move(states map[uint16]alua.AccessState, skip *fakeNexus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setLocked(states, skip)
}

func (t *fakeTarget) setLocked(states map[uint16]alua.AccessState, skip *fakeNexus) {
	for g, s := range states {
		t.state[g] = s
	}
	t.moves++
	for _, n := range t.nexi {
		if n != skip {
			n.ua = append(n.ua, 0x2a06)
		}
	}
}

// count returns how many logged commands match.
func (t *fakeTarget) count(match func(fakeCmd) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.log {
		if match(c) {
			n++
		}
	}
	return n
}

func (t *fakeTarget) cmds() []fakeCmd {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]fakeCmd(nil), t.log...)
}

type fakeNexus struct {
	t      *fakeTarget
	host   string
	port   uint16
	ua     []uint16
	done   chan struct{}
	closed bool
}

func (n *fakeNexus) close() {
	if !n.closed {
		n.closed = true
		close(n.done)
	}
}

// begin logs a command and returns the error it meets before the device
// server: a dead nexus or a pending unit attention.
func (n *fakeNexus) begin(op string, gated bool) error {
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	c := fakeCmd{At: time.Now(), Host: n.host, Port: n.port, Op: op}
	var err error
	switch {
	case n.closed:
		err = errConnReset
	case len(n.ua) > 0:
		code := n.ua[0]
		n.ua = n.ua[1:]
		err = senseErr{0x6, byte(code >> 8), byte(code)}
	case gated:
		switch t.state[groupOfPort(n.port)] {
		case alua.Transitioning:
			err = senseErr{0x2, 0x04, 0x0a}
		case alua.Standby:
			err = senseErr{0x2, 0x04, 0x0b}
		case alua.Unavailable:
			err = senseErr{0x2, 0x04, 0x0c}
		}
	}
	c.OK = err == nil
	t.log = append(t.log, c)
	return err
}

func (n *fakeNexus) Read(ctx context.Context, lun, lba uint64, blocks uint32) ([]byte, error) {
	if err := n.begin("read", true); err != nil {
		return nil, err
	}
	return make([]byte, int(blocks)*BlockSize), nil
}

func (n *fakeNexus) Write(ctx context.Context, lun, lba uint64, data []byte, fua bool) error {
	if err := n.begin("write", true); err != nil {
		return err
	}
	t := n.t
	t.mu.Lock()
	if t.holdWrites == 0 {
		t.media[lba] = data[0]
		t.mu.Unlock()
		return nil
	}
	t.holdWrites--
	pw := &parkedWrite{lba: lba, b: data[0]}
	t.parked = append(t.parked, pw)
	t.mu.Unlock()
	select {
	case <-ctx.Done():
		return &abandonedErr{ctx.Err(), pw}
	case <-n.done:
		return errConnReset
	}
}

// EndTask answers ABORT TASK for a parked write unless tmfFails.
func (n *fakeNexus) EndTask(ctx context.Context, err error, step time.Duration) error {
	n.begin("abort", false)
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	var a *abandonedErr
	if t.tmfFails || !errors.As(err, &a) {
		n.close()
		return errors.New("task management not answered: nexus dropped")
	}
	a.pw.ended = true
	return nil
}

func (n *fakeNexus) TestUnitReady(ctx context.Context, lun uint64) error {
	return n.begin("tur", false)
}

func (n *fakeNexus) ReportTargetPortGroups(ctx context.Context, lun uint64) ([]byte, error) {
	if err := n.begin("rtpg", false); err != nil {
		return nil, err
	}
	if d := n.t.rtpgTime; d > 0 {
		time.Sleep(d)
	}
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	groups := []scsi.PortGroupState{{ID: 1, State: t.state[1], Pref: t.pref == 1, Ports: []uint16{1, 2}},
		{ID: 2, State: t.state[2], Pref: t.pref == 2, Ports: []uint16{3, 4}}}
	return scsi.AppendRTPG(nil, groups, true, t.tt), nil
}

func (n *fakeNexus) SetTargetPortGroups(ctx context.Context, lun uint64, reqs []alua.GroupRequest) error {
	if err := n.begin("stpg", false); err != nil {
		return err
	}
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.explicit {
		return senseErr{0x5, 0x20, 0x00}
	}
	for _, r := range reqs {
		if r.State == alua.ActiveOptimized && t.state[r.Group] != alua.ActiveOptimized {
			other := 3 - r.Group
			t.setLocked(map[uint16]alua.AccessState{r.Group: alua.ActiveOptimized, other: alua.ActiveNonOptimized}, n)
		}
	}
	return nil
}

func (n *fakeNexus) TPGS(ctx context.Context, lun uint64) (byte, error) {
	if err := n.begin("inquiry", false); err != nil {
		return 0, err
	}
	n.t.mu.Lock()
	defer n.t.mu.Unlock()
	if n.t.explicit {
		return 3, nil
	}
	return 1, nil
}

func (n *fakeNexus) Done() <-chan struct{} { return n.done }
func (n *fakeNexus) Close() error {
	n.t.mu.Lock()
	n.close()
	n.t.mu.Unlock()
	return nil
}
