// Command writeload drives a bounded write workload through the Go
// initiator against any iSCSI target and prints IOPS and MB/s, so aluad
// and tgtd are measured with the same client in the same run.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aluad/aluad/pkg/initiator"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:3260", "portal")
	target := flag.String("target", "iqn.2026-11.org.aluad:array", "target IQN")
	lun := flag.Uint64("lun", 0, "LUN")
	bsize := flag.Int("size", 4096, "bytes per write")
	qd := flag.Int("qd", 16, "outstanding writes")
	dur := flag.Duration("t", 5*time.Second, "duration (bounded)")
	fill := flag.Int64("fill", 0, "instead: write this many bytes sequentially from LBA 0 with random data, 1 MiB at a time, and exit")
	flag.Parse()
	if *dur > 2*time.Minute {
		*dur = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), *dur+10*time.Second)
	defer cancel()
	s, err := initiator.Dial(ctx, initiator.Config{Addr: *addr, Target: *target, InitiatorName: "iqn.2026-11.org.aluad:writeload"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "writeload:", err)
		os.Exit(1)
	}
	defer s.Logout(context.Background())
	s.ClearUA(ctx, *lun, 8)
	blocks, bs, err := s.ReadCapacity16(ctx, *lun)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writeload:", err)
		os.Exit(1)
	}
	if *fill > 0 {
		chunk := make([]byte, 1<<20)
		for done := int64(0); done < *fill; done += int64(len(chunk)) {
			for i := range chunk {
				chunk[i] = byte(rand.Uint32())
			}
			if err := s.Write16(ctx, *lun, uint64(done)/uint64(bs), chunk, bs, false); err != nil {
				fmt.Fprintln(os.Stderr, "writeload: fill:", err)
				os.Exit(1)
			}
		}
		return
	}
	per := uint64(*bsize / bs)
	span := min(blocks, 1<<30/uint64(bs)) / per
	var ops atomic.Int64
	var failed atomic.Int64
	deadline := time.Now().Add(*dur)
	var wg sync.WaitGroup
	buf := make([]byte, *bsize)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	for w := 0; w < *qd; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				lba := rand.Uint64N(span) * per
				if err := s.Write16(ctx, *lun, lba, buf, bs, false); err != nil {
					failed.Add(1)
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	n := ops.Load()
	fmt.Printf("iops %.0f mbps %.1f errors %d\n", float64(n)/el, float64(n)*float64(*bsize)/el/1e6, failed.Load())
}
