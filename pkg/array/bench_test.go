package array

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// BenchmarkWriteMirror: one 4 KiB write-back write at a time through the
// owner's cache, with write-cache mirroring on (the copy crosses the
// interlink: 50 µs + 10 Gbit/s) and off. The ns/op difference is the
// mirror's cost per acknowledged write; compare the two in one run.
func BenchmarkWriteMirror(b *testing.B) {
	for _, mirror := range []bool{true, false} {
		b.Run(fmt.Sprintf("mirror=%v", mirror), func(b *testing.B) {
			cfg := Loopback(b.TempDir(), 64<<20)
			cfg.Interlink.Penalty = 50 * time.Microsecond
			cfg.Cache.Mirror = &mirror
			a, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			l := a.LUN(0)
			buf := bytes.Repeat([]byte{1}, 4096)
			b.SetBytes(4096)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := l.WriteAt(1, buf, int64(i%16384)*4096, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
