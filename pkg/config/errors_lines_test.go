package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The line of a check's error in multi-line files: the LUN entry's key,
// not a mapping that names the LUN; the second of two hosts of one name;
// the preferred: line that names a node that is not there.
func TestConfigErrorLines(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
	}{
		// "LUN 1: ..." is placed on the LAST .id/.lun of value 1: a
		// mapping of LUN 1 below the LUN's own definition wins.
		{"lun error with a mapping below", `luns:
  - id: 0
    size: 1MiB
  - id: 1
    size: 1MiB
    block_size: 1000
mappings:
  - lun: 1
`, 6},
		// the duplicate is the second h1, the heuristic takes the first.
		{"dup host", `hosts:
  - name: h1
    initiators: [iqn.2026-11.org.example:a]
  - name: h1
    initiators: [iqn.2026-11.org.example:b]
`, 4},
		// a quoted value taken from anywhere: the preferred owner "a" of
		// LUN 1 is wrong (no node a here), but the first scalar "a" is a
		// port's name.
		{"preferred owner quoted", `nodes:
  - name: n1
    ports: [{name: a, addr: "127.0.0.1:0"}]
luns:
  - id: 1
    size: 1MiB
    preferred: a
`, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(p, []byte(tc.yaml), 0o644))
			_, err := Load(p)
			require.Error(t, err)
			require.Contains(t, err.Error(), fmt.Sprintf("%s:%d: ", p, tc.line), "%v", err)
		})
	}
}
