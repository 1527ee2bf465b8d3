package cluster

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/aluad/aluad/pkg/cluster/kv"
)

// etcdKV is the store's backend on a real etcd client: each call is the
// clientv3 call the store made before the backend existed, with the
// same options. Errors come back as etcd's, those with a kv meaning
// (a lease not found, a compacted revision) wrapped so both match.
type etcdKV struct{ cli *clientv3.Client }

// EtcdBackend is the kv.Backend of an etcd client.
func EtcdBackend(cli *clientv3.Client) kv.Backend { return etcdKV{cli} }

func etcdErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w (%w)", kv.ErrLeaseNotFound, err)
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w (%w)", kv.ErrCompacted, err)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("%w (%w)", kv.ErrFutureRev, err)
	case errors.Is(err, rpctypes.ErrDuplicateKey):
		return fmt.Errorf("%w (%w)", kv.ErrDuplicateKey, err)
	}
	return err
}

func rangeOpts(r kv.Range) []clientv3.OpOption {
	var opts []clientv3.OpOption
	if r.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if r.Rev > 0 {
		opts = append(opts, clientv3.WithRev(r.Rev))
	}
	if r.CountOnly {
		opts = append(opts, clientv3.WithCountOnly())
	}
	// WithFirstCreate and WithLastCreate without their WithPrefix (a
	// Range says Prefix itself; the store's reads say it with them).
	switch r.Sort {
	case kv.FirstCreate:
		opts = append(opts, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	case kv.LastCreate:
		opts = append(opts, clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	}
	if r.MaxCreateRev > 0 {
		opts = append(opts, clientv3.WithMaxCreateRev(r.MaxCreateRev))
	}
	return opts
}

func fromEtcd(k *mvccpb.KeyValue) kv.KV {
	return kv.KV{Key: string(k.Key), Value: string(k.Value), CreateRev: k.CreateRevision, ModRev: k.ModRevision,
		Version: k.Version, Lease: kv.LeaseID(k.Lease)}
}

func fromEtcdKVs(kvs []*mvccpb.KeyValue) []kv.KV {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]kv.KV, len(kvs))
	for i, k := range kvs {
		out[i] = fromEtcd(k)
	}
	return out
}

func (e etcdKV) Get(ctx context.Context, r kv.Range) (kv.RangeResult, error) {
	g, err := e.cli.Get(ctx, r.Key, rangeOpts(r)...)
	if err != nil {
		return kv.RangeResult{}, etcdErr(err)
	}
	return kv.RangeResult{Rev: g.Header.Revision, KVs: fromEtcdKVs(g.Kvs), Count: g.Count}, nil
}

func toEtcdCmp(c kv.Cmp) clientv3.Cmp {
	switch c.Target {
	case kv.TargetCreateRev:
		return clientv3.Compare(clientv3.CreateRevision(c.Key), c.Op, c.Num)
	case kv.TargetModRev:
		return clientv3.Compare(clientv3.ModRevision(c.Key), c.Op, c.Num)
	case kv.TargetVersion:
		return clientv3.Compare(clientv3.Version(c.Key), c.Op, c.Num)
	case kv.TargetLease:
		return clientv3.Compare(clientv3.LeaseValue(c.Key), c.Op, clientv3.LeaseID(c.Num))
	}
	return clientv3.Compare(clientv3.Value(c.Key), c.Op, c.Value)
}

func toEtcdOp(o kv.Op) clientv3.Op {
	switch o.Kind {
	case kv.OpPut:
		if o.Lease != kv.NoLease {
			return clientv3.OpPut(o.Key, o.Value, clientv3.WithLease(clientv3.LeaseID(o.Lease)))
		}
		return clientv3.OpPut(o.Key, o.Value)
	case kv.OpDelete:
		if o.Prefix {
			return clientv3.OpDelete(o.Key, clientv3.WithPrefix())
		}
		return clientv3.OpDelete(o.Key)
	}
	return clientv3.OpGet(o.Key, rangeOpts(o.Range)...)
}

