// Package units owns the value types of the configuration file that are
// not any one layer's: a byte count written as "64MiB". It imports no
// aluad package, so every section's owner can use it.
package units

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Size is a byte count that reads "1GiB", "512MiB", "4096" in YAML.
type Size int64

// UnmarshalYAML parses a size with an optional binary or decimal suffix.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if strings.TrimSpace(n.Value) == "0" {
		*s = 0 // unset: the section's default (as a written configuration has it)
		return nil
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = Size(v)
	return nil
}

// MarshalYAML writes the size as UnmarshalYAML reads it, in the largest
// binary unit that divides it ("256MiB").
func (s Size) MarshalYAML() (any, error) {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s != 0 && int64(s)%u.mult == 0 {
			return fmt.Sprintf("%d%s", int64(s)/u.mult, u.suffix), nil
		}
	}
	return strconv.FormatInt(int64(s), 10), nil
}

// ParseSize parses "1GiB", "100MB", "512k", "4096".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"k", 1 << 10}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 1GiB, 512MiB, 4096)", s)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}
