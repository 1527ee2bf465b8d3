package controller

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/cluster"
	"github.com/aluad/aluad/pkg/fence"
)

// slowFence fences as the lab does, after a delay, and counts its runs.
type slowFence struct {
	*InProcess
	delay time.Duration
	runs  atomic.Int64
}

func (f *slowFence) Fence(ctx context.Context, node string, id fence.Identity) error {
	f.runs.Add(1)
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return f.InProcess.Fence(ctx, node, id)
}

// A fence slower than two lease TTLs (a power fence takes seconds): the
// leader runs it once in the background, keeps deciding meanwhile, and
// takes the LUNs over once it is done.
func TestSlowFenceRunsOnce(t *testing.T) {
	lab := newLab(t)
	slow := &slowFence{InProcess: lab.fence, delay: 3 * lab.cfg.Cluster.LeaseTTL}
	start := func(node string) *Controller {
		c, err := Start(Options{Config: lab.cfg, Node: node, JoinTimeout: 20 * time.Second, Daemon: quiet(), Fencer: slow})
		require.NoError(t, err)
		lab.fence.Add(c)
		return c
	}
	a, b := start("a"), start("b")
	defer b.Stop(time.Second)
	require.Eventually(t, func() bool { return owners(b) == owners(a) && a.Serves(0) }, 20*time.Second, 10*time.Millisecond)
	killed := time.Now()
	a.Kill()
	require.Eventually(t, func() bool { return b.Serves(0) }, 30*time.Second, 10*time.Millisecond, "b took LUN 0 over")
	took := time.Since(killed)
	require.GreaterOrEqual(t, took, slow.delay, "not before the fence ended")
	require.Equal(t, int64(1), slow.runs.Load(), "one fence for the incarnation, not one per round")
}

// A controller restarted on the machine its last process ran on fences
// that process by its pidfd, never with the fence agent: an agent powers
// the machine off (the one it runs on). With the agent failing, the join
// still succeeds; the planted identity is of a process that has exited.
func TestRestartFencesItsOwnProcessLocally(t *testing.T) {
	lab := newLab(t)
	cfg := lab.cfg
	marker := filepath.Join(t.TempDir(), "agent-ran")
	cfg.Cluster.Fencing = cluster.FenceCommand
	cfg.Cluster.FenceCommand = []string{"sh", "-c", "touch " + marker + "; exit 1"}
	// The last process of node a: this machine, exited without leaving.
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	id, err := fence.Self()
	require.NoError(t, err)
	id.PID, id.Instance = dead.Process.Pid, "earlier"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gone, err := cluster.Dial(cfg.Cluster.Etcd)
	require.NoError(t, err)
	_, err = cluster.NewStore(gone.Client, cfg.ArrayID, nil).Join(ctx, cluster.Info{Node: "a", Process: id}, time.Second)
	require.NoError(t, err)
	gone.Close() // it dies: the lease runs out, the record stays
	cli, err := cluster.Dial(cfg.Cluster.Etcd)
	require.NoError(t, err)
	defer cli.Close()
	st := cluster.NewStore(cli.Client, cfg.ArrayID, nil)
	require.Eventually(t, func() bool {
		_, ok, member, err := st.Incarnation(ctx, "a")
		return err == nil && ok && !member
	}, 10*time.Second, 20*time.Millisecond)

	a, err := Start(Options{Config: cfg, Node: "a", JoinTimeout: 20 * time.Second, Daemon: quiet()})
	require.NoError(t, err, "a joins after fencing its own last process")
	defer a.Stop(time.Second)
	_, err = os.Stat(marker)
	require.ErrorIs(t, err, os.ErrNotExist, "the fence agent was not run for this machine's own process")
	inc, ok, member, err := st.Incarnation(ctx, "a")
	require.NoError(t, err)
	require.True(t, ok && member && inc.Process.Instance == a.self.Instance, "a's record is the new process's")
}
