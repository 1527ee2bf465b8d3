package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
	"github.com/aluad/aluad/pkg/daemon"
	"github.com/aluad/aluad/pkg/initiator"
)

// The cluster comparison: the same hosts, load and fault against the
// embedded array (every controller in one process, the interlink a
// simulated cost) and against controllers as processes (a witness and two
// `aluad controller` processes, each with its etcd member, the interlink
// over TCP). Each LUN has two streams: one on its preferred owner's port,
// one on the other node's (forwarded to the owner). Node a fails hard at
// KillAt (kill -9 of its process; the crash fault) and comes back at
// RestartAt; the LUNs fail back by themselves. The embedded node fails
// with the crash fault (its connections closed), as the kernel closes a
// killed process's sockets.

// ClusterOptions configure a comparison.
type ClusterOptions struct {
	// Binary is the aluad executable the processes run.
	Binary string
	// LUNs (default 4), Rate: commands per second per stream (default 100).
	LUNs int
	Rate int
	// KillAt, RestartAt and End are the schedule (defaults 3s, 9s, 16s).
	KillAt, RestartAt, End time.Duration
	// LeaseTTL is the controllers' lease (default 2s).
	LeaseTTL time.Duration
	Seed     uint64
	Out      io.Writer
}

// ClusterMode is one mode's figures.
type ClusterMode struct {
	Mode string `json:"mode"`
	// OwnerP50/P99 are the steady latencies on the owner's ports,
	// ForwardedP50/P99 on the other node's (the command crosses the
	// interlink), before the fault.
	OwnerP50, OwnerP99         time.Duration
	ForwardedP50, ForwardedP99 time.Duration
	// Failover is, over the failed node's LUNs, the longest time from the
	// fault to the LUN's first command completed on the survivor.
	Failover time.Duration
	// WorstFailover and WorstFailback are the longest gaps between two
	// completions of one stream through the failover and the failback.
	WorstFailover, WorstFailback time.Duration
	// Failback is how long after the restart the last LUN was back on its
	// preferred owner (as RTPG reports it).
	Failback time.Duration
	// Errors counts commands that failed (the stream retried them on its
	// other path); Lost counts acknowledged writes that read back wrong.
	// Aborts counts commands that outlived the streams' command timeout
	// and were ended at the target before their retry. Stale counts reads
	// during the run that returned anything but the block's last
	// acknowledged write.
	Errors, Acked, Lost, Aborts, Stale int
}

// ClusterResult is a comparison's two modes.
type ClusterResult struct {
	Embedded, Processes ClusterMode
}

