package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/initiator"
	"github.com/aluad/aluad/pkg/lab"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// proc is one aluad process of a test.
type proc struct {
	args   []string
	cmd    *exec.Cmd
	log    *syncBuffer
	mu     sync.Mutex
	portal map[string][2]string // port -> addr, target
}

func (p *proc) start(t *testing.T, bin string) {
	t.Helper()
	p.log = &syncBuffer{}
	p.mu.Lock()
	p.portal = map[string][2]string{}
	p.mu.Unlock()
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.Stderr = p.log
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 5 && f[0] == "portal" {
				p.mu.Lock()
				p.portal[f[2]] = [2]string{f[3], f[4]}
				p.mu.Unlock()
			}
		}
		io.Copy(io.Discard, out)
	}()
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

// portalOf waits for the process to print its first portal.
func (p *proc) portalOf(t *testing.T) (addr, target string) {
	t.Helper()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.portal) > 0
	}, 90*time.Second, 50*time.Millisecond, "the controller never served: %s", p.log)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, v := range p.portal {
		return v[0], v[1]
	}
	return "", ""
}

// writeClusterConfig writes the configuration two controllers a and b
// (ports a0 and b0 on loopback) share: the LUNs' YAML lines, etcd's
// client URLs, the interlink addresses, a 2 s lease and short ownership
// windows; extra adds lines to the cluster section. It returns path.
func writeClusterConfig(t *testing.T, path, id, data, luns string, etcd []string, il [2]string, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`array_id: %s
target: iqn.2026-11.org.aluad.test:array
data: %s
nodes:
  - name: a
    ports: [{name: a0, addr: "127.0.0.1:0"}]
  - name: b
    ports: [{name: b0, addr: "127.0.0.1:0"}]
luns:
%scluster:
  etcd: [%s]
  interlink: {a: "%s", b: "%s"}
  lease_ttl: 2s
  failback_after: 1s
%sownership: {tick: 100ms, failback_window: 1s, failback_cooldown: 1s, discovery_window: 1s, plan_interval: 1h}
`, id, data, luns, strings.Join(etcd, ", "), il[0], il[1], extra)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
	return path
}

