package cache

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/media"
)

const lunSize = 1 << 20

// pair is two nodes' caches over one shared LUN (id 1), each the other's
// mirror partner, as the array wires them.
type pair struct {
	a, b *Cache
	st   *media.Mem
}

func newPair(cfg Config) *pair {
	p := &pair{a: New("a", cfg), b: New("b", cfg), st: media.NewMem(lunSize)}
	p.a.Attach(1, p.st)
	p.b.Attach(1, p.st)
	up := func(c *Cache) func() *Cache {
		return func() *Cache {
			if c.Up() {
				return c
			}
			return nil
		}
	}
	p.a.SetPeers(up(p.b), []*Cache{p.b}, nil)
	p.b.SetPeers(up(p.a), []*Cache{p.a}, nil)
	return p
}

func fill(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

func onMedia(t *testing.T, st media.Store, off int64, n int) []byte {
	t.Helper()
	got := make([]byte, n)
	require.NoError(t, st.ReadAt(got, off))
	return got
}

func TestWritePolicies(t *testing.T) {
	tests := []struct {
		name       string
		mode       Mode
		mirror     bool
		fua        bool
		onMedia    bool // before any flush
		mirrorHeld bool
	}{
		{"write-back mirrored", WriteBack, true, false, false, true},
		{"write-back unmirrored", WriteBack, false, false, false, false},
		{"write-back FUA", WriteBack, true, true, true, false},
		{"write-through", WriteThrough, true, false, true, false},
		{"none", None, true, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(Config{Mode: tt.mode, Mirror: tt.mirror})
			syncs := p.st.Syncs()
			require.NoError(t, p.a.WriteAt(1, fill(8192, 7), 4096, tt.fua))
			got := make([]byte, 8192)
			require.NoError(t, p.a.ReadAt(1, got, 4096))
			require.Equal(t, fill(8192, 7), got, "read after write")
			require.Equal(t, tt.onMedia, bytes.Equal(onMedia(t, p.st, 4096, 8192), fill(8192, 7)), "on media before flush")
			require.Equal(t, tt.mirrorHeld, p.b.MirrorBytes() == 8192, "mirror holds the pages")
			if tt.fua {
				require.Greater(t, p.st.Syncs(), syncs, "FUA syncs the media")
			}
			require.NoError(t, p.a.Flush(1))
			require.Equal(t, fill(8192, 7), onMedia(t, p.st, 4096, 8192), "on media after SYNCHRONIZE CACHE")
			require.Zero(t, p.b.MirrorBytes(), "destaged pages are released from the mirror")
			require.Zero(t, p.a.DirtyBytes(1))
		})
	}
}

func TestPartialPagesMergeWithMedia(t *testing.T) {
	p := newPair(Config{Mode: WriteBack, Mirror: true})
	require.NoError(t, p.st.WriteAt(fill(4096, 1), 0))
	// 512-byte writes into an uncached page: the rest of the page is read first.
	require.NoError(t, p.a.WriteAt(1, fill(512, 9), 512, false))
	require.NoError(t, p.a.WriteAt(1, fill(1024, 8), 3584, false)) // spans pages 0 and 1
	want := fill(8192, 0)
	copy(want, fill(4096, 1))
	copy(want[512:], fill(512, 9))
	copy(want[3584:], fill(1024, 8))
	got := make([]byte, 8192)
	require.NoError(t, p.a.ReadAt(1, got, 0))
	require.Equal(t, want, got)
	require.NoError(t, p.a.Flush(1))
	require.Equal(t, want, onMedia(t, p.st, 0, 8192))
}

func TestUnmapDropsPagesAndKeepsEdges(t *testing.T) {
	p := newPair(Config{Mode: WriteBack, Mirror: true})
	require.NoError(t, p.a.WriteAt(1, fill(16384, 5), 0, false))
	require.NoError(t, p.a.Unmap(1, 1024, 8192))
	want := fill(16384, 5)
	clear(want[1024 : 1024+8192])
	got := make([]byte, 16384)
	require.NoError(t, p.a.ReadAt(1, got, 0))
	require.Equal(t, want, got)
	require.NoError(t, p.a.Flush(1))
	require.Equal(t, want, onMedia(t, p.st, 0, 16384))
}

