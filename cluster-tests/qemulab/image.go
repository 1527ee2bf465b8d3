package qemulab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Image is a built guest image (cluster-tests/build-image.sh).
type Image struct {
	Dir, Kernel, Root, Modules string
}

// BuildImage builds (or finds cached) the guest image of a variant
// ("client" or "storage"), with build-image.sh from dir.
func BuildImage(ctx context.Context, dir, variant string, log func(string, ...any)) (Image, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "build-image.sh"), variant)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Image{}, fmt.Errorf("build-image.sh %s: %v\n%s", variant, err, stderr.String())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		log("%s", s)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	d := strings.TrimSpace(lines[len(lines)-1])
	img := Image{Dir: d, Kernel: filepath.Join(d, "vmlinuz"), Root: filepath.Join(d, "root.img"),
		Modules: filepath.Join(d, "modules.tar")}
	for _, f := range []string{img.Kernel, img.Root, img.Modules} {
		if _, err := os.Stat(f); err != nil {
			return Image{}, fmt.Errorf("image %s: %w", d, err)
		}
	}
	return img, nil
}
