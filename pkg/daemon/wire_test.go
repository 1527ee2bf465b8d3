package daemon

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/ownership"
	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/fabric"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/memnet"
)

// wireOf is what a host sees of a port on the wire.
type wireOf int

const (
	serves  wireOf = iota
	closes         // open connections get a FIN; a new one is accepted and closed
	resets         // open connections get a RST; a new one is refused
	silence        // nothing answered, nothing closed; a new one is accepted and never answered
)

// TestFaultWire: each fault kind has the wire behaviour of the real event
// on the ports it hits, leaves the other ports serving, and its repair
// resets what a silent port held.
func TestFaultWire(t *testing.T) {
	cases := []struct {
		name           string
		fault, restore api.Fault
		// a0 and a1 are node a's ports; b0 is node b's.
		a0, a1 wireOf
	}{
		{"power loss", api.Fault{Kind: api.FaultPowerLoss, Node: "a"}, api.Fault{Kind: api.FaultRestart, Node: "a"}, silence, silence},
		{"panic", api.Fault{Kind: api.FaultPanic, Node: "a"}, api.Fault{Kind: api.FaultRestart, Node: "a"}, resets, resets},
		{"crash", api.Fault{Kind: api.FaultCrash, Node: "a"}, api.Fault{Kind: api.FaultRestart, Node: "a"}, closes, closes},
		{"port disable", api.Fault{Kind: api.FaultPortDown, Port: "a0"}, api.Fault{Kind: api.FaultPortUp, Port: "a0"}, closes, serves},
		{"cable pull", api.Fault{Kind: api.FaultCablePull, Port: "a0"}, api.Fault{Kind: api.FaultCablePlug, Port: "a0"}, silence, serves},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := wireDaemon(t)
			var err error
			portals := d.Portals()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			login := func(i int, isid byte) (*initiator.Session, error) {
				lctx, lcancel := context.WithTimeout(ctx, time.Second)
				defer lcancel()
				return initiator.Dial(lctx, initiator.Config{Addr: portals[i].Addr, Target: portals[i].Target,
					InitiatorName: "iqn.2026-11.org.example:w", ISID: [6]byte{0x80, 0, 0, 0, 0, isid}, DialTimeout: time.Second})
			}
			// tur sends TEST UNIT READY and reports whether any answer came
			// within the wait (a unit attention is an answer).
			tur := func(s *initiator.Session, wait time.Duration) error {
				cctx, ccancel := context.WithTimeout(ctx, wait)
				defer ccancel()
				_, err := s.Execute(cctx, 0, make([]byte, 6), nil, 0)
				return err
			}
			var sess []*initiator.Session
			for i := range 3 { // a0, a1, b0
				s, err := login(i, byte(i+1))
				require.NoError(t, err)
				defer s.Close()
				require.NoError(t, tur(s, 2*time.Second))
				sess = append(sess, s)
			}

			_, err = d.Inject(tc.fault)
			require.NoError(t, err)
			var held []net.Conn
			for i, want := range []wireOf{tc.a0, tc.a1, serves} {
				s := sess[i]
				switch want {
				case serves:
					require.NoError(t, tur(s, 2*time.Second), "port %d serves", i)
				case closes, resets:
					select {
					case <-s.Done():
					case <-time.After(2 * time.Second):
						t.Fatalf("port %d: the session did not end", i)
					}
					err := tur(s, time.Second)
					if want == resets {
						require.ErrorIs(t, err, syscall.ECONNRESET, "port %d: reset", i)
					} else {
						require.ErrorIs(t, err, io.EOF, "port %d: closed", i)
					}
				case silence:
					require.ErrorIs(t, tur(s, 300*time.Millisecond), context.DeadlineExceeded, "port %d: no answer", i)
					select {
					case <-s.Done():
						t.Fatalf("port %d: a silent port closed the connection", i)
					default:
					}
				}
				// A new connection.
				nc, err := net.DialTimeout("tcp", portals[i].Addr, time.Second)
				if want == resets {
					require.ErrorIs(t, err, syscall.ECONNREFUSED, "port %d refuses", i)
					continue
				}
				require.NoError(t, err, "port %d accepts", i)
				defer nc.Close()
				nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				_, err = nc.Read(make([]byte, 1))
				switch want {
				case closes:
					require.ErrorIs(t, err, io.EOF, "port %d closes a new connection", i)
				case silence:
					require.ErrorIs(t, err, os.ErrDeadlineExceeded, "port %d holds a new connection", i)
					held = append(held, nc)
				default:
					require.ErrorIs(t, err, os.ErrDeadlineExceeded, "port %d waits for a login", i)
				}
			}

			_, err = d.Inject(tc.restore)
			require.NoError(t, err)
			// What a silent port held is reset when it comes back.
			for i, want := range []wireOf{tc.a0, tc.a1} {
				if want != silence {
					continue
				}
				select {
				case <-sess[i].Done():
				case <-time.After(2 * time.Second):
					t.Fatalf("port %d: the held session was not reset", i)
				}
				require.ErrorIs(t, tur(sess[i], time.Second), syscall.ECONNRESET)
			}
			for _, nc := range held {
				nc.SetReadDeadline(time.Now().Add(2 * time.Second))
				_, err := nc.Read(make([]byte, 1))
				require.True(t, errors.Is(err, syscall.ECONNRESET), "a held new connection is reset: %v", err)
			}
			for i := range 3 {
				require.Eventually(t, func() bool {
					s, err := login(i, byte(10+i))
					if err == nil {
						s.Close()
					}
					return err == nil
				}, 5*time.Second, 50*time.Millisecond, "port %d takes logins again", i)
			}
		})
	}
}

