package interlink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/memnet"
)

func TestFrameRoundTrip(t *testing.T) {
	f := Frame{Header: Header{Type: TMirror, Flags: 0, ID: 1 << 40, LUN: 7},
		Payload: Mirror{Token: 42, Inc: 3, Gen: 7, Offset: 4096, Data: []byte("page")}.Marshal()}
	b := AppendFrame(nil, f)
	got, err := ReadFrame(bytes.NewReader(b))
	require.NoError(t, err)
	require.Equal(t, f.Type, got.Type)
	require.Equal(t, f.ID, got.ID)
	require.Equal(t, f.LUN, got.LUN)
	var m Mirror
	require.NoError(t, m.Unmarshal(got.Payload))
	require.Equal(t, Mirror{Token: 42, Inc: 3, Gen: 7, Offset: 4096, Data: []byte("page")}, m)

	for _, tt := range []struct {
		name string
		edit func([]byte)
		want string
	}{
		{"magic", func(b []byte) { b[0] = 'X' }, "bad magic"},
		{"version", func(b []byte) { b[2] = 9 }, "version 9"},
		{"oversized", func(b []byte) { b[20], b[21], b[22], b[23] = 0xff, 0xff, 0xff, 0xff }, "at most"},
		{"reserved", func(b []byte) { b[6] = 1 }, "reserved bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := append([]byte(nil), b...)
			tt.edit(c)
			_, err := ReadFrame(bytes.NewReader(c))
			require.ErrorIs(t, err, ErrFrame)
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err = ReadFrame(bytes.NewReader(b[:len(b)-1]))
	require.Error(t, err, "a payload cut short")
}

func TestMessages(t *testing.T) {
	for _, m := range []interface{ Marshal() []byte }{
		Forward{Token: -1, Initiator: "iqn.x", InitiatorPort: "iqn.x,i,0x1", TargetPort: 3,
			CDB: make([]byte, 16), DataOut: []byte{1, 2}, DataInLen: 4096, Deadline: 1500 * int64(time.Millisecond)},
		Forward{CDB: make([]byte, 16), DataOut: []byte{}, Deadline: -3}, // a deadline before the receiver's epoch: passed
		Hello{Array: "arr", Node: "a", Stamp: 12345},
		Ping{Stamp: math.MaxInt64},
		Ping{Stamp: -1},
		Ack{Code: Expired, Msg: "deadline"},
	} {
		into := map[string]interface{ Unmarshal([]byte) error }{"Forward": &Forward{}, "Hello": &Hello{},
			"Ping": &Ping{}, "Ack": &Ack{}}[fmt.Sprintf("%T", m)[len("interlink."):]]
		require.NoError(t, into.Unmarshal(m.Marshal()), "%+v", m)
		require.Equal(t, m, reflect.ValueOf(into).Elem().Interface(), "round trip")
	}
	for _, tt := range []struct {
		name string
		b    []byte
		into interface{ Unmarshal([]byte) error }
		want string
	}{
		{"short CDB", Forward{CDB: []byte{1}}.Marshal(), &Forward{}, "1-byte CDB"},
		{"trailing bytes", append(Flush{Token: 1}.Marshal(), 0), &Flush{}, "after the last field"},
		{"field past the end", []byte{0x10, 'a'}, &Hello{}, "16-byte field"},
		{"bad varint", []byte{0xff}, &Flush{}, "bad varint"},
		{"overlong varint", []byte{0x80, 0x00}, &Flush{}, "shortest form"},
		{"negative offset", Mirror{Offset: -1}.Marshal(), &Mirror{}, "negative offset"},
		{"negative range", Drop{Length: -1}.Marshal(), &Drop{}, "negative range"},
		{"ack code", []byte{9, 0}, &Ack{}, "ack code 9"},
		{"missing status", nil, &ForwardReply{}, "missing byte"},
		{"forward without a deadline", Forward{CDB: make([]byte, 16)}.Marshal()[:21], &Forward{}, "bad varint"},
		{"hello without a stamp", enc(nil).s("arr").s("a"), &Hello{}, "bad varint"},
		{"empty ping", nil, &Ping{}, "bad varint"},
		{"ping with trailing bytes", append(Ping{Stamp: 1}.Marshal(), 0), &Ping{}, "after the last field"},
		{"ack code past expired", []byte{5, 0}, &Ack{}, "ack code 5"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.into.Unmarshal(tt.b)
			require.ErrorIs(t, err, ErrFrame)
			require.ErrorContains(t, err, tt.want)
		})
	}
	require.ErrorIs(t, Ack{Code: Fenced, Msg: "LUN 3"}.Err(), ErrFenced)
	require.ErrorIs(t, Ack{Code: NotOwner}.Err(), ErrNotOwner)
	require.ErrorIs(t, Ack{Code: Failed, Msg: "disk"}.Err(), ErrFailed)
	require.ErrorIs(t, Ack{Code: Expired, Msg: "deadline"}.Err(), ErrExpired)
	require.ErrorIs(t, ackOf(fmt.Errorf("held: %w", ErrExpired)).Err(), ErrExpired, "an expiry reaches the forwarder as one")
	require.NoError(t, Ack{}.Err())
}

// A decoder never panics, and what it accepts encodes back to itself.
func FuzzMessages(f *testing.F) {
	f.Add(byte(0), Forward{Token: 3, CDB: make([]byte, 10), DataOut: []byte("x")}.Marshal())
	f.Add(byte(1), Mirror{Token: 1, Offset: 512, Data: []byte("data")}.Marshal())
	f.Add(byte(2), Ack{Code: Failed, Msg: "m"}.Marshal())
	f.Add(byte(3), ForwardReply{Status: 2, Sense: []byte{0x70}}.Marshal())
	f.Add(byte(4), AppendFrame(nil, Frame{Header: Header{Type: TPing, ID: 9}}))
	f.Add(byte(8), Report{Node: "a", Inc: 7, Seq: 3, Snapshot: true, Obs: []Obs{{Kind: ObsIO, Host: "h", LUN: 3, Ops: 10, Time: 12.5,
		Interval: 1e9}}}.Marshal())
	f.Add(byte(9), Move{LUNs: []uint64{1, 2}, To: "b", Cause: "manual"}.Marshal())
	f.Add(byte(0), Forward{Token: 3, CDB: make([]byte, 16), DataInLen: 512, Deadline: -1 << 40}.Marshal())
	f.Add(byte(5), Hello{Array: "arr", Node: "b", Stamp: 1 << 50}.Marshal())
	f.Add(byte(10), Ping{Stamp: 987654321}.Marshal())
	f.Add(byte(2), Ack{Code: Expired, Msg: "deadline"}.Marshal())
	f.Fuzz(func(t *testing.T, kind byte, b []byte) {
		switch kind % 11 {
		case 0:
			var m Forward
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 1:
			var m Mirror
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 2:
			var m Ack
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 3:
			var m ForwardReply
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 4:
			if fr, err := ReadFrame(bytes.NewReader(b)); err == nil {
				require.Equal(t, b[:HeaderLen+len(fr.Payload)], AppendFrame(nil, fr))
			}
		case 5:
			var m Hello
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 6:
			var m Drop
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 7:
			var m Flush
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 8:
			var m Report
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 9:
			var m Move
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		case 10:
			var m Ping
			if m.Unmarshal(b) == nil {
				require.Equal(t, b, m.Marshal())
			}
		}
	})
}

// owner is a Handler that serves LUN 0 with token 5 and holds LUN 1's
// forwards until released.
type owner struct {
	mu      sync.Mutex
	mirror  map[int64][]byte
	release chan struct{}
	reports []Report
}

func (o *owner) Forward(ctx context.Context, lun uint32, m Forward) (ForwardReply, error) {
	if lun == 1 {
		select {
		case <-o.release:
		case <-ctx.Done():
			return ForwardReply{}, ctx.Err()
		}
	}
	if m.Token != 5 {
		return ForwardReply{}, fmt.Errorf("%w: LUN %d at 5, not %d", ErrFenced, lun, m.Token)
	}
	return ForwardReply{Status: 0, DataIn: bytes.Repeat([]byte{byte(lun)}, int(m.DataInLen))}, nil
}

func (o *owner) Mirror(_ context.Context, lun uint32, m Mirror) error {
	if lun > 1 {
		return fmt.Errorf("%w: LUN %d", ErrNotOwner, lun)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mirror[m.Offset] = m.Data
	return nil
}

func (o *owner) Drop(context.Context, uint32, Drop) error { return errors.New("no such range") }

func (o *owner) Flush(context.Context, uint32, Flush) error { return nil }

func (o *owner) Report(_ context.Context, m Report) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reports = append(o.reports, m)
	return nil
}

func (o *owner) Move(_ context.Context, m Move) error {
	if m.To != "b" {
		return fmt.Errorf("no node %q", m.To)
	}
	return nil
}

// pair connects a and b over an in-memory network, each end wrapped so
// the test can cut it.
func pair(t *testing.T, h Handler, hb, timeout time.Duration) (a, b *Conn, fa, fb *Faulty) {
	t.Helper()
	nw := memnet.New()
	l, err := nw.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan *Conn, 1)
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		fb = NewFaulty(nc, nil)
		c, err := establish(context.Background(), fb, Options{Self: Hello{Array: "arr", Node: "b"}, Handler: h,
			Heartbeat: hb, Timeout: timeout})
		if err == nil {
			accepted <- c
		}
	}()
	a, err = Dial(context.Background(), l.Addr().String(), Options{Self: Hello{Array: "arr", Node: "a"},
		Heartbeat: hb, Timeout: timeout}, func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := nw.Dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		fa = NewFaulty(nc, nil)
		return fa, nil
	})
	require.NoError(t, err)
	b = <-accepted
	return a, b, fa, fb
}

