package qemulab

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// bootModules are what the initrd loads to mount the root disk; the rest
// (network, agent channel, iSCSI, dm-multipath) comes from the root's
// own /lib/modules by modprobe. A trailing "?" marks a module some
// kernels do without: ext4 asks the crypto API for crc32c at mount up
// to 6.x, and uses the built-in library after.
var bootModules = []string{"virtio_pci", "virtio_blk", "virtio_console", "crc32c_generic?", "ext4"}

// initScript is the initrd's /init: load the boot modules, mount the root
// disk, and hand over to the agent as PID 1 of the real root.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /newroot
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /lib/modules/$m || echo "initrd: insmod $m failed"; done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
mount -t ext4 /dev/vda /newroot || { echo "initrd: cannot mount /dev/vda"; exec sh; }
mount -t tmpfs -o mode=0755 run /newroot/run
cp /aluad-agent /newroot/run/aluad-agent
[ -d /extra ] && cp /extra/* /newroot/run/
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /run/aluad-agent
`

// moduleOrder returns the modules to load, dependencies first, for the
// wanted module names, from a modules.dep text ("kernel/x/a.ko: kernel/y/b.ko ...").
// A wanted module that modules.builtin lists is in the kernel already; one
// named with a trailing "?" may be missing.
func moduleOrder(dep, builtin string, want []string) ([]string, error) {
	inKernel := map[string]bool{}
	for _, line := range strings.Split(builtin, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			inKernel[strings.ReplaceAll(strings.TrimSuffix(path.Base(line), ".ko"), "-", "_")] = true
		}
	}
	deps := map[string][]string{}
	byName := map[string]string{}
	for _, line := range strings.Split(dep, "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		n := strings.TrimSuffix(path.Base(mod), ".ko")
		byName[strings.ReplaceAll(n, "-", "_")] = mod
	}
	var order []string
	seen := map[string]bool{}
	var visit func(m string)
	visit = func(m string) {
		if seen[m] {
			return
		}
		seen[m] = true
		// modules.dep lists every transitive dependency, the deepest last.
		for i := len(deps[m]) - 1; i >= 0; i-- {
			visit(deps[m][i])
		}
		order = append(order, m)
	}
	for _, w := range want {
		optional := strings.HasSuffix(w, "?")
		w = strings.ReplaceAll(strings.TrimSuffix(w, "?"), "-", "_")
		if inKernel[w] {
			continue
		}
		m, ok := byName[w]
		if !ok && optional {
			continue
		}
		if !ok {
			return nil, fmt.Errorf("module %s is neither in modules.dep nor in modules.builtin (missing from the image)", w)
		}
		visit(m)
	}
	return order, nil
}

// BuildInitrd writes a gzip'd newc initrd to out: busybox, the boot
// modules from the image's modules.tar, /init, and the agent binary.
func BuildInitrd(img Image, agent, busybox, out string) error {
	return BuildInitrdWith(img, agent, busybox, out, nil)
}

// BuildInitrdWith is BuildInitrd with extra executables (name -> file on
// the host), copied to the guest's /run at boot (the storage guest's
// aluad).
func BuildInitrdWith(img Image, agent, busybox, out string, extra map[string]string) error {
	files := map[string][]byte{}
	f, err := os.Open(img.Modules)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", img.Modules, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		files[strings.TrimPrefix(h.Name, "./")] = b
	}
	order, err := moduleOrder(string(files["modules.dep"]), string(files["modules.builtin"]), bootModules)
	if err != nil {
		return err
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("busybox (Debian busybox-static): %w", err)
	}
	if ef, err := elf.NewFile(bytes.NewReader(bb)); err == nil {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_INTERP {
				return fmt.Errorf("%s is dynamically linked and cannot run in the initrd: install busybox-static", busybox)
			}
		}
	}
	ag, err := os.ReadFile(agent)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	c := &cpioWriter{w: gz}
	for _, d := range []string{"bin", "lib", "lib/modules", "dev", "proc", "sys", "newroot"} {
		c.Dir(d)
	}
	c.File("bin/busybox", 0o755, bb)
	c.File("init", 0o755, []byte(initScript))
	c.File("aluad-agent", 0o755, ag)
	if len(extra) > 0 {
		c.Dir("extra")
		var names []string
		for n := range extra {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(extra[n])
			if err != nil {
				return err
			}
			c.File("extra/"+n, 0o755, b)
		}
	}
	var names []string
	for _, m := range order {
		b, ok := files[m]
		if !ok {
			return fmt.Errorf("module %s is not in %s", m, img.Modules)
		}
		c.File("lib/modules/"+path.Base(m), 0o644, b)
		names = append(names, path.Base(m))
	}
	c.File("modules.order", 0o644, []byte(strings.Join(names, "\n")+"\n"))
	if err := c.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
