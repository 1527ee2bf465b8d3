package daemon

import (
	"context"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkReadAOvsANO measures a 4 KiB read at queue depth 1 through the
// whole stack (Go initiator, iSCSI over loopback, gate, array) on the
// owner's port (AO) and on the other node's port (ANO: forwarded over the
// interlink with its configured penalty), alternating the two in the same
// run. It reports the median latency of each and the added latency, with
// no interlink penalty (the cost of forwarding itself) and the default one.
//
//	go test -run '^$' -bench ReadAOvsANO ./pkg/daemon
func BenchmarkReadAOvsANO(b *testing.B) {
	for _, p := range []time.Duration{0, 50 * time.Microsecond} {
		b.Run("penalty="+p.String(), func(b *testing.B) { benchAOvsANO(b, p) })
	}
}

func benchAOvsANO(b *testing.B, penalty time.Duration) {
	cfg := testConfig(b.TempDir())
	cfg.Interlink.Penalty = penalty
	d, err := Start(cfg, Options{Logger: quiet(), StatsInterval: -1})
	require.NoError(b, err)
	defer d.Stop(5 * time.Second)
	ctx := context.Background()
	// LUN 0 is owned by node a: portal 0 is AO, portal 2 (node b) is ANO.
	ao := dial(b, d, 0, 1, "iqn.2026-11.org.example:bench")
	ano := dial(b, d, 2, 2, "iqn.2026-11.org.example:bench")
	defer ao.Close()
	defer ano.Close()
	for _, s := range []interface {
		ClearUA(context.Context, uint64, int) ([][2]byte, error)
	}{ao, ano} {
		_, err := s.ClearUA(ctx, 0, 4)
		require.NoError(b, err)
	}
	r := rand.New(rand.NewSource(1))
	blocks := uint64(cfg.LUNs[0].Size) / 4096
	var tAO, tANO []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Each path reads its own random block, in alternating order, so
		// neither is favoured by the other warming the page cache.
		first, second, tFirst, tSecond := ao, ano, &tAO, &tANO
		if i%2 == 1 {
			first, second, tFirst, tSecond = ano, ao, &tANO, &tAO
		}
		t0 := time.Now()
		_, err := first.Read16(ctx, 0, uint64(r.Int63n(int64(blocks)))*8, 8, 512)
		t1 := time.Now()
		_, err2 := second.Read16(ctx, 0, uint64(r.Int63n(int64(blocks)))*8, 8, 512)
		t2 := time.Now()
		if err != nil || err2 != nil {
			b.Fatal(err, err2)
		}
		*tFirst, *tSecond = append(*tFirst, t1.Sub(t0)), append(*tSecond, t2.Sub(t1))
	}
	b.StopTimer()
	mAO, mANO := median(tAO), median(tANO)
	b.ReportMetric(float64(mAO.Nanoseconds())/1e3, "AO-µs")
	b.ReportMetric(float64(mANO.Nanoseconds())/1e3, "ANO-µs")
	b.ReportMetric(float64((mANO-mAO).Nanoseconds())/1e3, "added-µs")
	b.ReportMetric(float64(mANO)/float64(mAO), "ANO/AO")
	st := d.Array.LUN(0).Stats()
	if st[1].Forwarded.Load() < uint64(b.N) {
		b.Fatalf("node b forwarded %d reads, want >= %d", st[1].Forwarded.Load(), b.N)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