func (o *ClusterOptions) defaults() {
	if o.LUNs <= 0 {
		o.LUNs = 4
	}
	if o.Rate <= 0 {
		o.Rate = 100
	}
	if o.KillAt <= 0 {
		o.KillAt, o.RestartAt, o.End = 3*time.Second, 9*time.Second, 16*time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
}

// RunCluster runs the comparison, the embedded array first.
func RunCluster(ctx context.Context, o ClusterOptions) (ClusterResult, error) {
	o.defaults()
	if o.Binary == "" {
		return ClusterResult{}, errors.New("lab: the cluster comparison needs the aluad binary")
	}
	var r ClusterResult
	var err error
	fmt.Fprintln(o.Out, "cluster comparison: the embedded array ...")
	if r.Embedded, err = runClusterMode(ctx, o, newEmbedded); err != nil {
		return r, fmt.Errorf("embedded: %w", err)
	}
	fmt.Fprintln(o.Out, "cluster comparison: controllers as processes ...")
	if r.Processes, err = runClusterMode(ctx, o, newProcesses); err != nil {
		return r, fmt.Errorf("processes: %w", err)
	}
	return r, nil
}

// clusterArray is one mode's array: where each node's port is now, and
// how the node fails and comes back.
type clusterArray interface {
	name() string
	portal(node string) (addr, target string, ok bool)
	kill(node string) error
	restart(node string) error
	close()
}

type sample struct {
	at  time.Time // completion
	lat time.Duration
}

// VerifiedStream is a verified host's I/O to one LUN (the cluster lab's,
// and the cluster seeds' in pkg/controller): QD-1 tagged writes and reads of its
// blocks on one primary node, failing over to the other as a Linux host
// does (a timed-out command ended at the target first), with the model of
// what was acknowledged that Verify reads back.
type VerifiedStream struct {
	lun     uint64
	primary string // node
	region  uint64 // first LBA of its blocks
	mu      sync.Mutex
	samples []sample
	errors  int
	acked   map[uint64]uint64 // lba -> tag
	// maybe: per LBA, the writes sent after its last acknowledged one
	// and never acknowledged (the one the run's end cut short): they may
	// have landed.
	maybe map[uint64][]uint64
	// aborts counts commands the stream ended at the target (ABORT TASK)
	// after its command timeout, before it tried the other path.
	aborts int
	// stale: reads during the run that returned anything but the block's
	// last acknowledged write (QD 1: no write of the stream is on its way
	// then, and one cut short was retried until acknowledged).
	stale  []string
	staleN int
}

func runClusterMode(ctx context.Context, o ClusterOptions, mk func(context.Context, ClusterOptions, string) (clusterArray, error)) (ClusterMode, error) {
	dir, err := os.MkdirTemp("", "aluad-cluster-lab")
	if err != nil {
		return ClusterMode{}, err
	}
	defer os.RemoveAll(dir)
	arr, err := mk(ctx, o, dir)
	if err != nil {
		return ClusterMode{}, err
	}
	defer arr.close()
	res := ClusterMode{Mode: arr.name()}
	// Sessions per node, redialled when they drop (one dial at a time per
	// node, none for 100 ms after one failed: a dead node's silent port
	// must not hold the streams on their other path).
	type nodeSess struct {
		s        *initiator.Session
		dialing  bool
		failedAt time.Time
	}
	var smu sync.Mutex
	sess := map[string]*nodeSess{"a": {}, "b": {}}
	get := func(node string) *initiator.Session {
		smu.Lock()
		ns := sess[node]
		if ns.s != nil {
			select {
			case <-ns.s.Done():
				ns.s = nil
			default:
				s := ns.s
				smu.Unlock()
				return s
			}
		}
		if ns.dialing || time.Since(ns.failedAt) < 100*time.Millisecond {
			smu.Unlock()
			return nil
		}
		ns.dialing = true
		smu.Unlock()
		var s *initiator.Session
		if addr, target, ok := arr.portal(node); ok {
			s, _ = initiator.Dial(ctx, initiator.Config{Addr: addr, Target: target, InitiatorName: labIQN("c1"),
				DialTimeout: 500 * time.Millisecond, NopInterval: 500 * time.Millisecond, NopTimeout: time.Second})
		}
		smu.Lock()
		defer smu.Unlock()
		ns.dialing = false
		if s == nil {
			ns.failedAt = time.Now()
		}
		ns.s = s
		return s
	}
	defer func() {
		smu.Lock()
		for _, ns := range sess {
			if ns.s != nil {
				ns.s.Close()
			}
		}
		smu.Unlock()
	}()
	other := map[string]string{"a": "b", "b": "a"}
	// The schedule starts once every LUN answers on its preferred owner's
	// port (the controllers' start-up, etcd's elections included, is not
	// the measurement).
	for i := 0; i < o.LUNs; i++ {
		pref := []string{"a", "b"}[i%2]
		err := Retry(60*time.Second, func() error {
			s := get(pref)
			if s == nil {
				return fmt.Errorf("no session to node %s", pref)
			}
			_, err := s.Read16(ctx, uint64(i), 0, 8, 512)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("LUN %d never answered on node %s: %w", i, pref, err)
		}
	}
	var streams []*VerifiedStream
	for i := 0; i < o.LUNs; i++ {
		pref := "a"
		if i%2 == 1 {
			pref = "b"
		}
		for j, node := range []string{pref, other[pref]} {
			streams = append(streams, NewVerifiedStream(uint64(i), node, uint64(j)*2048))
		}
	}
	t0 := time.Now()
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for k, st := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.Run(rctx, get, other, o.Rate, o.Seed+uint64(k))
		}()
	}
	fail := func(err error) (ClusterMode, error) {
		stop()
		wg.Wait()
		return res, err
	}
	if !sleepUntil(ctx, t0.Add(o.KillAt)) {
		return fail(ctx.Err())
	}
	killed := time.Now()
	fmt.Fprintf(o.Out, "  %s: node a fails\n", arr.name())
	if err := arr.kill("a"); err != nil {
		return fail(err)
	}
	if !sleepUntil(ctx, t0.Add(o.RestartAt)) {
		return fail(ctx.Err())
	}
	restarted := time.Now()
	fmt.Fprintf(o.Out, "  %s: node a comes back\n", arr.name())
	if err := arr.restart("a"); err != nil {
		return fail(err)
	}
	// The failback: RTPG on b's session until every LUN preferring a is
	// active/optimized on a's group again.
	back := time.Duration(0)
	for back == 0 && time.Now().Before(t0.Add(o.End+10*time.Second)) {
		if s := get("b"); s != nil {
			all := true
			for i := 0; i < o.LUNs; i += 2 {
				if g, err := AOGroup(ctx, s, uint64(i)); err != nil || g != 1 {
					all = false
					break
				}
			}
			if all {
				back = time.Since(restarted)
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if back == 0 {
		return fail(errors.New("the LUNs never failed back"))
	}
	res.Failback = back
	sleepUntil(ctx, t0.Add(o.End))
	stop()
	wg.Wait()

	var own, fwd []time.Duration
	for _, st := range streams {
		pref := "a"
		if st.lun%2 == 1 {
			pref = "b"
		}
		res.Errors += st.errors
		res.Aborts += st.aborts
		for i, s := range st.samples {
			if s.at.Before(killed) && s.at.After(t0.Add(time.Second)) {
				if st.primary == pref {
					own = append(own, s.lat)
				} else {
					fwd = append(fwd, s.lat)
				}
			}
			if i == 0 {
				continue
			}
			gap := s.at.Sub(st.samples[i-1].at)
			prev := st.samples[i-1].at
			switch {
			case prev.Before(restarted) && s.at.After(killed):
				res.WorstFailover = max(res.WorstFailover, gap)
			case s.at.After(restarted):
				res.WorstFailback = max(res.WorstFailback, gap)
			}
		}
		if pref == "a" {
			for _, s := range st.samples {
				if s.at.After(killed) && s.at.Add(-s.lat).After(killed) {
					res.Failover = max(res.Failover, s.at.Sub(killed))
					break
				}
			}
		}
	}
	res.OwnerP50, res.OwnerP99 = quantile(own, 0.5), quantile(own, 0.99)
	res.ForwardedP50, res.ForwardedP99 = quantile(fwd, 0.5), quantile(fwd, 0.99)
	// Every acknowledged write reads back, through b: its data, or that of
	// a later write to the block that was sent but never acknowledged.
	s := get("b")
	if s == nil {
		return res, errors.New("no session to node b for the read-back")
	}
	for _, st := range streams {
		acked, lost, err := st.Verify(ctx, s)
		res.Acked += acked
		res.Lost += len(lost)
		n, _ := st.Stale()
		res.Stale += n
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// NewStream is a stream of LUN lun from primary, on the 256 blocks of 4
// KiB from LBA region.
func NewVerifiedStream(lun uint64, primary string, region uint64) *VerifiedStream {
	return &VerifiedStream{lun: lun, primary: primary, region: region, acked: map[uint64]uint64{}, maybe: map[uint64][]uint64{}}
}

// Errors counts the commands that failed (retried on the other node).
func (st *VerifiedStream) Errors() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.errors
}

// Verify reads back, through s, every block the stream wrote after Run
// returned: each must hold its last acknowledged write, or a later one
// that was sent and never acknowledged. It returns how many it checked
// and the LBAs that hold anything else.
func (st *VerifiedStream) Verify(ctx context.Context, s *initiator.Session) (checked int, lost []uint64, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	buf := make([]byte, 4096)
	lbas := make([]uint64, 0, len(st.acked))
	for lba := range st.acked {
		lbas = append(lbas, lba)
	}
	sort.Slice(lbas, func(i, j int) bool { return lbas[i] < lbas[j] })
	for _, lba := range lbas {
		checked++
		var got []byte
		err := Retry(5*time.Second, func() (err error) { got, err = s.Read16(ctx, st.lun, lba, 8, 512); return err })
		if err != nil {
			return checked, lost, fmt.Errorf("read-back of LUN %d LBA %d: %w", st.lun, lba, err)
		}
		if !holdsOneOf(got, buf, st.acked[lba], st.maybe[lba]) {
			lost = append(lost, lba)
		}
	}
	return checked, lost, nil
}

func quantile(v []time.Duration, q float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

// Retry runs f until it succeeds, as a host retries (a unit attention,
// TRANSITIONING, a failover's errors), for at most limit.
func Retry(limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamCmdTimeout is the streams' command timeout; a command that
// outlives it is ended at the target (ABORT TASK, escalating), each step
// given streamTMFTimeout, before it is retried on the other path, as a
// host's SCSI error handler does. Without that, the late command could
// land after its retry, and after a newer write, acknowledged there.
const (
	streamCmdTimeout = 3 * time.Second
	streamTMFTimeout = time.Second
)

// Run issues QD-1 commands at rate, alternating writes (tagged) and
// reads of the stream's blocks; a failed command is retried on the other
// path, and the stream returns to its primary path once it is back. A
// write the run's end cuts short is kept as one that may have landed.
func (st *VerifiedStream) Run(ctx context.Context, get func(string) *initiator.Session, other map[string]string, rate int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xc1))
	iv := time.Second / time.Duration(rate)
	next := time.Now()
	buf := make([]byte, 4096)
	tag := seed << 32
	for n := 0; ; n++ {
		next = next.Add(iv)
		if !sleepUntil(ctx, next) {
			return
		}
		lba := st.region + uint64(rng.IntN(256))*8
		write := n%2 == 0
		if write {
			tag++
			tagBlock(buf, tag)
		}
		start := time.Now()
		for node := st.primary; ctx.Err() == nil; node = other[node] {
			s := get(node)
			if s == nil {
				st.mu.Lock()
				st.errors++
				st.mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, streamCmdTimeout)
			var err error
			if write {
				err = s.Write16(cctx, st.lun, lba, buf, 512, false)
			} else {
				var got []byte
				if got, err = s.Read16(cctx, st.lun, lba, 8, 512); err == nil {
					st.checkRead(lba, got, node)
				}
			}
			cancel()
			if err == nil {
				now := time.Now()
				st.mu.Lock()
				st.samples = append(st.samples, sample{at: now, lat: now.Sub(start)})
				if write {
					st.acked[lba] = tag
					delete(st.maybe, lba)
				}
				st.mu.Unlock()
				break
			}
			if write && ctx.Err() != nil {
				st.mu.Lock()
				st.maybe[lba] = append(st.maybe[lba], tag)
				st.mu.Unlock()
				break
			}
			var ab *initiator.Abandoned
			if errors.As(err, &ab) {
				// Timed out: ended at the target before the retry (a
				// failure drops the session; the next get redials).
				s.EndTask(ctx, ab, streamTMFTimeout)
				st.mu.Lock()
				st.aborts++
				st.mu.Unlock()
			}
			var ce *initiator.CheckError
			if errors.As(err, &ce) {
				if key, _, _ := ce.KeyASC(); key == 0x6 {
					node = other[node] // a unit attention: retry on the same path
					continue
				}
			}
			st.mu.Lock()
			st.errors++
			st.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// checkRead records a read during the run that returned anything but
// the block's last acknowledged write.
func (st *VerifiedStream) checkRead(lba uint64, got []byte, node string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	tag, ok := st.acked[lba]
	if !ok {
		return // never written: whatever the LUN held
	}
	want := make([]byte, len(got))
	tagBlock(want, tag)
	if bytes.Equal(got, want) {
		return
	}
	if st.staleN++; len(st.stale) < 16 {
		st.stale = append(st.stale, fmt.Sprintf("LUN %d LBA %d read through %s: not its last acknowledged write (tag %#x)", st.lun, lba, node, tag))
	}
}

// Stale counts the reads during the run that returned anything but the
// block's last acknowledged write, and describes the first 16.
func (st *VerifiedStream) Stale() (int, []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.staleN, append([]string(nil), st.stale...)
}

// AOGroup asks RTPG which target port group is active/optimized for lun.
func AOGroup(ctx context.Context, s *initiator.Session, lun uint64) (uint16, error) {
	cdb := make([]byte, 12)
	cdb[0], cdb[1] = 0xa3, 0x0a
	binary.BigEndian.PutUint32(cdb[6:], 1024)
	r, err := s.Execute(ctx, lun, cdb, nil, 1024)
	if err != nil {
		return 0, err
	}
	if r.Status != 0 {
		return 0, fmt.Errorf("RTPG: status %#x", r.Status)
	}
	d := r.Data
	for i := 4; i+8 <= len(d); i += 8 + 4*int(d[i+7]) {
		if d[i]&0x0f == 0 {
			return binary.BigEndian.Uint16(d[i+2:]), nil
		}
	}
	return 0, errors.New("RTPG: no active/optimized group")
}

// embedded is the one-process array.
type embedded struct {
	d *daemon.Daemon
}

func clusterArrayConfig(dir string, luns int) config.Config {
	cfg := config.Loopback(filepath.Join(dir, "data"), 16<<20)
	for i := range cfg.Nodes {
		cfg.Nodes[i].Ports = cfg.Nodes[i].Ports[:1]
	}
	cfg.LUNs = cfg.LUNs[:luns]
	for i := range cfg.LUNs {
		cfg.LUNs[i].Preferred = []string{"a", "b"}[i%2]
	}
	// The core's timings, in both modes (the controllers' leader runs the
	// same core): a failover on the next tick, a failback once the hosts
	// have reached the node again for 2 s.
	cfg.Ownership.Tick = 250 * time.Millisecond
	cfg.Ownership.FailbackWindow = 2 * time.Second
	cfg.Ownership.DiscoveryWindow = time.Second
	cfg.Ownership.FailbackCooldown = 2 * time.Second
	cfg.Ownership.Cooldown = 2 * time.Second
	cfg.Ownership.PlanInterval = time.Hour
	return cfg
}

func newEmbedded(_ context.Context, o ClusterOptions, dir string) (clusterArray, error) {
	cfg := clusterArrayConfig(dir, o.LUNs)
	d, err := daemon.Start(cfg, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StatsInterval: -1})
	if err != nil {
		return nil, err
	}
	return &embedded{d: d}, nil
}

func (e *embedded) name() string { return "embedded" }

func (e *embedded) portal(node string) (string, string, bool) {
	for _, p := range e.d.Portals() {
		if p.Node == node {
			return p.Addr, p.Target, true
		}
	}
	return "", "", false
}

func (e *embedded) kill(node string) error {
	// kill -9 of a process: the kernel closes its sockets, as the crash
	// fault does (power loss would leave the hosts' connections silent).
	_, err := e.d.Inject(api.Fault{Kind: api.FaultCrash, Node: node})
	return err
}

func (e *embedded) restart(node string) error {
	_, err := e.d.Inject(api.Fault{Kind: api.FaultRestart, Node: node})
	return err
}

func (e *embedded) close() { e.d.Stop(time.Second) }

// processes is a witness and one `aluad controller` process per node,
// each with its etcd member.
type processes struct {
	bin   string
	procs map[string]*labProc
}

// labProc is one aluad process and the portals it printed.
type labProc struct {
	args   []string
	cmd    *exec.Cmd
	log    bytes.Buffer
	lmu    sync.Mutex
	mu     sync.Mutex
	portal [2]string
}

func (p *labProc) Write(b []byte) (int, error) {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	return p.log.Write(b)
}

func (p *labProc) logText() string {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	return p.log.String()
}

func (p *labProc) start(bin string) error {
	p.mu.Lock()
	p.portal = [2]string{}
	p.mu.Unlock()
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.Stderr = p
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 5 && f[0] == "portal" {
				p.mu.Lock()
				if p.portal[0] == "" {
					p.portal = [2]string{f[3], f[4]}
				}
				p.mu.Unlock()
			}
		}
	}()
	return nil
}

func (p *labProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil && p.cmd.ProcessState == nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
	}
}

func freeLoopback() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func newProcesses(ctx context.Context, o ClusterOptions, dir string) (clusterArray, error) {
	addrs := map[string]string{}
	for _, k := range []string{"a.c", "a.p", "b.c", "b.p", "w.c", "w.p", "a.i", "b.i"} {
		a, err := freeLoopback()
		if err != nil {
			return nil, err
		}
		addrs[k] = a
	}
	cfg := clusterArrayConfig(dir, o.LUNs)
	var yaml strings.Builder
	fmt.Fprintf(&yaml, "array_id: cluster-lab\ndata: %s\nnodes:\n", cfg.Data)
	for _, n := range cfg.Nodes {
		fmt.Fprintf(&yaml, "  - name: %s\n    ports: [{name: %s, addr: \"127.0.0.1:0\"}]\n", n.Name, n.Ports[0].Name)
	}
	yaml.WriteString("luns:\n")
	for _, l := range cfg.LUNs {
		fmt.Fprintf(&yaml, "  - {id: %d, size: 16MiB, preferred: %s}\n", l.ID, l.Preferred)
	}
	oc := cfg.Ownership
	fmt.Fprintf(&yaml, "ownership: {tick: %s, failback_window: %s, discovery_window: %s, failback_cooldown: %s, cooldown: %s, plan_interval: %s}\n",
		oc.Tick, oc.FailbackWindow, oc.DiscoveryWindow, oc.FailbackCooldown, oc.Cooldown, oc.PlanInterval)
	fmt.Fprintf(&yaml, "cluster:\n  etcd: [http://%s, http://%s, http://%s]\n  interlink: {a: \"%s\", b: \"%s\"}\n  lease_ttl: %s\n  failback_after: 2s\n",
		addrs["a.c"], addrs["b.c"], addrs["w.c"], addrs["a.i"], addrs["b.i"], o.LeaseTTL)
	path := filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(path, []byte(yaml.String()), 0o644); err != nil {
		return nil, err
	}
	members := fmt.Sprintf("a=http://%s,b=http://%s,w=http://%s", addrs["a.p"], addrs["b.p"], addrs["w.p"])
	p := &processes{bin: o.Binary, procs: map[string]*labProc{
		"w": {args: []string{"witness", "--name", "w", "--data", filepath.Join(dir, "w"), "--client-url", "http://" + addrs["w.c"],
			"--peer-url", "http://" + addrs["w.p"], "--cluster", members}},
	}}
	for _, n := range []string{"a", "b"} {
		p.procs[n] = &labProc{args: []string{"controller", "--config", path, "--node", n, "--etcd-data", filepath.Join(dir, n),
			"--etcd-client-url", "http://" + addrs[n+".c"], "--etcd-peer-url", "http://" + addrs[n+".p"], "--etcd-cluster", members,
			"--nop-interval", "0"}}
	}
	for _, k := range []string{"w", "a", "b"} {
		if err := p.procs[k].start(o.Binary); err != nil {
			p.close()
			return nil, err
		}
	}
	for _, n := range []string{"a", "b"} {
		if err := p.waitPortal(ctx, n, 90*time.Second); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

func (p *processes) waitPortal(ctx context.Context, node string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, _, ok := p.portal(node); ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("controller %s never served: %s", node, p.procs[node].logText())
}

func (p *processes) name() string { return "processes" }

func (p *processes) portal(node string) (string, string, bool) {
	lp := p.procs[node]
	lp.mu.Lock()
	defer lp.mu.Unlock()
	return lp.portal[0], lp.portal[1], lp.portal[0] != ""
}

func (p *processes) kill(node string) error {
	p.procs[node].kill()
	return nil
}

func (p *processes) restart(node string) error {
	return p.procs[node].start(p.bin)
}

func (p *processes) close() {
	for _, lp := range p.procs {
		lp.kill()
	}
}
