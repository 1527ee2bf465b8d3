package scsi

import (
	"math/bits"
	"sync"
)

// Buffer is a data-in buffer from the device server's pool: READ's data
// is read into one, and the fabric gives it back (Release) once the data
// has gone out. A fabric that never releases one leaves it to the garbage
// collector; one released while still referenced is a bug.
type Buffer struct {
	b     []byte
	class int
	// ref, when set, is what lent b (a RefBackend's large read): Release
	// ends the loan instead of pooling b.
	ref interface{ Unref() }
}

// refs are the Buffers that carry lent bytes.
var refs = sync.Pool{New: func() any { return &Buffer{class: -1} }}

// lent wraps bytes a RefBackend lent.
func lent(b []byte, ref interface{ Unref() }) *Buffer {
	buf := refs.Get().(*Buffer)
	buf.b, buf.ref = b, ref
	return buf
}

// Lent reports whether the bytes are the media's own (a RefBackend's):
// the kernel may read them (a socket write fails if a page cannot be
// brought in), Go code must not, as it cannot survive that fault.
func (b *Buffer) Lent() bool { return b != nil && b.ref != nil }

// Bytes is the buffer's data.
func (b *Buffer) Bytes() []byte { return b.b }

// Release returns the buffer to the pool. The caller no longer uses it,
// nor any slice of it. Release on nil does nothing.
func (b *Buffer) Release() {
	if b == nil {
		return
	}
	if b.ref != nil {
		b.ref.Unref()
		b.b, b.ref = nil, nil
		refs.Put(b)
		return
	}
	buffers[b.class].Put(b)
}

// Pooled sizes: powers of two from minPooled to maxPooled bytes; a
// larger request is allocated and never pooled.
const (
	minPooledShift = 9  // 512 bytes
	maxPooledShift = 24 // 16 MiB
)

var buffers [maxPooledShift + 1]sync.Pool

// GetBuffer returns a pooled buffer of n bytes, its contents stale (a
// fabric's write data: it holds the buffer until the command has
// completed, then releases it), or nil when n is beyond the pooled sizes.
func GetBuffer(n int) *Buffer { return getBuffer(n) }

// getBuffer returns a pooled buffer of n bytes (its contents stale), or
// nil when n is beyond the pooled sizes.
func getBuffer(n int) *Buffer {
	class := max(bits.Len(uint(n-1)), minPooledShift)
	if n <= 0 || class > maxPooledShift {
		return nil
	}
	if v := buffers[class].Get(); v != nil {
		b := v.(*Buffer)
		b.b = b.b[:n]
		return b
	}
	return &Buffer{b: make([]byte, n, 1<<class), class: class}
}