func TestReadCacheIsBoundedAndCounts(t *testing.T) {
	p := newPair(Config{Mode: WriteBack, Capacity: 16 * 4096})
	buf := make([]byte, 4096)
	for i := int64(0); i < 64; i++ {
		require.NoError(t, p.a.ReadAt(1, buf, i*4096))
	}
	s := p.a.Stats()
	require.LessOrEqual(t, s.Bytes, int64(16*4096))
	require.Equal(t, uint64(64), s.ReadMisses)
	require.Equal(t, uint64(48), s.Evicted)
	require.NoError(t, p.a.ReadAt(1, buf, 63*4096))
	require.Equal(t, uint64(1), p.a.Stats().ReadHits)
}

func TestDirtyLimitHolds(t *testing.T) {
	p := newPair(Config{Mode: WriteBack, Mirror: true, Capacity: 64 * 4096, DirtyLimit: 16 * 4096})
	for i := int64(0); i < 200; i++ {
		require.NoError(t, p.a.WriteAt(1, fill(4096, byte(i)), (i%250)*4096, false))
		require.LessOrEqual(t, p.a.Stats().Dirty, int64(16*4096))
	}
	require.Positive(t, p.a.Stats().Destaged)
}

func TestCrashReplaysMirror(t *testing.T) {
	for _, mirror := range []bool{true, false} {
		t.Run(fmt.Sprintf("mirror=%v", mirror), func(t *testing.T) {
			p := newPair(Config{Mode: WriteBack, Mirror: mirror})
			require.NoError(t, p.a.WriteAt(1, fill(8192, 3), 0, false))
			lost := p.a.Crash()
			require.Len(t, lost, 2, "two dirty pages were in the crashed cache")
			held := 0
			for _, d := range lost {
				if p.b.MirrorHas(d.LUN, d.Idx, d.Ver) {
					held++
				}
			}
			require.NoError(t, p.b.Install(1, p.b.TakeMirror(1)))
			got := make([]byte, 8192)
			require.NoError(t, p.b.ReadAt(1, got, 0))
			if mirror {
				require.Equal(t, 2, held)
				require.Equal(t, fill(8192, 3), got, "the survivor serves the acknowledged write")
				require.Equal(t, int64(8192), p.b.DirtyBytes(1), "replayed as dirty pages of the new owner")
				require.NoError(t, p.b.Flush(1))
				require.Equal(t, fill(8192, 3), onMedia(t, p.st, 0, 8192))
			} else {
				require.Zero(t, held)
				require.Equal(t, fill(8192, 0), got, "without a mirror the write is gone")
			}
			require.ErrorIs(t, p.a.WriteAt(1, fill(512, 1), 0, false), ErrDown)
			p.a.Restart()
			require.NoError(t, p.a.ReadAt(1, got, 0))
		})
	}
}

func TestNoPartnerMeansWriteThrough(t *testing.T) {
	p := newPair(Config{Mode: WriteBack, Mirror: true})
	p.b.Crash()
	require.NoError(t, p.a.WriteAt(1, fill(4096, 6), 0, false))
	require.Equal(t, fill(4096, 6), onMedia(t, p.st, 0, 4096), "no mirror partner: the write went through")
	require.Equal(t, uint64(1), p.a.Stats().WritesThrough)
}

