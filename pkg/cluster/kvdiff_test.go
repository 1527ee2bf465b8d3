package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/cluster/kv"
)

// diffSide is one backend under the differential test, with its leases
// by the index the sequence names them with, and its first revision.
type diffSide struct {
	b      kv.Backend
	base   int64
	leases []kv.LeaseID
}

// norm prints kvs with revisions relative to the side's start and
// leases by index, so the two sides compare.
func (d *diffSide) norm(kvs []kv.KV) string {
	var out []string
	for _, k := range kvs {
		lease := -1
		for i, id := range d.leases {
			if id == k.Lease && id != kv.NoLease {
				lease = i
			}
		}
		out = append(out, fmt.Sprintf("%s=%s c%d m%d v%d l%d", k.Key, k.Value, k.CreateRev-d.base, k.ModRev-d.base,
			k.Version, lease))
	}
	return strings.Join(out, ", ")
}

// diffErr names the kv error an operation failed with.
func diffErr(err error) string {
	for _, e := range []error{kv.ErrLeaseNotFound, kv.ErrCompacted, kv.ErrFutureRev, kv.ErrDuplicateKey} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "ok"
}

// diffStep is one random operation, in terms both sides can run: keys,
// values, lease indexes and revisions relative to the start.
type diffStep struct {
	kind  string // txn, get, grant, revoke, keepalive, compact
	txn   func(d *diffSide) kv.Txn
	rng   func(d *diffSide) kv.Range
	lease int
	desc  string
}

func genDiffStep(r *rand.Rand, nLeases int, rev int64) diffStep {
	keys := []string{"d/a", "d/b", "d/c", "d/a/x"}
	key := func() string { return keys[r.IntN(len(keys))] }
	relRev := func() int64 { return r.Int64N(rev + 2) } // up to one past the current
	lease := func() int {
		if nLeases == 0 || r.IntN(2) == 0 {
			return -1
		}
		return r.IntN(nLeases)
	}
	leaseID := func(d *diffSide, i int) kv.LeaseID {
		if i < 0 {
			return kv.NoLease
		}
		return d.leases[i]
	}
	type mkOp func(d *diffSide) kv.Op
	op := func() (mkOp, string) {
		k, v, l := key(), fmt.Sprint(r.IntN(3)), lease()
		switch r.IntN(5) {
		case 0, 1:
			return func(d *diffSide) kv.Op { return kv.Put(k, v, leaseID(d, l)) }, fmt.Sprintf("put %s=%s l%d", k, v, l)
		case 2:
			return func(*diffSide) kv.Op { return kv.Delete(k) }, "del " + k
		case 3:
			return func(*diffSide) kv.Op { return kv.DeletePrefix(k) }, "delprefix " + k
		}
		return func(*diffSide) kv.Op { return kv.GetRange(kv.Range{Key: "d/", Prefix: true}) }, "get d/"
	}
	cmp := func() (func(d *diffSide) kv.Cmp, string) {
		k, o := key(), []string{"=", "!=", "<", ">"}[r.IntN(4)]
		switch r.IntN(5) {
		case 0:
			v := fmt.Sprint(r.IntN(3))
			return func(*diffSide) kv.Cmp { return kv.ValueIs(k, o, v) }, fmt.Sprintf("value(%s)%s%s", k, o, v)
		case 1:
			n := relRev()
			return func(d *diffSide) kv.Cmp { return kv.CreateRev(k, o, d.rel(n)) }, fmt.Sprintf("create(%s)%s%d", k, o, n)
		case 2:
			n := relRev()
			return func(d *diffSide) kv.Cmp { return kv.ModRev(k, o, d.rel(n)) }, fmt.Sprintf("mod(%s)%s%d", k, o, n)
		case 3:
			n := r.Int64N(4)
			return func(*diffSide) kv.Cmp { return kv.Version(k, o, n) }, fmt.Sprintf("version(%s)%s%d", k, o, n)
		}
		l := lease()
		return func(d *diffSide) kv.Cmp { return kv.LeaseIs(k, o, leaseID(d, l)) }, fmt.Sprintf("lease(%s)%sl%d", k, o, l)
	}
	switch n := r.IntN(10); {
	case n < 6:
		var cmps []func(*diffSide) kv.Cmp
		var then, els []mkOp
		var desc []string
		for range r.IntN(3) {
			c, s := cmp()
			cmps, desc = append(cmps, c), append(desc, s)
		}
		desc = append(desc, "then")
		for range 1 + r.IntN(3) {
			o, s := op()
			then, desc = append(then, o), append(desc, s)
		}
		desc = append(desc, "else")
		for range r.IntN(3) {
			o, s := op()
			els, desc = append(els, o), append(desc, s)
		}
		return diffStep{kind: "txn", desc: strings.Join(desc, " "), txn: func(d *diffSide) kv.Txn {
			var t kv.Txn
			for _, c := range cmps {
				t.If = append(t.If, c(d))
			}
			for _, o := range then {
				t.Then = append(t.Then, o(d))
			}
			for _, o := range els {
				t.Else = append(t.Else, o(d))
			}
			return t
		}}
	case n < 8:
		k, at, prefix := key(), relRev(), r.IntN(2) == 0
		srt := kv.Sort(r.IntN(3))
		maxc := int64(0)
		if r.IntN(3) == 0 {
			maxc = relRev()
		}
		count := r.IntN(4) == 0
		return diffStep{kind: "get", desc: fmt.Sprintf("get %s prefix=%v at %d sort %d maxcreate %d count %v", k, prefix, at, srt, maxc, count),
			rng: func(d *diffSide) kv.Range {
				rr := kv.Range{Key: k, Prefix: prefix, Sort: srt, CountOnly: count}
				if at > 0 {
					rr.Rev = d.rel(at)
				}
				if maxc > 0 {
					rr.MaxCreateRev = d.rel(maxc)
				}
				return rr
			}}
	case n < 9:
		if r.IntN(4) == 0 {
			at := relRev()
			return diffStep{kind: "compact", lease: int(at), desc: fmt.Sprintf("compact %d", at)}
		}
		return diffStep{kind: "grant", desc: "grant"}
	}
	if nLeases == 0 {
		return diffStep{kind: "grant", desc: "grant"}
	}
	l := r.IntN(nLeases)
	if r.IntN(2) == 0 {
		return diffStep{kind: "keepalive", lease: l, desc: fmt.Sprintf("keepalive l%d", l)}
	}
	return diffStep{kind: "revoke", lease: l, desc: fmt.Sprintf("revoke l%d", l)}
}