// Requests are matched to replies by id: a held forward does not hold
// the others; failures come back with their code.
func TestConnRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &owner{mirror: map[int64][]byte{}, release: make(chan struct{})}
		a, b, _, _ := pair(t, o, 0, 0)
		defer a.Close()
		defer b.Close()
		require.Equal(t, "b", a.Peer().Node)
		require.Equal(t, "a", b.Peer().Node)

		held := make(chan error, 1)
		go func() {
			r, _, err := a.Forward(context.Background(), 1, Forward{Token: 5, CDB: make([]byte, 10), DataInLen: 2}, time.Second)
			if err == nil && !bytes.Equal(r.DataIn, []byte{1, 1}) {
				err = fmt.Errorf("data %v", r.DataIn)
			}
			held <- err
		}()
		r, _, err := a.Forward(context.Background(), 0, Forward{Token: 5, CDB: make([]byte, 10), DataInLen: 3}, time.Second)
		require.NoError(t, err, "not held behind LUN 1")
		require.Equal(t, []byte{0, 0, 0}, r.DataIn)
		_, _, err = a.Forward(context.Background(), 0, Forward{Token: 4, CDB: make([]byte, 10)}, time.Second)
		require.ErrorIs(t, err, ErrFenced)
		require.ErrorContains(t, err, "at 5, not 4")
		close(o.release)
		require.NoError(t, <-held)

		require.NoError(t, a.Mirror(context.Background(), 0, Mirror{Token: 5, Offset: 8192, Data: []byte("copy")}))
		require.Equal(t, []byte("copy"), o.mirror[8192], "held by the partner when Mirror returns")
		require.ErrorIs(t, a.Mirror(context.Background(), 2, Mirror{}), ErrNotOwner)
		require.ErrorIs(t, a.Drop(context.Background(), 0, Drop{}), ErrFailed)
		require.NoError(t, a.Flush(context.Background(), 0, Flush{Token: 5}))
		// b has no handler of a's requests... a has none: b's requests to a are refused.
		require.ErrorIs(t, b.Flush(context.Background(), 0, Flush{}), ErrNotOwner)
		rtt, err := a.Ping(context.Background())
		require.NoError(t, err)
		require.Zero(t, rtt, "in a bubble a round trip takes no time")

		require.NoError(t, a.Close())
		<-b.Done()
		_, _, err = a.Forward(context.Background(), 0, Forward{Token: 5, CDB: make([]byte, 10)}, time.Second)
		require.ErrorIs(t, err, ErrClosed)
	})
}

