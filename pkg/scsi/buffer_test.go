package scsi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBufferPoolSizes(t *testing.T) {
	for _, tc := range []struct {
		n, cap int
	}{
		{1, 512}, {512, 512}, {513, 1024}, {4096, 4096}, {4097, 8192}, {1 << 20, 1 << 20}, {16 << 20, 16 << 20},
	} {
		b := GetBuffer(tc.n)
		require.NotNil(t, b, "%d bytes", tc.n)
		assert.Len(t, b.Bytes(), tc.n)
		assert.Equal(t, tc.cap, cap(b.Bytes()), "%d bytes", tc.n)
		b.Release()
		again := GetBuffer(tc.n)
		assert.Len(t, again.Bytes(), tc.n, "a reused buffer has the asked length")
		again.Release()
	}
	assert.Nil(t, GetBuffer(16<<20+1), "beyond the pooled sizes")
	assert.Nil(t, GetBuffer(0))
	var none *Buffer
	none.Release() // nothing to release
}

// The count of nexuses with a pending unit attention follows every
// change to the queues: take skips the lock only when it is zero.
func TestUACount(t *testing.T) {
	a, b := Nexus{InitiatorPort: "a", TargetPort: 1}, Nexus{InitiatorPort: "b", TargetPort: 1}
	u := &uaQueues{q: map[Nexus][]Reason{}}
	steps := []struct {
		name string
		do   func()
		want int32
	}{
		{"add a", func() { u.add(a, ReasonUAPowerOn) }, 1},
		{"add a again", func() { u.add(a, ReasonUAPowerOn) }, 1},
		{"add b", func() { u.add(b, ReasonUAReportedLUNsChanged) }, 2},
		{"add b another", func() { u.add(b, ReasonUAPowerOn) }, 2},
		{"take a", func() { _, ok := u.take(a); assert.True(t, ok) }, 1},
		{"take a empty", func() { _, ok := u.take(a); assert.False(t, ok) }, 1},
		{"clear b's first", func() { u.clear(b, ReasonUAReportedLUNsChanged) }, 1},
		{"clear b's last", func() { u.clear(b, ReasonUAPowerOn) }, 0},
		{"reset a", func() { u.reset(a, ReasonUAPowerOn) }, 1},
		{"drop a", func() { u.drop(a) }, 0},
		{"drop a again", func() { u.drop(a) }, 0},
	}
	for _, s := range steps {
		s.do()
		assert.Equal(t, s.want, u.n.Load(), s.name)
		assert.Len(t, u.q, int(s.want), s.name)
	}
}
