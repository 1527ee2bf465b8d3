package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The sampler is the guest's own view of where its I/O goes, for the
// lab to compare with the array's: every interval it reads the completed
// reads and writes of each block device matching its globs
// (/sys/block/sd*/stat: one per path of a multipath device;
// /sys/block/dm-*/stat: the multipath devices) and writes a line
// "UNIX_NS PREV_NS DEV READS WRITES" to a file when it first sees a
// device and whenever its counts changed: the change happened after
// PREV_NS (when the previous read of that device began) and by UNIX_NS
// (when this read ended), so a guest starved of CPU shows as a wide
// interval, not as a wrong time. Times are the guest's clock; the lab
// measures its offset with the "clock" op.
type sampler struct {
	stop chan struct{}
	done chan struct{}
	n    int
	err  error
}

var sampling struct {
	sync.Mutex
	s *sampler
}

// statCounts reads the completed reads and writes of a block device's
// stat file (Documentation/block/stat.rst: fields 1 and 5).
func statCounts(b []byte) (reads, writes uint64, ok bool) {
	f := strings.Fields(string(b))
	if len(f) < 5 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseUint(f[0], 10, 64)
	w, err2 := strconv.ParseUint(f[4], 10, 64)
	return r, w, err1 == nil && err2 == nil
}

// devName is the device a stat path belongs to (/sys/block/sdb/stat: sdb).
func devName(path string) string { return filepath.Base(filepath.Dir(path)) }

func startSampler(globs, out string, every time.Duration) error {
	sampling.Lock()
	defer sampling.Unlock()
	if sampling.s != nil {
		return fmt.Errorf("a sampler is already running")
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	sampling.s = s
	go func() {
		defer close(s.done)
		w := bufio.NewWriterSize(f, 1<<16)
		last := map[string][2]uint64{}
		// prevRead is when each device's previous read began: a rise seen
		// now happened after it, and by the end of this read.
		prevRead := map[string]int64{}
		var paths []string
		t := time.NewTicker(every)
		defer t.Stop()
		for i := 0; ; i++ {
			if i%10 == 0 { // a path's disk comes back under a new name after a relogin
				paths = paths[:0]
				for _, g := range strings.Fields(globs) {
					m, _ := filepath.Glob(g)
					paths = append(paths, m...)
				}
			}
			for _, p := range paths {
				start := time.Now().UnixNano()
				b, err := os.ReadFile(p)
				end := time.Now().UnixNano()
				if err != nil {
					continue
				}
				r, wr, ok := statCounts(b)
				dev := devName(p)
				prev, seen := prevRead[dev]
				prevRead[dev] = start
				if !ok || (seen && last[dev] == [2]uint64{r, wr}) {
					continue
				}
				if !seen {
					prev = start // first sight: the counts so far, not a rise
				}
				last[dev] = [2]uint64{r, wr}
				fmt.Fprintf(w, "%d %d %s %d %d\n", end, prev, dev, r, wr)
				s.n++
			}
			select {
			case <-s.stop:
				s.err = w.Flush()
				if cerr := f.Close(); s.err == nil {
					s.err = cerr
				}
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// stopSampler ends the sampler and returns how many lines it wrote.
func stopSampler() (int, error) {
	sampling.Lock()
	s := sampling.s
	sampling.s = nil
	sampling.Unlock()
	if s == nil {
		return 0, fmt.Errorf("no sampler is running")
	}
	close(s.stop)
	<-s.done
	return s.n, s.err
}