// A cut shorter than the timeout loses nothing: what was sent goes
// through when the link returns. A longer one ends the connection at the
// timeout (ErrSilent), and the requests in flight fail.
func TestConnCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &owner{mirror: map[int64][]byte{}, release: make(chan struct{})}
		a, b, fa, fb := pair(t, o, 100*time.Millisecond, time.Second)
		defer a.Close()
		defer b.Close()
		fa.Cut(true)
		fb.Cut(true)
		done := make(chan error, 1)
		go func() { done <- a.Mirror(context.Background(), 0, Mirror{Token: 5, Offset: 0, Data: []byte("x")}) }()
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("a mirror write went through a cut link: %v", err)
		default:
		}
		require.NoError(t, fa.Cut(false))
		require.NoError(t, fb.Cut(false))
		require.NoError(t, <-done, "delivered after the repair")

		start := time.Now()
		fa.Cut(true)
		fb.Cut(true)
		go func() { done <- a.Mirror(context.Background(), 0, Mirror{Token: 5, Offset: 512, Data: []byte("y")}) }()
		<-a.Done()
		<-b.Done()
		// Both time out at the same tick; the first to close may reach the
		// other before its own heartbeat does (memnet delivers a close even
		// through a cut, where TCP would lose the FIN).
		require.True(t, errors.Is(a.Err(), ErrSilent) || errors.Is(b.Err(), ErrSilent), "a: %v, b: %v", a.Err(), b.Err())
		took := time.Since(start)
		require.GreaterOrEqual(t, took, time.Second)
		require.LessOrEqual(t, took, 1100*time.Millisecond, "found at the first heartbeat past the timeout")
		require.ErrorIs(t, <-done, ErrClosed)
	})
}

