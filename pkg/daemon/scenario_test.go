package daemon

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
	"github.com/aluad/aluad/pkg/clock"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/media"
	"github.com/aluad/aluad/pkg/scsi"
)

// Scenario tests (CONVENTIONS 6): scripts in testdata/alua drive the array
// and its device server directly, without a network, and the golden output
// shows INQUIRY, VPD, RTPG and sense bytes as hex. Regenerate with
//
//	go test ./pkg/daemon -run TestScenarios -rewrite
//
// Commands:
//
//	array [alua=implicit|explicit] [nodes=N] [ports=N] [luns=N] [host=NAME:TYPE ...]
//	login host=NAME port=RELID [isid=N]     a new I_T nexus (UA 29/00 on every LU)
//	logout host=NAME port=RELID [isid=N]
//	cdb host=NAME port=RELID lun=N          input: CDB hex, optional "data: <hex>" line
//	move lun=N|(N,N...) to=NODE [hold]        hold: the flush blocks until "release"
//	release                                 lets a held move finish
//	fail-flush lun=N                        the next flush of that LUN fails
//	node-down NAME / node-up NAME
//	luns                                    owners and group states
//	events                                  the feed since the last "events"
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/alua", func(t *testing.T, path string) {
		s := &scenario{t: t}
		defer s.close()
		datadriven.RunTest(t, path, s.run)
	})
}

type scenario struct {
	t       *testing.T
	d       *Daemon
	clock   *clock.Fake
	stores  map[uint64]*faultStore
	pending chan moveResult
	holdCh  chan struct{}
	seenSeq uint64
}

type moveResult struct {
	c   array.Change
	err error
}

// faultStore wraps a LUN's media: Sync can block (hold) or fail once.
type faultStore struct {
	media.Store
	mu       sync.Mutex
	hold     chan struct{} // non-nil: Sync waits for it to close
	entered  chan struct{}
	failNext bool
}

func (f *faultStore) Sync() error {
	f.mu.Lock()
	hold, entered, fail := f.hold, f.entered, f.failNext
	f.hold, f.entered, f.failNext = nil, nil, false
	f.mu.Unlock()
	if hold != nil {
		close(entered)
		<-hold
	}
	if fail {
		return errors.New("injected flush failure")
	}
	return f.Store.Sync()
}

func (s *scenario) close() {
	if s.d != nil {
		s.d.Array.Close()
	}
}

func (s *scenario) now() time.Time { return s.clock.Now() }

func (s *scenario) run(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "array":
		return s.cmdArray(t, td)
	case "login", "logout":
		n := s.nexus(t, td)
		if td.Cmd == "login" {
			s.d.SCSI.NexusUp(n)
			s.d.ctl.Fabric(fabricEv("login", n))
		} else {
			s.d.SCSI.NexusLost(n)
			s.d.ctl.Fabric(fabricEv("logout", n))
		}
		return "ok\n"
	case "cdb":
		return s.cmdCDB(t, td)
	case "move":
		return s.cmdMove(t, td)
	case "release":
		if s.pending == nil {
			t.Fatalf("%s: no held move", td.Pos)
		}
		close(s.holdCh)
		r := <-s.pending
		s.pending = nil
		return changeString(r.c, r.err)
	case "fail-flush":
		var lun uint64
		td.ScanArgs(t, "lun", &lun)
		f := s.stores[lun]
		f.mu.Lock()
		f.failNext = true
		f.mu.Unlock()
		return "ok\n"
	case "node-down", "node-up":
		if err := s.d.Array.SetNodeUp(td.CmdArgs[0].Key, td.Cmd == "node-up"); err != nil {
			return "error: " + err.Error() + "\n"
		}
		return "ok\n"
	case "luns":
		var b strings.Builder
		for _, l := range s.d.LUNInfos() {
			fmt.Fprintf(&b, "lun %d owner=%s preferred=%s moving=%v gen=%d:", l.ID, l.Owner, l.Preferred, l.Moving, l.Generation)
			for _, g := range l.Groups {
				fmt.Fprintf(&b, " %s=%s/%02x", g.Node, g.State, g.Status)
			}
			for _, n := range l.Nodes {
				fmt.Fprintf(&b, " %s:cmds=%d,fwd=%d", n.Node, n.Commands, n.Forwarded)
			}
			b.WriteString("\n")
		}
		return b.String()
	case "events":
		return s.cmdEvents()
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return ""
}

func fabricEv(kind string, n scsi.Nexus) fabric.Event { return fabric.Event{Kind: kind, Nexus: n} }