func (e etcdKV) Txn(ctx context.Context, t kv.Txn) (kv.TxnResult, error) {
	txn := e.cli.Txn(ctx)
	if len(t.If) > 0 {
		cmps := make([]clientv3.Cmp, len(t.If))
		for i, c := range t.If {
			cmps[i] = toEtcdCmp(c)
		}
		txn = txn.If(cmps...)
	}
	for _, br := range []struct {
		ops []kv.Op
		add func(...clientv3.Op) clientv3.Txn
	}{{t.Then, txn.Then}, {t.Else, txn.Else}} {
		if len(br.ops) == 0 {
			continue
		}
		ops := make([]clientv3.Op, len(br.ops))
		for i, o := range br.ops {
			ops[i] = toEtcdOp(o)
		}
		txn = br.add(ops...)
	}
	r, err := txn.Commit()
	if err != nil {
		return kv.TxnResult{}, etcdErr(err)
	}
	out := kv.TxnResult{Rev: r.Header.Revision, Succeeded: r.Succeeded, Results: make([]kv.OpResult, len(r.Responses))}
	for i, op := range r.Responses {
		if g := op.GetResponseRange(); g != nil {
			out.Results[i] = kv.OpResult{KVs: fromEtcdKVs(g.Kvs), Count: g.Count}
		}
		if d := op.GetResponseDeleteRange(); d != nil {
			out.Results[i] = kv.OpResult{Deleted: d.Deleted}
		}
	}
	return out, nil
}

func (e etcdKV) Grant(ctx context.Context, ttl int64) (kv.Lease, error) {
	g, err := e.cli.Grant(ctx, ttl)
	if err != nil {
		return kv.Lease{}, etcdErr(err)
	}
	return kv.Lease{ID: kv.LeaseID(g.ID), TTL: g.TTL}, nil
}

func (e etcdKV) KeepAliveOnce(ctx context.Context, id kv.LeaseID) (int64, error) {
	r, err := e.cli.KeepAliveOnce(ctx, clientv3.LeaseID(id))
	if err != nil {
		return 0, etcdErr(err)
	}
	return r.TTL, nil
}

func (e etcdKV) Revoke(ctx context.Context, id kv.LeaseID) error {
	_, err := e.cli.Revoke(ctx, clientv3.LeaseID(id))
	return etcdErr(err)
}

func (e etcdKV) Compact(ctx context.Context, rev int64) error {
	_, err := e.cli.Compact(ctx, rev)
	return etcdErr(err)
}

func (e etcdKV) Watch(ctx context.Context, w kv.WatchRequest) <-chan kv.WatchResponse {
	if w.RequireLeader {
		ctx = clientv3.WithRequireLeader(ctx)
	}
	var opts []clientv3.OpOption
	if w.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	if w.FromRev > 0 {
		opts = append(opts, clientv3.WithRev(w.FromRev))
	}
	if w.PrevKV {
		opts = append(opts, clientv3.WithPrevKV())
	}
	wc := e.cli.Watch(ctx, w.Key, opts...)
	out := make(chan kv.WatchResponse)
	go func() {
		defer close(out)
		for wr := range wc {
			r := kv.WatchResponse{CompactRev: wr.CompactRevision, Canceled: wr.Canceled, Err: wr.Err()}
			for _, ev := range wr.Events {
				e := kv.Event{Type: kv.EventPut, KV: fromEtcd(ev.Kv)}
				if ev.Type == clientv3.EventTypeDelete {
					e.Type = kv.EventDelete
				}
				if ev.PrevKv != nil {
					p := fromEtcd(ev.PrevKv)
					e.Prev = &p
				}
				r.Events = append(r.Events, e)
			}
			select {
			case out <- r:
			case <-ctx.Done():
				// The client closes wc once ctx ends; drain it.
				for range wc {
				}
				return
			}
		}
	}()
	return out
}