// A peer of another array is refused at the hello.
func TestHelloOtherArray(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := memnet.New()
		l, err := nw.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		go func() {
			c, err := Accept(context.Background(), l, Options{Self: Hello{Array: "other", Node: "b"}})
			if err == nil {
				c.Close()
			}
		}()
		_, err = Dial(context.Background(), l.Addr().String(), Options{Self: Hello{Array: "arr", Node: "a"}}, nw.Dial)
		require.ErrorContains(t, err, `serves array "other", not "arr"`)
		synctest.Wait()
	})
}

// slowConn writes at rate bytes a second, in 64 KiB pieces: a slow link.
type slowConn struct {
	net.Conn
	rate int
}

func (s slowConn) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		k := min(len(b), 64<<10)
		time.Sleep(time.Duration(k) * time.Second / time.Duration(s.rate))
		w, err := s.Conn.Write(b[:k])
		n += w
		if err != nil {
			return n, err
		}
		b = b[k:]
	}
	return n, nil
}

// A peer busy sending one large copy over a slow link is alive: every
// byte that arrives counts, not only whole frames. (Real time: a write
// waiting on the connection's write lock is not durably blocked, so this
// cannot run in a synctest bubble.)
func TestLiveDuringABigFrame(t *testing.T) {
	nw := memnet.New()
	l, err := nw.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	o := &owner{mirror: map[int64][]byte{}, release: make(chan struct{})}
	accepted := make(chan *Conn, 1)
	opt := func(node string, h Handler) Options {
		return Options{Self: Hello{Array: "arr", Node: node}, Handler: h, Heartbeat: 50 * time.Millisecond, Timeout: time.Second}
	}
	go func() {
		nc, _ := l.Accept()
		c, err := establish(context.Background(), slowConn{nc, 2 << 20}, opt("b", o))
		if err == nil {
			accepted <- c
		}
	}()
	a, err := Dial(context.Background(), l.Addr().String(), opt("a", nil),
		func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := nw.Dial(ctx, network, addr)
			return slowConn{nc, 2 << 20}, err // 2 MiB/s
		})
	require.NoError(t, err)
	b := <-accepted
	defer a.Close()
	defer b.Close()
	// 4 MiB at 2 MiB/s: two seconds on the wire, twice the timeout; only a
	// stall of a whole second between two 64 KiB pieces could fail it.
	require.NoError(t, a.Mirror(context.Background(), 0, Mirror{Token: 5, Data: make([]byte, 4<<20)}), "b: %v", b.Err())
	require.Len(t, o.mirror[0], 4<<20)
}

