//go:build !race && linux

package clustersim

import (
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// mappedFrom counts this process's memory mappings of files under dir.
func mappedFrom(t *testing.T, dir string) int {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), dir)
}

// A controller killed in the process leaves no mapping of its LUN files
// behind, as a process's exit does: the seeds kill thousands, and every
// incarnation's mappings once stayed until the process hit its limit.
func TestKillUnmapsTheLUNFiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bb := NewBubble(t)
		dir := bb.Cfg.Data
		b := bb.Start("b")
		for range 3 {
			a := bb.Start("a")
			Until(t, 10*time.Second, func() bool { return a.Interlinked("b") }, "the interlink")
			a.MarkGone()
			a.Kill()
		}
		b.Stop(time.Second)
		require.Zero(t, mappedFrom(t, dir), "every controller's LUN files unmapped")
	})
}