func (s *scenario) cmdArray(t *testing.T, td *datadriven.TestData) string {
	mode, nodes, ports, luns := "implicit", 2, 2, 2
	cfg := config.Default()
	cfg.Nodes, cfg.LUNs = nil, nil
	cfg.Data = t.TempDir()
	cfg.Interlink.Penalty = 0
	for _, a := range td.CmdArgs {
		switch a.Key {
		case "alua":
			mode = a.Vals[0]
		case "nodes":
			nodes, _ = strconv.Atoi(a.Vals[0])
		case "ports":
			ports, _ = strconv.Atoi(a.Vals[0])
		case "luns":
			luns, _ = strconv.Atoi(a.Vals[0])
		case "host":
			name, typ, _ := strings.Cut(a.Vals[0], ":")
			cfg.Hosts = append(cfg.Hosts, array.HostConfig{Name: name, Type: typ, Initiators: []string{iqn(name)}})
		default:
			t.Fatalf("%s: unknown argument %q", td.Pos, a.Key)
		}
	}
	cfg.ALUA = mode
	for i := 0; i < nodes; i++ {
		nc := array.NodeConfig{Name: string(rune('a' + i))}
		for j := 0; j < ports; j++ {
			nc.Ports = append(nc.Ports, array.PortConfig{Name: fmt.Sprintf("%s%d", nc.Name, j), Addr: "127.0.0.1:0"})
		}
		cfg.Nodes = append(cfg.Nodes, nc)
	}
	for i := 0; i < luns; i++ {
		cfg.LUNs = append(cfg.LUNs, array.LUNConfig{ID: uint64(i), Size: 1 << 20})
	}
	if err := cfg.Validate(); err != nil {
		return "error: " + err.Error() + "\n"
	}
	if cfg.ArrayID == "" {
		cfg.ArrayID = "scenario" // a fixed identity: the golden VPD pages show it
	}
	s.clock = clock.NewFake(time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC))
	s.stores = map[uint64]*faultStore{}
	var err error
	s.d, err = New(cfg, Options{Clock: s.clock, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WrapStore: func(lun uint64, st media.Store) media.Store {
		f := &faultStore{Store: st}
		s.stores[lun] = f
		return f
	}})
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "alua=%s tpgs=%02b transition-time=%ds\n", mode, s.d.Array.TPGS(), s.d.Array.TransitionTime())
	for _, n := range s.d.Array.Nodes {
		fmt.Fprintf(&b, "node %s group=%d ports=", n.Name, n.GroupID)
		for i, p := range n.Ports {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%d", p.RelativeID)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func iqn(host string) string { return "iqn.2026-11.org.example:" + host }

func (s *scenario) nexus(t *testing.T, td *datadriven.TestData) scsi.Nexus {
	var host string
	var port, isid int
	td.ScanArgs(t, "host", &host)
	td.ScanArgs(t, "port", &port)
	if td.HasArg("isid") {
		td.ScanArgs(t, "isid", &isid)
	}
	return scsi.Nexus{InitiatorName: iqn(host), InitiatorPort: fmt.Sprintf("%s,i,0x%012x", iqn(host), 0x400000000000+isid),
		TargetPort: uint16(port)}
}

func (s *scenario) cmdCDB(t *testing.T, td *datadriven.TestData) string {
	n := s.nexus(t, td)
	var lun uint64
	td.ScanArgs(t, "lun", &lun)
	lines := strings.Split(strings.TrimSpace(td.Input), "\n")
	cdb := mustHex(t, lines[0])
	c := &scsi.Command{Nexus: n, LUN: lun, CDB: cdb, DataInLen: 1 << 16}
	for _, l := range lines[1:] {
		if rest, ok := strings.CutPrefix(l, "data:"); ok {
			var n int
			var v byte
			if _, err := fmt.Sscanf(rest, " fill %d %x", &n, &v); err == nil {
				c.Data = bytes.Repeat([]byte{v}, n)
			} else {
				c.Data = mustHex(t, rest)
			}
		}
	}
	r := s.d.SCSI.Execute(c)
	return describe(cdb, r)
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

var keyNames = map[byte]string{0: "NO SENSE", 2: "NOT READY", 4: "HARDWARE ERROR", 5: "ILLEGAL REQUEST",
	6: "UNIT ATTENTION", 0xb: "ABORTED COMMAND"}

// describe renders a response: status, decoded sense or RTPG, and hex.
func describe(cdb []byte, r scsi.Response) string {
	var b strings.Builder
	switch r.Status {
	case scsi.StatusGood:
		b.WriteString("GOOD\n")
	case scsi.StatusCheckCondition:
		p, err := scsi.ParseSense(r.Sense)
		if err != nil {
			fmt.Fprintf(&b, "CHECK CONDITION (bad sense: %v)\n", err)
		} else {
			fmt.Fprintf(&b, "CHECK CONDITION %s %02X/%02X\n", keyNames[p.Key], p.ASC, p.ASCQ)
		}
		fmt.Fprintf(&b, "sense: %s\n", hexBytes(r.Sense))
		return b.String()
	default:
		fmt.Fprintf(&b, "status 0x%02x\n", byte(r.Status))
		return b.String()
	}
	if cdb[0] == scsi.OpMaintenanceIn && cdb[1]&0x1f == scsi.SAReportTPG {
		gs, ext, tt, err := scsi.ParseRTPG(r.Data)
		if err != nil {
			fmt.Fprintf(&b, "not decoded (%v)\n", err)
		} else {
			fmt.Fprintf(&b, "rtpg extended=%v transition-time=%d\n", ext, tt)
			for _, g := range gs {
				fmt.Fprintf(&b, "  group %d %s pref=%v status=%02x ports=%v\n", g.ID, stateName(g.State), g.Pref, g.Status, g.Ports)
			}
		}
	}
	switch {
	case len(r.Data) > 256: // media data: its size and a digest, not 512 bytes of hex
		if bytes.Count(r.Data, r.Data[:1]) == len(r.Data) {
			fmt.Fprintf(&b, "data: %d bytes, all %02x\n", len(r.Data), r.Data[0])
		} else {
			fmt.Fprintf(&b, "data: %d bytes, crc32 %08x\n", len(r.Data), crc32.ChecksumIEEE(r.Data))
		}
	case len(r.Data) > 0:
		fmt.Fprintf(&b, "data: %s\n", hexBytes(r.Data))
	}
	return b.String()
}

func stateName(s alua.AccessState) string { return alua.AccessState(s).String() }

// hexBytes prints bytes 16 to a line.
func hexBytes(p []byte) string {
	var b strings.Builder
	for i, c := range p {
		if i > 0 && i%16 == 0 {
			b.WriteString("\n      ")
		} else if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%02x", c)
	}
	return b.String()
}

func (s *scenario) cmdMove(t *testing.T, td *datadriven.TestData) string {
	var to string
	var ids []uint64
	td.ScanArgs(t, "to", &to)
	for _, a := range td.CmdArgs {
		if a.Key == "lun" {
			for _, v := range a.Vals {
				id, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("%s: bad lun %q", td.Pos, v)
				}
				ids = append(ids, id)
			}
		}
	}
	cause := alua.CauseManual
	if td.HasArg("cause") {
		var c string
		td.ScanArgs(t, "cause", &c)
		cause = alua.Cause(c)
	}
	if !td.HasArg("hold") {
		s.clock.Advance(time.Millisecond)
		c, err := s.d.Array.Move(ids, to, cause)
		return changeString(c, err)
	}
	// A held move: the first LUN's flush blocks until "release", so the
	// script can look at the array while it is TRANSITIONING.
	s.holdCh = make(chan struct{})
	entered := make(chan struct{})
	f := s.stores[ids[0]]
	f.mu.Lock()
	f.hold, f.entered = s.holdCh, entered
	f.mu.Unlock()
	s.pending = make(chan moveResult, 1)
	go func() {
		c, err := s.d.Array.Move(ids, to, cause)
		s.pending <- moveResult{c, err}
	}()
	<-entered
	return "holding in flush\n"
}

func changeString(c array.Change, err error) string {
	if err != nil && !c.Failed {
		return "error: " + err.Error() + "\n"
	}
	s := fmt.Sprintf("moved luns=%v %s->%s cause=%s", c.LUNs, c.From, c.To, c.Cause)
	if c.Failed {
		s = fmt.Sprintf("failed luns=%v %s->%s (rolled back): %v", c.LUNs, c.From, c.To, c.Err)
	}
	return s + "\n"
}

func (s *scenario) cmdEvents() string {
	s.d.EmitIOStats()
	ev, _ := s.d.Events.Since(s.seenSeq)
	var b strings.Builder
	for _, e := range ev {
		s.seenSeq = e.Seq
		fmt.Fprintf(&b, "%d %s", e.Seq, e.Kind)
		if e.Initiator != "" {
			fmt.Fprintf(&b, " host=%s isid=%s port=%d node=%s", e.Host, e.ISID, e.TargetPort, e.Node)
		}
		if e.LUN != nil {
			fmt.Fprintf(&b, " lun=%d", *e.LUN)
		}
		if e.Kind == api.EventRTPG {
			fmt.Fprintf(&b, " extended=%v", e.Extended)
		}
		if e.Kind == api.EventUA {
			fmt.Fprintf(&b, " sense=%s", e.Reason)
		}
		if e.IO != nil {
			fmt.Fprintf(&b, " reads=%d writes=%d other=%d read=%dB written=%dB non-optimized=%d",
				e.IO.Reads, e.IO.Writes, e.IO.Other, e.IO.BytesRead, e.IO.BytesWritten, e.IO.NonOptimized)
		}
		if c := e.Change; c != nil {
			fmt.Fprintf(&b, " luns=%v %s->%s cause=%s failed=%v", c.LUNs, c.From, c.To, c.Cause, c.Failed)
		}
		b.WriteString("\n")
	}
	return b.String()
}
