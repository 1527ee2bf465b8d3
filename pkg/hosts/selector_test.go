package hosts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pathsWith(cs ...Counters) []*Path {
	var out []*Path
	for i, c := range cs {
		out = append(out, &Path{Name: string(rune('p' + i)), c: c})
	}
	return out
}

func TestSelectors(t *testing.T) {
	tests := []struct {
		sel   string
		paths []Counters
		size  int
		want  int
	}{
		{"least-queue-depth", []Counters{{IOsPending: [2]int64{3, 1}}, {IOsPending: [2]int64{1, 1}}, {IOsPending: [2]int64{2, 2}}}, 4096, 1},
		{"least-queue-depth", []Counters{{}, {}}, 4096, 0},
		// best-path: fewest bytes pending ...
		{"best-path", []Counters{{BytesPending: [2]int64{8192, 0}, AvgLatency: 100}, {BytesPending: [2]int64{4096, 0}, AvgLatency: 100}}, 4096, 1},
		// ... weighted by the latency error weight: 3x the latency outweighs
		// half the bytes pending.
		{"best-path", []Counters{{BytesPending: [2]int64{8192, 0}, AvgLatency: 100}, {BytesPending: [2]int64{0, 4096}, AvgLatency: 300}}, 4096, 0},
		// service-time: pending bytes over the observed rate.
		{"service-time", []Counters{
			{BytesPending: [2]int64{8192, 0}, Bytes: [2]uint64{1 << 20, 0}, Service: [2]time.Duration{time.Millisecond, 0}},
			{BytesPending: [2]int64{4096, 0}, Bytes: [2]uint64{1 << 20, 0}, Service: [2]time.Duration{10 * time.Millisecond, 0}},
		}, 4096, 0},
	}
	for _, tc := range tests {
		t.Run(tc.sel, func(t *testing.T) {
			s, err := NewSelector(tc.sel)
			require.NoError(t, err)
			ps := pathsWith(tc.paths...)
			assert.Same(t, ps[tc.want], s.Pick(ps, tc.size))
		})
	}
	t.Run("round-robin walks the list", func(t *testing.T) {
		s, err := NewSelector("round-robin")
		require.NoError(t, err)
		ps := pathsWith(Counters{}, Counters{}, Counters{})
		var got []string
		for i := 0; i < 5; i++ {
			got = append(got, s.Pick(ps, 512).Name)
		}
		assert.Equal(t, []string{"p", "q", "r", "p", "q"}, got)
		assert.Nil(t, s.Pick(nil, 512))
	})
	_, err := NewSelector("fastest")
	assert.ErrorContains(t, err, "unknown path selector")
}

func TestCounters(t *testing.T) {
	p := &Path{}
	p.begin(true, 4096)
	p.begin(false, 8192)
	c := p.Counters()
	assert.EqualValues(t, 12288, c.PendingBytes())
	assert.EqualValues(t, 2, c.PendingIOs())
	p.end(true, 4096, 100*time.Microsecond, 150*time.Microsecond, true)
	p.end(false, 8192, 0, time.Millisecond, false)
	c = p.Counters()
	assert.Zero(t, c.PendingBytes())
	assert.Equal(t, [2]uint64{0, 4096}, c.Bytes)
	assert.Equal(t, [2]uint64{0, 1}, c.IOs)
	assert.Equal(t, 150*time.Microsecond, c.Latency[1])
	assert.Equal(t, 100*time.Microsecond, c.Service[1])
	assert.EqualValues(t, 1, c.Errors)
	// The error weighs as a 1 s latency in the rolling average.
	assert.InDelta(t, Alpha*150+(1-Alpha)*1e6, c.AvgLatency, 1e-6)
	assert.EqualValues(t, 2, c.MaxPending)
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name string
		opts map[string]string
		err  string
		chk  func(*testing.T, Personality)
	}{
		{"linux-dmmp", nil, "", func(t *testing.T, p Personality) {
			assert.Equal(t, 5*time.Second, p.CheckEvery)
			assert.Equal(t, 20*time.Second, p.MaxCheckEvery)
			assert.Equal(t, QueueForever, p.NoPathRetry)
			assert.Equal(t, FailbackImmediate, p.Failback)
		}},
		{"linux-dmmp", map[string]string{"failback": "followover", "no_path_retry": "30", "checker": "2s", "selector": "round-robin"}, "", func(t *testing.T, p Personality) {
			assert.Equal(t, FailbackFollowover, p.Failback)
			assert.Equal(t, 30, p.NoPathRetry)
			assert.Equal(t, 2*time.Second, p.CheckEvery)
			assert.Equal(t, "round-robin", p.Selector)
		}},
		{"vmware", map[string]string{"psp": "rr"}, "", func(t *testing.T, p Personality) {
			assert.Equal(t, 1000, p.SwitchEvery)
		}},
		{"vmware", map[string]string{"psp": "fixed"}, "psp must be mru or rr", nil},
		{"linux-dmmp", map[string]string{"psp": "rr"}, "psp applies to vmware only", nil},
		{"linux-dmmp", map[string]string{"checker": "-1s"}, "positive duration", nil},
		{"linux-dmmp", map[string]string{"max_checker": "1s"}, "at least checker", nil},
		{"linux-dmmp", map[string]string{"failback": "sometimes"}, "immediate, followover or manual", nil},
		{"linux-dmmp", map[string]string{"selector": "fastest"}, "unknown path selector", nil},
		{"linux-dmmp", map[string]string{"colour": "blue"}, "unknown option", nil},
		{"linux-dmmp", map[string]string{"fast_io_fail": "soon"}, "want a positive duration", nil},
		{"aix-mpio", nil, "unknown host stack", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Lookup(tc.name, tc.opts)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.chk(t, p)
		})
	}
}
