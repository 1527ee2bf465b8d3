package interlink

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPeerDeadline(t *testing.T) {
	const s = int64(time.Second)
	for _, tt := range []struct {
		name     string
		a        anchor
		sent     int64
		lifetime time.Duration
		want     int64
	}{
		{"fresh anchor", anchor{peer: 7 * s, local: 2 * s}, 2 * s, time.Second, 7*s + s - s/100},
		{"an anchor 3 s old", anchor{peer: 7 * s, local: 2 * s}, 5 * s, time.Second, 7*s + 4*s - 4*s/100},
		{"the peer's epoch later than ours", anchor{peer: 0, local: 9 * s}, 9*s + s/2, time.Second, s/2 + s - (s/2+s)/100},
		{"no lifetime", anchor{peer: 7 * s, local: 2 * s}, 2 * s, 0, 7 * s},
		{"an anchor newer than the send", anchor{peer: 7 * s, local: 3 * s}, 2 * s, time.Second / 2, 7*s - s/2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, peerDeadline(tt.a, tt.sent, tt.lifetime))
		})
	}
}

// Against a model of two free-running clocks: whatever their offsets,
// however long a stamp took to arrive and a command waited before it was
// sent, and with rates up to 0.5% apart each way, the deadline on the
// peer's clock comes, in real time, no later than the lifetime after the
// send on the sender's.
func TestPeerDeadlineAgainstTwoClocks(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		ratePeer, rateUs := 1+(r.Float64()-0.5)/100, 1+(r.Float64()-0.5)/100
		offPeer, offUs := r.Float64()*1e12, r.Float64()*1e12
		peerAt := func(t float64) float64 { return offPeer + ratePeer*t } // clock readings at real time t (ns)
		usAt := func(t float64) float64 { return offUs + rateUs*t }
		stamped := r.Float64() * 1e11
		arrived := stamped + r.Float64()*1e10
		sent := arrived + r.Float64()*5e9
		lifetime := time.Duration(r.Int64N(int64(5 * time.Second)))
		a := anchor{peer: int64(peerAt(stamped)), local: int64(usAt(arrived)) + 1}
		d := peerDeadline(a, int64(usAt(sent)), lifetime)
		deadlineAt := (float64(d) - offPeer) / ratePeer                // real time the peer's clock reads d
		expiresAt := (usAt(sent) + float64(lifetime) - offUs) / rateUs // real time ours reads sent + lifetime
		require.LessOrEqual(t, deadlineAt, expiresAt+1, "case %d", i)
	}
}

// keeper serves forwards as an owner does: held until released when hold
// is set, then applied only where Live holds (outcome says which).
type keeper struct {
	owner
	hold    bool
	arrived chan struct{}
	release chan struct{}
	outcome chan error
}

func (k *keeper) Forward(ctx context.Context, _ uint32, _ Forward) (ForwardReply, error) {
	if k.hold {
		k.arrived <- struct{}{}
		<-k.release
	}
	err := Live(ctx)
	k.outcome <- err
	return ForwardReply{}, err
}

// A forwarded command whose outcome the forwarder does not know (its
// link cut, the owner stalled past the forwarder's wait) can no longer be
// applied once the forwarder has waited until it expires; one that
// arrives after its lifetime is refused, however live the link; one
// served in time is applied.
func TestForwardDeadline(t *testing.T) {
	for _, tt := range []struct {
		name     string
		lifetime time.Duration
		hold     bool          // the owner holds the command until the forwarder has given up
		cut      bool          // the link is cut while it holds it
		wait     time.Duration // how long the forwarder waits for the reply (0: until the link ends)
		delay    time.Duration // what the forwarder sends is delayed this long
		want     error         // the forwarder's outcome
		refused  string        // why the owner refuses it ("": it applies it)
	}{
		{name: "served in time", lifetime: time.Second},
		{name: "link cut while held", lifetime: 10 * time.Second, hold: true, cut: true, want: ErrClosed,
			refused: "link ended"},
		{name: "owner stalled past the forwarder's wait", lifetime: time.Second, hold: true, wait: time.Second,
			want: context.DeadlineExceeded, refused: "deadline passed"},
		{name: "delivered after its lifetime", lifetime: time.Second, delay: 3 * time.Second / 2, want: ErrExpired,
			refused: "deadline passed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				k := &keeper{hold: tt.hold, arrived: make(chan struct{}, 1), release: make(chan struct{}),
					outcome: make(chan error, 1)}
				hb, timeout := 100*time.Millisecond, 2*time.Second
				if tt.delay > 0 {
					// No heartbeat: a ping waiting for the write lock behind the
					// delayed frame is not durably blocked (see
					// TestLiveDuringABigFrame), and the bubble's clock would stop.
					hb, timeout = 0, 0
				}
				a, b, fa, fb := pair(t, k, hb, timeout)
				defer a.Close()
				defer b.Close()
				fa.Delay(tt.delay)
				ctx := context.Background()
				if tt.wait > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.wait)
					defer cancel()
				}
				type result struct {
					expires time.Time
					err     error
				}
				done := make(chan result, 1)
				go func() {
					_, expires, err := a.Forward(ctx, 0, Forward{Token: 5, CDB: make([]byte, 16)}, tt.lifetime)
					done <- result{expires, err}
				}()
				if tt.hold {
					<-k.arrived
				}
				if tt.cut {
					require.NoError(t, fa.Cut(true))
					require.NoError(t, fb.Cut(true))
				}
				r := <-done
				if tt.want == nil {
					require.NoError(t, r.err)
				} else {
					require.ErrorIs(t, r.err, tt.want)
				}
				if !errors.Is(r.err, ErrExpired) && r.err != nil {
					time.Sleep(time.Until(r.expires)) // the forwarder's wait for an unknown outcome
				}
				if tt.hold {
					close(k.release)
				}
				err := <-k.outcome
				if tt.refused == "" {
					require.NoError(t, err, "applied")
					return
				}
				require.ErrorIs(t, err, ErrExpired, "the owner applies it after its forwarder answered")
				require.ErrorContains(t, err, tt.refused)
			})
		})
	}
}

// The heartbeat keeps each side's anchor fresh: a stamp of the peer's
// arrives every heartbeat.
func TestHeartbeatRefreshesTheAnchor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _, _ := pair(t, &owner{}, 100*time.Millisecond, time.Second)
		defer a.Close()
		defer b.Close()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for _, c := range []*Conn{a, b} {
			require.LessOrEqual(t, c.stamp()-c.lastAnchor().local, int64(100*time.Millisecond))
		}
	})
}
