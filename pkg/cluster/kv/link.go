package kv

import (
	"context"
	"fmt"
	"sync"

	"github.com/aluad/aluad/pkg/clock"
)

// Link is one client's way to a Backend, which a test cuts (a member
// partitioned from etcd) and heals. Cut, a call either fails at once
// with ErrUnreachable, or (Block) waits as a real client's would: until
// its context ends (then it fails with the context's error and
// ErrUnreachable) or the link heals (then it goes through). A watch
// open across the cut ends with ErrUnreachable, or (Block) holds its
// events until the heal and then delivers them, in order, as a client
// whose stream reconnects does. A link made with LateWrites is a
// connection to a member that freezes (SIGSTOP): a transaction sent
// while it is blocked was sent, and is applied when the link heals
// whether or not its caller still waits (a member reads what waited in
// its socket once it thaws). What it does not model: a request that
// reached the store but whose answer was lost.
type Link struct {
	b   Backend
	clk clock.Clock

	mu     sync.Mutex
	cut    bool
	block  bool
	healed chan struct{} // closed at the heal (while cut)
	cutNow chan struct{} // closed at the cut (while healed)
	// LateWrites: a transaction sent while the link blocks is applied
	// at the heal, even if its caller gave it up (set before use).
	LateWrites bool
}

// NewLink is a healed link to b; clk times its keepalives.
func NewLink(b Backend, clk clock.Clock) *Link {
	if clk == nil {
		clk = clock.Real
	}
	return &Link{b: b, clk: clk, healed: make(chan struct{}), cutNow: make(chan struct{})}
}

// Cut partitions the client: calls fail at once, or with block wait for
// their context or the heal.
func (l *Link) Cut(block bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.block = block
	if l.cut {
		return
	}
	l.cut = true
	l.healed = make(chan struct{})
	close(l.cutNow)
}

// Heal ends the partition.
func (l *Link) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.cut {
		return
	}
	l.cut = false
	l.cutNow = make(chan struct{})
	close(l.healed)
}

// Dropped is the backend's: closed when it drops an etcd member (nil
// if it drops none), so a Store on the link ends its watches then.
func (l *Link) Dropped() <-chan struct{} {
	if d, ok := l.b.(interface{ Dropped() <-chan struct{} }); ok {
		return d.Dropped()
	}
	return nil
}

// IsCut reports whether the link is cut.
func (l *Link) IsCut() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut
}

func (l *Link) state() (cut, block bool, healed, cutNow <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cut, l.block, l.healed, l.cutNow
}

// gate lets a call through, or fails it as a cut link does.
func (l *Link) gate(ctx context.Context) error {
	cut, block, healed, _ := l.state()
	if !cut {
		return ctx.Err()
	}
	if !block {
		return ErrUnreachable
	}
	select {
	case <-healed:
		return ctx.Err()
	case <-ctx.Done():
		return fmt.Errorf("%w (%w)", ctx.Err(), ErrUnreachable)
	}
}

// Get implements Backend.
func (l *Link) Get(ctx context.Context, r Range) (RangeResult, error) {
	if err := l.gate(ctx); err != nil {
		return RangeResult{}, err
	}
	return l.b.Get(ctx, r)
}

// Txn implements Backend.
func (l *Link) Txn(ctx context.Context, t Txn) (TxnResult, error) {
	cut, block, healed, _ := l.state() // as it is sent
	if err := l.gate(ctx); err != nil {
		if l.LateWrites && cut && block {
			go func() { // sent: the member applies it once it thaws
				<-healed
				l.b.Txn(context.Background(), t)
			}()
		}
		return TxnResult{}, err
	}
	return l.b.Txn(ctx, t)
}

// Grant implements Backend.
func (l *Link) Grant(ctx context.Context, ttl int64) (Lease, error) {
	if err := l.gate(ctx); err != nil {
		return Lease{}, err
	}
	return l.b.Grant(ctx, ttl)
}

// KeepAliveOnce implements Backend.
func (l *Link) KeepAliveOnce(ctx context.Context, id LeaseID) (int64, error) {
	if err := l.gate(ctx); err != nil {
		return 0, err
	}
	return l.b.KeepAliveOnce(ctx, id)
}

// Revoke implements Backend.
func (l *Link) Revoke(ctx context.Context, id LeaseID) error {
	if err := l.gate(ctx); err != nil {
		return err
	}
	return l.b.Revoke(ctx, id)
}

// Compact implements Backend.
func (l *Link) Compact(ctx context.Context, rev int64) error {
	if err := l.gate(ctx); err != nil {
		return err
	}
	return l.b.Compact(ctx, rev)
}

// Watch implements Backend.
func (l *Link) Watch(ctx context.Context, req WatchRequest) <-chan WatchResponse {
	out := make(chan WatchResponse)
	wctx, cancel := context.WithCancel(ctx)
	var in <-chan WatchResponse
	if cut, _, _, _ := l.state(); !cut { // a watch made now starts now
		in = l.b.Watch(wctx, req)
	}
	go func() {
		defer close(out)
		defer cancel()
		send := func(wr WatchResponse) bool {
			select {
			case out <- wr:
				return true
			case <-ctx.Done():
				return false
			}
		}
		if in == nil {
			if err := l.gate(ctx); err != nil {
				if ctx.Err() == nil {
					send(WatchResponse{Err: err})
				}
				return
			}
			in = l.b.Watch(wctx, req)
		}
		for {
			cut, block, healed, cutNow := l.state()
			if cut {
				if !block {
					send(WatchResponse{Err: ErrUnreachable})
					return
				}
				select {
				case <-healed:
					continue
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-cutNow:
			case wr, ok := <-in:
				if !ok {
					return
				}
				if c, b, h, _ := l.state(); c { // cut while it was taken
					if !b {
						send(WatchResponse{Err: ErrUnreachable})
						return
					}
					select {
					case <-h:
					case <-ctx.Done():
						return
					}
				}
				if !send(wr) {
					return
				}
			}
		}
	}()
	return out
}