// A witness and two controllers, each its own process with its own etcd
// member, on loopback. A host writes on both controllers' ports; kill -9
// of controller a; b serves a's LUNs with every acknowledged write and
// reports 2A/06; a restarted rejoins and its LUNs fail back.
func TestControllerProcesses(t *testing.T) {
	bin := buildAluad(t)
	dir := t.TempDir()
	url := func() string { return fmt.Sprintf("http://127.0.0.1:%d", loopbackPort(t)) }
	type member struct{ name, client, peer string }
	ms := []member{{"a", url(), url()}, {"b", url(), url()}, {"w", url(), url()}}
	var peers, clients []string
	for _, m := range ms {
		peers, clients = append(peers, m.name+"="+m.peer), append(clients, m.client)
	}
	il := map[string]string{"a": fmt.Sprintf("127.0.0.1:%d", loopbackPort(t)), "b": fmt.Sprintf("127.0.0.1:%d", loopbackPort(t))}
	cfgPath := writeClusterConfig(t, filepath.Join(dir, "cluster.yaml"), "proc-test", filepath.Join(dir, "data"),
		"  - {id: 0, size: 4MiB, preferred: a}\n  - {id: 1, size: 4MiB, preferred: b}\n  - {id: 2, size: 4MiB, preferred: a}\n",
		clients, [2]string{il["a"], il["b"]}, "")
	cluster := strings.Join(peers, ",")
	w := &proc{args: []string{"witness", "--name", "w", "--data", filepath.Join(dir, "w"), "--client-url", ms[2].client,
		"--peer-url", ms[2].peer, "--cluster", cluster}}
	ctl := func(i int) *proc {
		m := ms[i]
		return &proc{args: []string{"controller", "--config", cfgPath, "--node", m.name, "--etcd-data", filepath.Join(dir, m.name),
			"--etcd-client-url", m.client, "--etcd-peer-url", m.peer, "--etcd-cluster", cluster, "--nop-interval", "0"}}
	}
	a, b := ctl(0), ctl(1)
	for _, p := range []*proc{w, a, b} {
		p.start(t, bin)
		defer p.kill()
	}
	ctx := context.Background()
	login := func(p *proc, name string) *initiator.Session {
		addr, target := p.portalOf(t)
		s, err := initiator.Dial(ctx, initiator.Config{Addr: addr, Target: target,
			InitiatorName: "iqn.2026-11.org.aluad.test:" + name, DialTimeout: 2 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}
	onA, onB := login(a, "h1"), login(b, "h1")
	acked := map[[2]uint64]uint64{}
	tag := uint64(0)
	write := func(s *initiator.Session, lun, lba uint64) {
		tag++
		data := lab.Tagged(tag)
		require.NoError(t, lab.Retry(10*time.Second, func() error { return s.Write16(ctx, lun, lba, data, 512, false) }),
			"a: %s\nb: %s", a.log, b.log)
		acked[[2]uint64{lun, lba}] = tag
	}
	verify := func(s *initiator.Session, what string) {
		for k, tg := range acked {
			var got []byte
			require.NoError(t, lab.Retry(10*time.Second, func() (err error) { got, err = s.Read16(ctx, k[0], k[1], 8, 512); return err }))
			require.True(t, bytes.Equal(got, lab.Tagged(tg)), "%s: LUN %d LBA %d", what, k[0], k[1])
		}
	}
	for lun := uint64(0); lun < 3; lun++ {
		for lba := uint64(0); lba < 64; lba += 8 {
			write(onA, lun, lba)
			write(onB, lun, lba)
		}
	}
	verify(onA, "through a")
	verify(onB, "through b")
	for _, lun := range []uint64{0, 2} { // dirty on a, copies on b, at the kill
		for lba := uint64(64); lba < 128; lba += 8 {
			write(onA, lun, lba)
		}
	}

	killed := time.Now()
	a.kill()
	sawUA := map[uint64]bool{}
	for lun := uint64(0); lun < 3; lun++ {
		require.NoError(t, lab.Retry(20*time.Second, func() error {
			seen, err := onB.ClearUA(ctx, lun, 8)
			for _, s := range seen {
				sawUA[lun] = sawUA[lun] || s == [2]byte{0x2a, 0x06}
			}
			if err != nil {
				return err
			}
			_, err = onB.Read16(ctx, lun, 0, 8, 512)
			return err
		}), "b: %s", b.log)
	}
	t.Logf("kill -9 of a: b served every LUN %v later (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))
	verify(onB, "after kill -9 of a")
	for _, lun := range []uint64{0, 2} {
		g, err := lab.AOGroup(ctx, onB, lun)
		require.NoError(t, err)
		require.Equal(t, uint16(2), g, "LUN %d is active/optimized on b's group", lun)
	}
	for lun := uint64(0); lun < 3; lun++ {
		require.True(t, sawUA[lun], "the host saw 2A/06 on b for LUN %d", lun)
	}
	require.Regexp(t, `owner installed.*lun=0 from=a to=b cause=failover replayed=[1-9]`, b.log.String(),
		"b took LUN 0 over, replaying mirrored pages")

	// a restarts. The leader's core fails its LUNs back only once the
	// host reaches a again: not while it has no path there (a partial
	// recovery), then once it logs in and discovers the path.
	a2 := ctl(0)
	a2.start(t, bin)
	defer a2.kill()
	require.Eventually(t, func() bool {
		return strings.Contains(b.log.String(), "interlink up") &&
			strings.Count(b.log.String(), "interlink up") >= 2
	}, 30*time.Second, 20*time.Millisecond, "b: %s", b.log)
	time.Sleep(3 * time.Second) // three failback windows
	for _, lun := range []uint64{0, 2} {
		var g uint16
		require.NoError(t, lab.Retry(5*time.Second, func() (err error) {
			onB.ClearUA(ctx, lun, 8)
			g, err = lab.AOGroup(ctx, onB, lun)
			return err
		}))
		require.Equal(t, uint16(2), g, "LUN %d failed back while the host had no path to a", lun)
	}
	onA2 := login(a2, "h1")
	for _, lun := range []uint64{0, 2} {
		require.NoError(t, lab.Retry(30*time.Second, func() error {
			lab.AOGroup(ctx, onA2, lun) // the host discovers the path (RTPG)
			g, err := lab.AOGroup(ctx, onB, lun)
			if err == nil && g != 1 {
				err = fmt.Errorf("LUN %d still active/optimized on group %d", lun, g)
			}
			return err
		}), "a's LUNs fail back: a: %s\nb: %s", a2.log, b.log)
	}
	verify(onA2, "after the failback")
	verify(onB, "through b after the failback")

	// One etcd member of three lost (the witness): nothing changes.
	w.kill()
	for lun := uint64(0); lun < 3; lun++ {
		for lba := uint64(128); lba < 160; lba += 8 {
			write(onA2, lun, lba)
			write(onB, lun, lba)
		}
	}
	verify(onA2, "with the witness down")
	// Two lost (the witness, and b with its member): a cannot renew its
	// lease, so it stops serving as owner at its deadline, and no
	// ownership changes. It serves again once the quorum is back, and
	// then takes b's LUNs over.
	b.kill()
	require.NoError(t, lab.Retry(10*time.Second, func() error {
		if _, err := onA2.Read16(ctx, 0, 0, 8, 512); err == nil {
			return errors.New("a still serves LUN 0 without a quorum")
		}
		return nil
	}), "a: %s", a2.log)
	w.start(t, bin)
	for lun := uint64(0); lun < 3; lun++ {
		require.NoError(t, lab.Retry(60*time.Second, func() error { _, err := onA2.Read16(ctx, lun, 0, 8, 512); return err }),
			"a serves every LUN once the quorum is back: %s", a2.log)
	}
	verify(onA2, "after the quorum came back")
}

// The lab's comparison of the embedded array with controllers as
// processes, on a short schedule: both modes fail over and back with
// every acknowledged write read back.
func TestClusterLab(t *testing.T) {
	bin := buildAluad(t)
	r, err := lab.RunCluster(context.Background(), lab.ClusterOptions{Binary: bin, LUNs: 2, Rate: 50,
		KillAt: 2 * time.Second, RestartAt: 5 * time.Second, End: 9 * time.Second})
	require.NoError(t, err)
	for _, m := range []lab.ClusterMode{r.Embedded, r.Processes} {
		t.Logf("%s: %d acknowledged writes read back, %d lost, %d commands retried, %d aborted after a timeout",
			m.Mode, m.Acked, m.Lost, m.Errors, m.Aborts)
		require.Positive(t, m.Acked, m.Mode)
		require.Zero(t, m.Lost, "%s: acknowledged writes lost", m.Mode)
		require.Positive(t, m.Failover, "%s: the failed node's LUNs were served again", m.Mode)
		require.Positive(t, m.Failback, "%s: the LUNs failed back", m.Mode)
		require.Positive(t, m.ForwardedP50, "%s: commands on the other node's port completed", m.Mode)
	}
}