// TestFaultOnFailedNode: a failed node cannot fail again, and its ports
// follow it: no port fault or repair applies until it restarts.
func TestFaultOnFailedNode(t *testing.T) {
	d := wireDaemon(t)
	var err error
	_, err = d.Inject(api.Fault{Kind: api.FaultPowerLoss, Node: "a"})
	require.NoError(t, err)
	for _, f := range []api.Fault{{Kind: api.FaultPanic, Node: "a"}, {Kind: api.FaultCrash, Node: "a"}, {Kind: api.FaultPowerLoss, Node: "a"}} {
		_, err = d.Inject(f)
		require.ErrorContains(t, err, "already down", "%+v", f)
	}
	for _, k := range []string{api.FaultPortUp, api.FaultCablePlug, api.FaultPortDown, api.FaultCablePull} {
		_, err = d.Inject(api.Fault{Kind: k, Port: "a0"})
		require.ErrorContains(t, err, "node a is down", k)
	}
	// A clear leaves the failed node as it failed: silent.
	_, err = d.Inject(api.Fault{Kind: api.FaultClear})
	require.NoError(t, err)
	nc, err := net.DialTimeout("tcp", d.Portals()[0].Addr, time.Second)
	require.NoError(t, err)
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = nc.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "still silent after a clear")
	_, err = d.Inject(api.Fault{Kind: api.FaultRestart, Node: "a"})
	require.NoError(t, err)
	_, err = d.Inject(api.Fault{Kind: api.FaultRestart, Node: "a"})
	require.ErrorContains(t, err, "not down")
}

// TestNopTimeoutFindsSilence: an initiator with a connection ping (as
// open-iscsi's noop_out) keeps an idle session to a serving port, and
// ends the one to a port that lost power after interval + timeout. The
// daemon and the hosts run on an in-memory network inside a synctest
// bubble: the pings' time is fake, so the test measures the detection
// exactly and waits for nothing.
func TestNopTimeoutFindsSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		d, err := Start(config.Loopback(t.TempDir(), 1<<20), Options{Logger: quiet(), StatsInterval: -1, Listen: nw.Listen})
		require.NoError(t, err)
		defer d.Stop(5 * time.Second)
		portals := d.Portals()
		var ss []*initiator.Session
		for i := range portals { // a0 a1 b0 b1
			s, err := initiator.Dial(context.Background(), initiator.Config{Addr: portals[i].Addr, Target: portals[i].Target,
				InitiatorName: "iqn.2026-11.org.example:n", ISID: [6]byte{0x80, 0, 0, 0, 0, byte(i + 1)},
				NopInterval: 100 * time.Millisecond, NopTimeout: 100 * time.Millisecond, Dial: nw.Dial})
			require.NoError(t, err)
			defer s.Close()
			ss = append(ss, s)
		}
		synctest.Wait() // every session idle
		lost := time.Now()
		_, err = d.Inject(api.Fault{Kind: api.FaultPowerLoss, Node: "a"})
		require.NoError(t, err)
		for i, s := range ss[:2] {
			<-s.Done()
			// Silent from the fault on: the first ping after 100 ms of
			// nothing, unanswered for 100 ms, each checked every 25 ms.
			took := time.Since(lost)
			require.GreaterOrEqual(t, took, 200*time.Millisecond, "session %d", i)
			require.LessOrEqual(t, took, 250*time.Millisecond, "session %d", i)
			_, err := s.Ping(context.Background(), nil)
			require.ErrorIs(t, err, initiator.ErrNopTimeout)
		}
		time.Sleep(time.Minute) // fake time: hundreds of ping rounds on b's idle sessions
		for i, s := range ss[2:] {
			select {
			case <-s.Done():
				t.Fatalf("idle session %d to a serving port ended", i+2)
			default:
			}
			_, err := s.Ping(context.Background(), nil)
			require.NoError(t, err, "session %d still answers", i+2)
		}
	})
}