// orderRec records the mirror copies in the order it applies them; the
// first one is slow.
type orderRec struct {
	owner
	mu  sync.Mutex
	seq []uint64
}

func (o *orderRec) Mirror(_ context.Context, _ uint32, m Mirror) error {
	if m.Ver == 1 {
		time.Sleep(time.Millisecond)
	}
	o.mu.Lock()
	o.seq = append(o.seq, m.Ver)
	o.mu.Unlock()
	return nil
}

func (o *orderRec) Drop(_ context.Context, _ uint32, m Drop) error {
	o.mu.Lock()
	o.seq = append(o.seq, 100+m.Ver)
	o.mu.Unlock()
	return nil
}

// Copies and releases of one LUN are applied in the order they were
// sent, even when the first one is slow; another LUN's are not held.
func TestMirrorOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &orderRec{}
		a, b, _, _ := pair(t, o, 0, 0)
		defer a.Close()
		defer b.Close()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); a.Mirror(context.Background(), 0, Mirror{Token: 5, Ver: 1, Data: []byte{1}}) }()
		synctest.Wait() // copy 1 is on the wire first
		wg.Add(1)
		go func() { defer wg.Done(); a.Drop(context.Background(), 0, Drop{Token: 5, Ver: 1}) }()
		synctest.Wait()
		require.NoError(t, a.Mirror(context.Background(), 0, Mirror{Token: 5, Ver: 2, Data: []byte{2}}))
		wg.Wait()
		require.Equal(t, []uint64{1, 101, 2}, o.seq, "applied in the order sent")
	})
}

// bigReader answers a forward with more data than a reply can carry, and
// panics on a flush.
type bigReader struct{ owner }

func (*bigReader) Forward(context.Context, uint32, Forward) (ForwardReply, error) {
	return ForwardReply{DataIn: make([]byte, MaxPayload)}, nil
}

func (*bigReader) Flush(context.Context, uint32, Flush) error { panic("disk on fire") }

// What cannot be carried, a handler's panic and a request type the peer
// does not know fail that request, not the connection.
func TestRequestFailuresKeepTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _, _ := pair(t, &bigReader{}, 0, 0)
		defer a.Close()
		defer b.Close()
		_, _, err := a.Forward(context.Background(), 0, Forward{Token: 5, CDB: make([]byte, 16), DataInLen: MaxData + 1}, time.Second)
		require.ErrorIs(t, err, ErrFailed)
		require.ErrorContains(t, err, "larger commands are split")
		_, _, err = a.Forward(context.Background(), 0, Forward{Token: 5, CDB: make([]byte, 16), DataInLen: 512}, time.Second)
		require.ErrorIs(t, err, ErrFailed)
		require.ErrorContains(t, err, "reply (at most")
		err = a.Flush(context.Background(), 0, Flush{Token: 5})
		require.ErrorIs(t, err, ErrFailed)
		require.ErrorContains(t, err, "panicked: disk on fire")
		f, err := a.call(context.Background(), Type(9), 0, nil)
		require.NoError(t, err)
		require.ErrorContains(t, ack(f), "does not serve type-9 requests")
		_, err = a.Ping(context.Background())
		require.NoError(t, err, "the connection goes on")
	})
}

// stuck never answers a flush, whatever its context says.
type stuck struct{ owner }

func (*stuck) Flush(context.Context, uint32, Flush) error { select {} }

// Close does not wait for a handler that ignores its context.
func TestCloseDoesNotWaitForHandlers(t *testing.T) {
	a, b, _, _ := pair(t, &stuck{}, 0, 0)
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, a.Flush(ctx, 0, Flush{}), context.DeadlineExceeded)
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for a handler that ignores its context")
	}
}