// TestAgainstModel drives random reads, writes, unmaps, flushes, destages
// and crash-with-replay through one owner at a time and checks every read
// against a plain byte slice.
func TestAgainstModel(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		p := newPair(Config{Mode: WriteBack, Mirror: true, Capacity: 32 * 4096, DirtyLimit: 12 * 4096})
		model := make([]byte, 256*1024)
		owner, other := p.a, p.b
		for op := 0; op < 400; op++ {
			off := int64(rng.IntN(len(model)/512-16)) * 512
			n := (1 + rng.IntN(16)) * 512
			switch k := rng.IntN(20); {
			case k < 8:
				b := make([]byte, n)
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				require.NoError(t, owner.WriteAt(1, b, off, rng.IntN(10) == 0))
				copy(model[off:], b)
			case k < 15:
				got := make([]byte, n)
				require.NoError(t, owner.ReadAt(1, got, off))
				require.Equal(t, model[off:off+int64(n)], got, "seed %d op %d read %d+%d", seed, op, off, n)
			case k < 16:
				require.NoError(t, owner.Unmap(1, off, int64(n)))
				clear(model[off : off+int64(n)])
			case k < 17:
				require.NoError(t, owner.Flush(1))
			case k < 18:
				_, err := owner.destageOldest(rng.IntN(8))
				require.NoError(t, err)
			case k < 19: // planned hand-over: flush, drop, switch
				require.NoError(t, owner.Flush(1))
				require.Zero(t, owner.Invalidate(1))
				other.Invalidate(1)
				other.DropMirror(1)
				owner, other = other, owner
			default: // crash the owner; the partner replays its mirror
				owner.Crash()
				other.Invalidate(1)
				require.NoError(t, other.Install(1, other.TakeMirror(1)))
				// single-copy now: the array destages it (in the background)
				require.NoError(t, other.Flush(1))
				owner.Restart()
				owner, other = other, owner
			}
		}
		require.NoError(t, owner.Flush(1))
		require.Equal(t, model, onMedia(t, p.st, 0, len(model)), "seed %d: media after the final flush", seed)
	}
}

// TestConcurrentWritersWithDestager: writers own disjoint blocks and check
// their own last write on every read while the destager and eviction run.
func TestConcurrentWritersWithDestager(t *testing.T) {
	p := newPair(Config{Mode: WriteBack, Mirror: true, Capacity: 48 * 4096, DirtyLimit: 16 * 4096,
		DestageInterval: time.Millisecond})
	p.a.Start()
	defer p.a.Close()
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			last := map[int64]byte{}
			for i := 0; i < 600; i++ {
				blk := int64(w + 6*rng.IntN(40)) // 4 KiB blocks, disjoint per writer
				if v, ok := last[blk]; ok && rng.IntN(2) == 0 {
					got := make([]byte, 4096)
					if err := p.a.ReadAt(1, got, blk*4096); err != nil || !bytes.Equal(got, fill(4096, v)) {
						t.Errorf("writer %d block %d: want %d, got %v (err %v)", w, blk, v, got[:4], err)
						return
					}
					continue
				}
				v := byte(rng.Uint32())
				if err := p.a.WriteAt(1, fill(4096, v), blk*4096, false); err != nil {
					t.Error(err)
					return
				}
				last[blk] = v
			}
		}()
	}
	wg.Wait()
	require.NoError(t, p.a.FlushAll())
	require.Zero(t, p.b.MirrorBytes())
}

func TestDestagerFlushesWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(Config{Mode: WriteBack, Mirror: true, DestageInterval: 100 * time.Millisecond})
		p.a.Start()
		defer p.a.Close()
		require.NoError(t, p.a.WriteAt(1, fill(4096, 4), 0, false))
		time.Sleep(150 * time.Millisecond) // one tick sees the write
		synctest.Wait()
		require.Equal(t, int64(4096), p.a.DirtyBytes(1), "not destaged while writes keep coming in")
		time.Sleep(100 * time.Millisecond) // a whole idle interval
		synctest.Wait()
		require.Zero(t, p.a.DirtyBytes(1))
		require.Equal(t, fill(4096, 4), onMedia(t, p.st, 0, 4096))
		require.Zero(t, p.b.MirrorBytes())
	})
}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{WriteBack, WriteThrough, None} {
		got, err := ParseMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := ParseMode("writeback")
	require.ErrorContains(t, err, "write-back, write-through, none")
}
