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
	Release                    string
}

// Releases are the Debian releases a guest can run, oldest first:
// build-image.sh builds each from the mirror apt uses.
var Releases = []string{"bullseye", "bookworm", "trixie", "sid"}

// DefaultRelease is the guests' release when none is named.
const DefaultRelease = "bookworm"

// ValidRelease says whether r is one of Releases.
func ValidRelease(r string) error {
	for _, x := range Releases {
		if x == r {
			return nil
		}
	}
	return fmt.Errorf("no release %q (have %s)", r, strings.Join(Releases, ", "))
}

// BuildImage builds (or finds cached) the guest image of a variant
// ("client" or "storage") and Debian release ("": DefaultRelease), with
// build-image.sh from dir.
func BuildImage(ctx context.Context, dir, variant, release string, log func(string, ...any)) (Image, error) {
	if release == "" {
		release = DefaultRelease
	}
	if err := ValidRelease(release); err != nil {
		return Image{}, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "build-image.sh"), variant, release)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Image{}, fmt.Errorf("build-image.sh %s %s: %v\n%s", variant, release, err, stderr.String())
	}
	if s := strings.TrimSpace(stderr.String()); s != "" {
		log("%s", s)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	d := strings.TrimSpace(lines[len(lines)-1])
	img := Image{Dir: d, Kernel: filepath.Join(d, "vmlinuz"), Root: filepath.Join(d, "root.img"),
		Modules: filepath.Join(d, "modules.tar"), Release: release}
	for _, f := range []string{img.Kernel, img.Root, img.Modules} {
		if _, err := os.Stat(f); err != nil {
			return Image{}, fmt.Errorf("image %s: %w", d, err)
		}
	}
	return img, nil
}
