package kv

import (
	"context"
	"errors"
	"time"

	"github.com/aluad/aluad/pkg/clock"
)

// KeepAliveLoop keeps lease id alive through b as etcd's client does
// (its KeepAlive, which concurrency.Session runs): a renewal at once and
// then a third of the TTL after each answer, each tried while none is
// in flight; it ends (the channel closes) when the lease is gone, when
// ctx ends, or when no renewal was answered before the deadline (5s
// before the first answer, etcd's client's default with no dial
// timeout: with one it is that plus 1s; the TTL after each answer). It
// checks on a ticker of clk every 250ms (etcd's every 500ms of the
// wall clock).
func KeepAliveLoop(ctx context.Context, b Backend, clk clock.Clock, id LeaseID) <-chan struct{} {
	const (
		check        = 250 * time.Millisecond
		firstTimeout = 5 * time.Second
	)
	done := make(chan struct{})
	type answer struct {
		ttl int64
		err error
	}
	answers := make(chan answer, 1)
	renew := func() {
		go func() {
			ttl, err := b.KeepAliveOnce(ctx, id)
			answers <- answer{ttl, err}
		}()
	}
	t := clk.NewTicker(check)
	deadline := clk.Now().Add(firstTimeout)
	var next time.Time
	inFlight := true
	renew()
	go func() {
		defer close(done)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case a := <-answers:
				inFlight = false
				switch {
				case errors.Is(a.err, ErrLeaseNotFound) || (a.err == nil && a.ttl <= 0):
					return
				case a.err == nil:
					now := clk.Now()
					deadline = now.Add(time.Duration(a.ttl) * time.Second)
					next = now.Add(time.Duration(a.ttl) * time.Second / 3)
				}
			case now := <-t.C():
				if now.After(deadline) {
					return
				}
				if !inFlight && !now.Before(next) {
					inFlight = true
					renew()
				}
			}
		}
	}()
	return done
}
