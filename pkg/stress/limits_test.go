package stress

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/iscsi"
)

func limitsDaemon(t *testing.T, l iscsi.LimitsConfig) *daemon.Daemon {
	cfg := config.Loopback(t.TempDir(), 64<<20)
	cfg.Limits = l
	require.NoError(t, cfg.Validate())
	d, err := daemon.Start(cfg, daemon.Options{StatsInterval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { d.Stop(5 * time.Second) })
	return d
}

func dialIn(d *daemon.Daemon, port int, name string, isid byte) (*initiator.Session, error) {
	p := d.Portals()[port]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return initiator.Dial(ctx, initiator.Config{Addr: p.Addr, Target: p.Target, InitiatorName: name, ISID: [6]byte{0x80, 0, 0, 0, 0, isid}})
}

// TestSessionLimits: past the per-initiator and the total session limits
// a login gets 03/02 (out of resources); reinstating an existing session
// is not a new one; a closed session frees its place.
func TestSessionLimits(t *testing.T) {
	d := limitsDaemon(t, iscsi.LimitsConfig{MaxSessions: 3, MaxSessionsPerInitiator: 2})
	var le *initiator.LoginError
	a1, err := dialIn(d, 0, "iqn.2026-11.org.example:a", 1)
	require.NoError(t, err)
	_, err = dialIn(d, 1, "iqn.2026-11.org.example:a", 2)
	require.NoError(t, err)
	_, err = dialIn(d, 2, "iqn.2026-11.org.example:a", 3)
	require.True(t, errors.As(err, &le), "%v", err)
	require.Equal(t, [2]byte{3, 2}, [2]byte{le.Class, le.Detail}, "a third session for one initiator")
	again, err := dialIn(d, 0, "iqn.2026-11.org.example:a", 1)
	require.NoError(t, err, "the same ISID reinstates its session")
	_, err = dialIn(d, 0, "iqn.2026-11.org.example:b", 1)
	require.NoError(t, err)
	_, err = dialIn(d, 1, "iqn.2026-11.org.example:c", 1)
	require.True(t, errors.As(err, &le), "%v", err)
	require.Equal(t, [2]byte{3, 2}, [2]byte{le.Class, le.Detail}, "a fourth session in all")
	again.Close()
	a1.Close()
	require.Eventually(t, func() bool { return d.Target.SessionCount() == 2 }, 5*time.Second, 10*time.Millisecond)
	s, err := dialIn(d, 1, "iqn.2026-11.org.example:c", 1)
	require.NoError(t, err, "a freed place is taken")
	s.Close()
	require.EqualValues(t, 2, d.Target.LimitStats().SessionsRefused)
}

// TestSlowReaderDoesNotHoldOthers: a session that asks for data and never
// reads it is closed after the write timeout; meanwhile another session
// on the same port keeps being served.
func TestSlowReaderDoesNotHoldOthers(t *testing.T) {
	d := limitsDaemon(t, iscsi.LimitsConfig{WriteTimeout: 400 * time.Millisecond})
	p := d.Portals()[0]
	c, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	a := &attacker{id: 1}
	require.NotNil(t, a.login(c, &p, 1))
	var out []byte
	for i := 0; i < 100; i++ { // 100 x 1 MiB of READ data, never read
		out = append(out, a.scsiCmd(1+uint32(i), uint32(i), rw10(0x28, 0, 2048), 1<<20, false, false, nil)...)
	}
	_, err = c.Write(out)
	require.NoError(t, err)

	good, err := dialIn(d, 0, "iqn.2026-11.org.example:good", 1)
	require.NoError(t, err)
	defer good.Close()
	deadline := time.Now().Add(5 * time.Second)
	served := 0
	for time.Now().Before(deadline) && d.Target.LimitStats().WriteTimeouts == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := good.Execute(ctx, 0, rw10(0x28, 0, 8), nil, 4096)
		cancel()
		require.NoError(t, err, "the good session is served while the other stalls")
		served++
	}
	require.EqualValues(t, 1, d.Target.LimitStats().WriteTimeouts, "the stalled connection was closed")
	require.Positive(t, served)
}

// TestIdlePeerClosed: a peer that stops answering NOP-In pings is closed
// after twice the interval; one that answers stays; a connection that
// never finishes its login is closed at the login timeout.
func TestIdlePeerClosed(t *testing.T) {
	cfg := config.Loopback(t.TempDir(), 16<<20)
	cfg.Limits.LoginTimeout = 300 * time.Millisecond
	d, err := daemon.Start(cfg, daemon.Options{StatsInterval: -1, NopInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	defer d.Stop(5 * time.Second)
	p := d.Portals()[0]

	half, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer half.Close()
	half.Write(make([]byte, 20))

	dead, err := net.Dial("tcp", p.Addr)
	require.NoError(t, err)
	defer dead.Close()
	a := &attacker{id: 2}
	require.NotNil(t, a.login(dead, &p, 1)) // then never reads nor answers

	alive, err := dialIn(d, 0, "iqn.2026-11.org.example:alive", 1)
	require.NoError(t, err)
	defer alive.Close()

	require.Eventually(t, func() bool {
		l := d.Target.LimitStats()
		return l.IdleTimeouts == 1 && l.LoginTimeouts == 1
	}, 5*time.Second, 20*time.Millisecond, "%+v", d.Target.LimitStats())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = alive.Execute(ctx, 0, make([]byte, 6), nil, 0)
	require.NoError(t, err, "the session that answers its pings is still there")
	require.Eventually(t, func() bool { return d.Target.SessionCount() == 1 },
		5*time.Second, 10*time.Millisecond, "only the live session is left")
}

// TestColdResetStaysWithItsHost: TARGET COLD RESET from one initiator
// ends its own sessions, not another host's.
func TestColdResetStaysWithItsHost(t *testing.T) {
	d := limitsDaemon(t, iscsi.LimitsConfig{})
	a1, err := dialIn(d, 0, "iqn.2026-11.org.example:a", 1)
	require.NoError(t, err)
	a2, err := dialIn(d, 1, "iqn.2026-11.org.example:a", 2)
	require.NoError(t, err)
	b, err := dialIn(d, 2, "iqn.2026-11.org.example:b", 1)
	require.NoError(t, err)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 4; i++ { // b's power-on unit attention first
		if r, err := b.Execute(ctx, 0, make([]byte, 6), nil, 0); err == nil && r.Status == 0 {
			break
		}
	}
	resp, err := a1.TaskMgmt(ctx, 7, 0, 0)
	require.NoError(t, err)
	require.Equal(t, byte(0), resp, "function complete")
	<-a2.Done()
	r, err := b.Execute(ctx, 0, make([]byte, 6), nil, 0)
	require.NoError(t, err, "b's session survives a's cold reset")
	require.Equal(t, byte(2), r.Status)
	require.Equal(t, byte(0x29), r.Sense[12], "with the reset's unit attention")
	// The sessions' sockets close before the target drops them from its
	// table, so a2's Done can come first: wait for the count to settle.
	require.Eventually(t, func() bool { return d.Target.SessionCount() == 1 },
		5*time.Second, 10*time.Millisecond, "only b's session is left")
	a1.Close()
}
