package tcmu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// UIO is one TCMU device's UIO node, open and mapped.
type UIO struct {
	Name string // the UIO name, tcm-user/<hba>/<dev>/<config>
	Dev  string // /dev/uioN
	f    *os.File
	Mem  []byte
}

// FindUIO looks in sysClass (/sys/class/uio) for the UIO device of the
// TCMU device dev on HBA hba.
func FindUIO(sysClass string, hba int, dev string) (string, string, error) {
	ents, err := os.ReadDir(sysClass)
	if err != nil {
		return "", "", fmt.Errorf("tcmu: %w (is target_core_user loaded?)", err)
	}
	want := fmt.Sprintf("tcm-user/%d/%s", hba, dev)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(sysClass, e.Name(), "name"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(b))
		if name == want || strings.HasPrefix(name, want+"/") {
			return e.Name(), name, nil
		}
	}
	return "", "", fmt.Errorf("tcmu: no UIO device for %s in %s", want, sysClass)
}

// OpenUIO opens /dev/<node> and maps its region (the size sysfs gives
// for map0; the kernel refuses any other size).
func OpenUIO(sysClass, devDir, node, name string) (*UIO, error) {
	b, err := os.ReadFile(filepath.Join(sysClass, node, "maps", "map0", "size"))
	if err != nil {
		return nil, fmt.Errorf("tcmu: size of %s: %w", node, err)
	}
	size, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64)
	if err != nil || size == 0 || size > 1<<40 {
		return nil, fmt.Errorf("tcmu: size of %s: %q", node, strings.TrimSpace(string(b)))
	}
	dev := filepath.Join(devDir, node)
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("tcmu: open %s: %w", dev, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("tcmu: mmap %s (%d bytes): %w", dev, size, err)
	}
	return &UIO{Name: name, Dev: dev, f: f, Mem: mem}, nil
}

// Wait blocks until the kernel signals the device (new commands), and
// returns the UIO event count.
func (u *UIO) Wait() (uint32, error) {
	var b [4]byte
	if _, err := u.f.Read(b[:]); err != nil {
		return 0, err
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24, nil
}

// Kick tells the kernel the tail moved (it reaps completions).
func (u *UIO) Kick() error {
	_, err := u.f.Write([]byte{0, 0, 0, 0})
	return err
}

// Bytes is the mapped region.
func (u *UIO) Bytes() []byte { return u.Mem }

func (u *UIO) String() string { return u.Dev }

// Close unmaps and closes the device.
func (u *UIO) Close() error {
	err := syscall.Munmap(u.Mem)
	if cerr := u.f.Close(); err == nil {
		err = cerr
	}
	return err
}