func (d *diffSide) rel(n int64) int64 { return d.base + n }

// run does the step and prints what it returned, relative to the side.
func (d *diffSide) run(ctx context.Context, s diffStep) string {
	switch s.kind {
	case "txn":
		r, err := d.b.Txn(ctx, s.txn(d))
		if err != nil {
			return diffErr(err)
		}
		out := fmt.Sprintf("rev %d ok=%v", r.Rev-d.base, r.Succeeded)
		for _, res := range r.Results {
			out += fmt.Sprintf(" [%s n%d d%d]", d.norm(res.KVs), res.Count, res.Deleted)
		}
		return out
	case "get":
		r, err := d.b.Get(ctx, s.rng(d))
		if err != nil {
			return diffErr(err)
		}
		return fmt.Sprintf("rev %d [%s] n%d", r.Rev-d.base, d.norm(r.KVs), r.Count)
	case "grant":
		l, err := d.b.Grant(ctx, 600)
		if err != nil {
			return diffErr(err)
		}
		d.leases = append(d.leases, l.ID)
		return fmt.Sprintf("lease l%d ttl %d", len(d.leases)-1, l.TTL)
	case "keepalive":
		ttl, err := d.b.KeepAliveOnce(ctx, d.leases[s.lease])
		if err != nil {
			return diffErr(err)
		}
		return fmt.Sprintf("ttl %d", ttl)
	case "revoke":
		return diffErr(d.b.Revoke(ctx, d.leases[s.lease]))
	case "compact": // lease holds the revision
		return diffErr(d.b.Compact(ctx, d.rel(int64(s.lease))))
	}
	panic(s.kind)
}

// The same random sequence of transactions, reads (at revisions too),
// lease grants, renewals and revocations, compactions on an embedded etcd and on the
// in-memory store answers the same, revision for revision, and a watch
// of the keys from the start sees the same events on both.
func TestKVDifferential(t *testing.T) {
	_, cli := etcdCluster(t, 1)
	mem := kv.NewMem(nil, -1)
	defer mem.Close()
	ctx := ctxT(t)
	var sides []*diffSide
	for _, b := range []kv.Backend{EtcdBackend(cli), mem} {
		r, err := b.Get(ctx, kv.Range{Key: "d/"})
		require.NoError(t, err)
		sides = append(sides, &diffSide{b: b, base: r.Rev})
	}
	var watches []<-chan kv.WatchResponse
	for _, d := range sides {
		watches = append(watches, d.b.Watch(ctx, kv.WatchRequest{Key: "d/", Prefix: true, FromRev: d.base + 1, PrevKV: true}))
	}
	for _, seed := range []uint64{1, 2, 3} {
		r := rand.New(rand.NewPCG(seed, 42))
		var rev int64
		for i := range 150 {
			s := genDiffStep(r, len(sides[0].leases), rev)
			got := []string{sides[0].run(ctx, s), sides[1].run(ctx, s)}
			require.Equal(t, got[0], got[1], "seed %d step %d: %s", seed, i, s.desc)
			g, err := sides[0].b.Get(ctx, kv.Range{Key: "d/"})
			require.NoError(t, err)
			rev = g.Rev - sides[0].base
			require.Equal(t, g.Rev-sides[0].base, mem.Rev()-sides[1].base, "seed %d step %d: %s", seed, i, s.desc)
		}
	}

	// The watches: every event, in order, the same.
	end := [2]int64{}
	for i, d := range sides {
		g, err := d.b.Get(ctx, kv.Range{Key: "d/"})
		require.NoError(t, err)
		end[i] = g.Rev
	}
	var evs [2][]string
	for i, d := range sides {
		// A last write to know where the watch ends.
		_, err := d.b.Txn(ctx, kv.Txn{Then: []kv.Op{kv.Put("d/end", "", kv.NoLease)}})
		require.NoError(t, err)
		for done := false; !done; {
			select {
			case wr := <-watches[i]:
				require.NoError(t, wr.Err)
				for _, ev := range wr.Events {
					if ev.KV.Key == "d/end" {
						done = true
						continue
					}
					p := ""
					if ev.Prev != nil {
						p = d.norm([]kv.KV{*ev.Prev})
					}
					evs[i] = append(evs[i], fmt.Sprintf("%d %s [%s] was [%s]", ev.Type, ev.KV.Key,
						d.norm([]kv.KV{ev.KV}), p))
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("side %d: the watch stalled", i)
			}
		}
	}
	require.NotEmpty(t, evs[0])
	require.Equal(t, evs[0], evs[1])
}
