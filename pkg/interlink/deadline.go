package interlink

import (
	"context"
	"fmt"
	"time"
)

// A forwarded command's deadline. The forwarder of a command whose
// outcome it does not know (no reply: the link closed, or it gave up
// waiting) must not answer the host before the owner can no longer
// apply it: a host that retries, then writes the block again, would
// otherwise see the first write land after the second. So each command
// has a lifetime, and the owner applies it only before a deadline that
// passes, in real time, no later than the lifetime after the forwarder
// sent it; the forwarder waits that long before it answers an unknown
// outcome.
//
// The two controllers' clocks are not synchronised (only their rates
// agree, closely), and the owner cannot anchor the deadline at the
// frame's arrival: a frame can arrive, or be read, long after it was sent
// (a slow or held link, an owner paused with the frame in its socket).
// Instead each side keeps a link clock (nanoseconds since its own epoch
// for the connection) and stamps its hellos and pings with it. A stamp P
// of the peer's that arrived when this side's clock read R was taken no
// later than R, so P + x on the peer's clock comes no later than R + x on
// this one's: the forwarder sends the deadline on the owner's clock, P +
// (sent + lifetime - R), shortened by one part in rateMargin for the
// difference of the clocks' rates over that span. The heartbeat keeps
// the anchor fresh (a ping each way every Heartbeat); a Forward on a link
// with no fresher one than its lifetime pings first.

// rateMargin: the deadline is shortened by 1/rateMargin of its span, more
// than two clocks' rates differ (crystals within 100 ppm, an NTP slew at
// most 500 ppm each way: 1% is far above both).
const rateMargin = 100

// anchor is the peer's latest stamp and this side's link clock when it
// arrived.
type anchor struct{ peer, local int64 }

// peerDeadline is the deadline, on the peer's link clock, of a command
// sent at this side's sent with the given lifetime.
func peerDeadline(a anchor, sent int64, lifetime time.Duration) int64 {
	x := sent + int64(lifetime) - a.local
	if x > 0 {
		x -= (x + rateMargin - 1) / rateMargin
	}
	return a.peer + x
}

// stamp is this side's link clock now.
func (c *Conn) stamp() int64 { return int64(c.o.Clock.Now().Sub(c.base)) }

// heard records a stamp of the peer's that arrived at local.
func (c *Conn) heard(peer, local int64) {
	c.amu.Lock()
	defer c.amu.Unlock()
	if local >= c.anchor.local {
		c.anchor = anchor{peer: peer, local: local}
	}
}

func (c *Conn) lastAnchor() anchor {
	c.amu.Lock()
	defer c.amu.Unlock()
	return c.anchor
}

// request is what Live knows of a forwarded command being served.
type request struct {
	c        *Conn
	deadline int64
}

type requestKey struct{}

// Live reports whether a forwarded command the handler serves with ctx may
// still take effect: nil while its connection is up and its deadline has
// not passed on this side's clock, an error wrapping ErrExpired after.
// The handler calls it where the command takes effect, under whatever
// orders it before the LUN's later commands, and refuses the command if
// it fails: a command admitted there precedes anything the host sends
// once its forwarder has answered, however long it is held afterwards.
// A context no connection gave is live while it has not ended.
func Live(ctx context.Context) error {
	r, ok := ctx.Value(requestKey{}).(request)
	if ok {
		select {
		case <-r.c.done:
			return fmt.Errorf("%w: its link ended (%v)", ErrExpired, r.c.Err())
		default:
		}
		if now := r.c.stamp(); now >= r.deadline {
			return fmt.Errorf("%w: its deadline passed %v ago", ErrExpired, time.Duration(now-r.deadline))
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrExpired, err)
	}
	return nil
}