// Posted copies and releases reach the peer in the order they were
// posted, whatever the waiting; Drain returns once each is answered, and
// a cut connection fails what it had not delivered.
func TestPostedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &orderRec{}
		a, b, fa, _ := pair(t, o, 0, 0)
		defer b.Close()
		var ps []*Pending
		for v := uint64(1); v <= 20; v++ {
			ps = append(ps, a.PostMirror(0, Mirror{Token: 5, Ver: v, Data: []byte{byte(v)}}))
			if v%4 == 0 {
				ps = append(ps, a.PostDrop(0, Drop{Token: 5, Ver: v}))
			}
		}
		require.NoError(t, a.Drain(context.Background()))
		for _, p := range ps {
			select {
			case <-p.Done():
			default:
				t.Fatal("Drain returned before a posted request was answered")
			}
		}
		var want []uint64
		for v := uint64(1); v <= 20; v++ {
			want = append(want, v)
			if v%4 == 0 {
				want = append(want, 100+v)
			}
		}
		require.Equal(t, want, o.seq, "applied in the order posted")

		require.NoError(t, fa.Cut(true))
		p := a.PostMirror(0, Mirror{Token: 5, Ver: 21, Data: []byte{21}})
		a.Close()
		require.ErrorIs(t, p.Wait(context.Background()), ErrClosed)
		require.ErrorIs(t, a.PostMirror(0, Mirror{Token: 5, Ver: 22}).Wait(context.Background()), ErrClosed)
	})
}

// Reports reach the peer in the order posted, whole; a move is answered
// with the handler's outcome; a malformed one is refused, not served.
func TestReportsAndMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &owner{mirror: map[int64][]byte{}, release: make(chan struct{})}
		a, b, _, _ := pair(t, o, 0, 0)
		defer a.Close()
		defer b.Close()
		var sent []Report
		var last *Pending
		for i := range 30 {
			r := Report{Node: "a", Inc: 12, Seq: uint64(i + 1), Snapshot: i == 0, Obs: []Obs{
				{Kind: ObsLogin, Host: "h", Initiator: "iqn.x", ISID: "23d000000001", Port: 3},
				{Kind: ObsIO, Host: "h", LUN: uint64(i), Ops: float64(i), Media: 1, Bytes: 4096, Time: 0.5, Interval: 1e9}}}
			sent = append(sent, r)
			last = a.PostReport(r)
		}
		require.NoError(t, a.Drain(context.Background()), "Drain does not wait for reports")
		require.NoError(t, last.Wait(context.Background()))
		o.mu.Lock()
		require.Equal(t, sent, o.reports)
		o.mu.Unlock()

		require.NoError(t, a.Move(context.Background(), Move{LUNs: []uint64{1}, To: "b", Cause: "manual"}))
		err := a.Move(context.Background(), Move{LUNs: []uint64{1}, To: "c", Cause: "manual"})
		require.ErrorIs(t, err, ErrFailed)
		require.ErrorContains(t, err, `no node "c"`)
		f, err := a.call(context.Background(), TMove, ControlLane, Move{To: "b"}.Marshal())
		require.NoError(t, err)
		require.ErrorContains(t, ack(f), "a move of no LUN")
	})
}

func TestReportDecoding(t *testing.T) {
	ok := Report{Node: "a", Obs: []Obs{{Kind: ObsPath, Ops: 2, Time: 3}}}.Marshal()
	var r Report
	require.NoError(t, r.Unmarshal(ok))
	for name, b := range map[string][]byte{
		"no node":   Report{Obs: []Obs{{Kind: ObsLogin}}}.Marshal(),
		"bad kind":  Report{Node: "a", Obs: []Obs{{Kind: 9}}}.Marshal(),
		"negative":  Report{Node: "a", Obs: []Obs{{Kind: ObsIO, Ops: -1}}}.Marshal(),
		"NaN":       Report{Node: "a", Obs: []Obs{{Kind: ObsIO, Time: math.NaN()}}}.Marshal(),
		"truncated": ok[:len(ok)-1],
		"count":     append(enc(nil).s("a").i(0).u(0).bo(false).u(1000), ok[6:]...),
	} {
		require.ErrorIs(t, r.Unmarshal(b), ErrFrame, name)
	}
}

// A write waiting out an interlink delay ends when the link is closed (a
// controller stopping under a one-minute delay does not wait a minute).
func TestDelayEndsAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer b.Close()
		f := NewFaulty(a, nil)
		f.Delay(time.Minute)
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := f.Write([]byte("x")); done <- err }()
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, f.Close())
		require.ErrorIs(t, <-done, net.ErrClosed)
		require.Less(t, time.Since(start), time.Minute, "the write waited out the delay after the close")
	})
}
