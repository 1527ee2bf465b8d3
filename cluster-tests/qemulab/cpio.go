package qemulab

import (
	"fmt"
	"io"
)

// cpioWriter writes a "newc" cpio archive (the initramfs format the Linux
// kernel unpacks; see the kernel's Documentation/driver-api/early-userspace).
type cpioWriter struct {
	w     io.Writer
	ino   uint32
	err   error
	total int64
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.total += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.total % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

// Dir adds a directory.
func (c *cpioWriter) Dir(name string) { c.entry(name, modeDir|0o755, nil) }

// File adds a regular file.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, modeFile|perm, data)
}

// Symlink adds a symbolic link.
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, modeLink|0o777, []byte(target))
}

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil)
	return c.err
}