// TestRestartListensAgain: a panicked node's restart finds its address
// taken by another socket: the node is up (the core is told before the
// ports), the port stays refusing, and a port-up once the address is free
// listens again.
func TestRestartListensAgain(t *testing.T) {
	d := wireDaemon(t)
	var err error
	addr := d.Portals()[0].Addr
	_, err = d.Inject(api.Fault{Kind: api.FaultPanic, Node: "a"})
	require.NoError(t, err)
	thief, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	_, err = d.Inject(api.Fault{Kind: api.FaultRestart, Node: "a"})
	require.ErrorContains(t, err, "did not come back")
	require.True(t, d.Array.Node("a").Up())
	thief.Close()
	_, err = d.Inject(api.Fault{Kind: api.FaultPortUp, Port: "a0"})
	require.NoError(t, err)
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err, "a0 serves again")
	nc.Close()
}

// TestPortModeResetUpRace: a reset and an up of one port at once leave it
// either refusing (reset) or listening (up), never up and refusing.
func TestPortModeResetUpRace(t *testing.T) {
	d := wireDaemon(t)
	addr := d.Portals()[0].Addr
	rel := d.Array.Node("a").Ports[0].RelativeID
	for i := 0; i < 300; i++ {
		require.NoError(t, d.Target.SetPortMode(rel, fabric.PortReset))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); d.Target.SetPortMode(rel, fabric.PortUp) }()
		go func() { defer wg.Done(); d.Target.SetPortMode(rel, fabric.PortReset) }()
		wg.Wait()
		m := d.Target.PortMode(rel)
		nc, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			nc.Close()
		}
		require.Equal(t, m == fabric.PortUp, err == nil, "iteration %d: port mode %v, dial: %v", i, m, err)
		require.NoError(t, d.Target.SetPortMode(rel, fabric.PortUp))
	}
}

// TestSilentPortHoldsBounded: a silent port holds what it accepts, but
// not without bound: past 256, the oldest held connection is let go.
func TestSilentPortHoldsBounded(t *testing.T) {
	d := wireDaemon(t)
	var err error
	_, err = d.Inject(api.Fault{Kind: api.FaultCablePull, Port: "a0"})
	require.NoError(t, err)
	addr := d.Portals()[0].Addr
	var conns []net.Conn
	for range 260 {
		nc, err := net.DialTimeout("tcp", addr, time.Second)
		require.NoError(t, err)
		defer nc.Close()
		conns = append(conns, nc)
	}
	first, last := conns[0], conns[len(conns)-1]
	first.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = first.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET, "the oldest held connection is let go")
	last.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = last.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the newest is held, silent")
}

// TestRestartBringsPortsBack: a port whose cable was pulled before its
// node lost power serves again after the restart, and the core counts a
// path through it as working.
func TestRestartBringsPortsBack(t *testing.T) {
	d := wireDaemon(t)
	var err error
	for _, f := range []api.Fault{{Kind: api.FaultCablePull, Port: "a0"}, {Kind: api.FaultPowerLoss, Node: "a"}, {Kind: api.FaultRestart, Node: "a"}} {
		_, err = d.Inject(f)
		require.NoError(t, err, "%+v", f)
	}
	p := d.Portals()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Target: p.Target, InitiatorName: "iqn.2026-11.org.example:r",
		ISID: [6]byte{0x80, 0, 0, 0, 0, 1}})
	require.NoError(t, err, "a0 serves after the restart")
	defer s.Close()
	require.Eventually(t, func() bool {
		up := false
		d.ctl.Do(func(c *ownership.Core) {
			for _, ps := range c.PathStates() {
				up = up || ps.Nexus.Port == p.RelativeID && ps.Up
			}
		})
		return up
	}, 5*time.Second, 10*time.Millisecond, "the core counts the path through a0 as up")
}

// wireDaemon starts a loopback array with its fabric, stopped at the end
// of the test.
func wireDaemon(t *testing.T) *Daemon {
	t.Helper()
	d, err := Start(config.Loopback(t.TempDir(), 1<<20), Options{Logger: quiet(), StatsInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	return d
}
