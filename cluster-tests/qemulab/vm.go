package qemulab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aluad/aluad/cluster-tests/agentproto"
)

// guestModules are loaded by the agent at boot, before the network is
// configured: NICs, the agent channel, and the storage stack.
var guestModules = []string{"virtio_net", "virtio_scsi", "sd_mod", "sg", "scsi_dh_alua", "iscsi_tcp",
	"dm_multipath", "dm_round_robin", "dm_service_time", "dm_queue_length"}

// VMSpec describes one guest.
type VMSpec struct {
	Name  string
	Index int // 0.. : picks the guest's lab addresses
	Mem   int // MiB
	CPUs  int
	// ISCSIDrives: QEMU's own iSCSI initiator (libiscsi) attaches these
	// iscsi:// URLs as scsi-block devices, so the guest's SCSI stack sees
	// the target's real INQUIRY/RTPG through QEMU.
	ISCSIDrives []string
	// InitiatorName for QEMU's libiscsi sessions.
	InitiatorName string
	// Modules replace the default module list (the storage guest loads
	// LIO's instead of the initiator's).
	Modules []string
	// Addr overrides the guest's address on each fabric.
	Addr []string
	// Initrd overrides the lab's initrd.
	Initrd string
}

// VM is a running guest.
type VM struct {
	Spec    VMSpec
	Console string // console log file
	cmd     *exec.Cmd
	done    chan error

	mu      sync.Mutex
	conn    net.Conn
	enc     *json.Encoder
	nextID  int64
	pending map[int64]chan reply
	Booted  time.Duration // QEMU start to the agent's first answer
}

type (
	request = agentproto.Request
	reply   = agentproto.Reply
)

// Taps returns the tap names of a guest, one per fabric.
func (s VMSpec) Taps() []string {
	var t []string
	for f := range Fabrics {
		t = append(t, fmt.Sprintf("%s-%c", s.Name, 'a'+f))
	}
	return t
}

// StartVM boots a guest in the lab network. dir holds its sockets and logs.
func StartVM(ctx context.Context, n *Net, img Image, initrd, dir string, s VMSpec) (*VM, error) {
	if s.Mem == 0 {
		s.Mem = 768
	}
	if s.CPUs == 0 {
		s.CPUs = 1
	}
	sock := filepath.Join(dir, s.Name+".agent")
	console := filepath.Join(dir, s.Name+".console")
	_ = os.Remove(sock)
	appendLine := []string{"console=ttyS0", "panic=-1", "net.ifnames=0", "quiet", "loglevel=4",
		"aluad.name=" + s.Name}
	mods := guestModules
	if len(s.Modules) > 0 {
		mods = s.Modules
	}
	appendLine = append(appendLine, "aluad.modules="+strings.Join(mods, ","))
	if s.Initrd != "" {
		initrd = s.Initrd
	}
	args := []string{"-name", s.Name, "-accel", "tcg,thread=multi", "-cpu", "max", "-m", fmt.Sprint(s.Mem),
		"-smp", fmt.Sprint(s.CPUs), "-nographic", "-no-reboot", "-nodefaults",
		"-kernel", img.Kernel, "-initrd", initrd,
		"-drive", "file=" + img.Root + ",if=virtio,format=raw,snapshot=on,cache=unsafe",
		"-serial", "file:" + console,
		"-device", "virtio-serial-pci",
		"-chardev", "socket,id=agent,path=" + sock + ",server=on,wait=off",
		"-device", "virtserialport,chardev=agent,name=agent",
	}
	for f, tap := range s.Taps() {
		if err := n.Tap(tap, f); err != nil {
			return nil, err
		}
		addr := GuestAddr(s.Index, f)
		if f < len(s.Addr) {
			addr = s.Addr[f]
		}
		appendLine = append(appendLine, fmt.Sprintf("aluad.ip%d=%s/24", f, addr))
		args = append(args, "-netdev", fmt.Sprintf("tap,id=n%d,ifname=%s,script=no,downscript=no", f, tap),
			"-device", fmt.Sprintf("virtio-net-pci,netdev=n%d,mac=52:54:00:77:%02x:%02x", f, f+1, 100+s.Index))
	}
	if len(s.ISCSIDrives) > 0 {
		args = append(args, "-device", "virtio-scsi-pci,id=scsi0", "-iscsi", "initiator-name="+s.InitiatorName+",timeout=5")
		for i, u := range s.ISCSIDrives {
			args = append(args, "-drive", fmt.Sprintf("file=%s,if=none,id=is%d,format=raw,cache=none", u, i),
				"-device", fmt.Sprintf("scsi-block,drive=is%d,bus=scsi0.0,channel=0,scsi-id=%d,lun=0", i, i))
		}
	}
	args = append(args, "-append", strings.Join(appendLine, " "))
	cmd := n.Exec("qemu-system-x86_64", args...)
	logf, err := os.Create(filepath.Join(dir, s.Name+".qemu.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu (%s): %w", s.Name, err)
	}
	v := &VM{Spec: s, Console: console, cmd: cmd, done: make(chan error, 1), pending: map[int64]chan reply{}}
	go func() { v.done <- cmd.Wait(); logf.Close() }()
	if err := v.connect(ctx, sock); err != nil {
		v.Kill()
		return nil, fmt.Errorf("%s: %w (console: %s)", s.Name, err, tail(console, 15))
	}
	v.Booted = time.Since(start)
	return v, nil
}

// connect attaches to the agent socket and waits for the agent to answer.
func (v *VM) connect(ctx context.Context, sock string) error {
	deadline := time.Now().Add(4 * time.Minute)
	for {
		select {
		case err := <-v.done:
			return fmt.Errorf("qemu exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return errors.New("the guest agent did not answer within 4 minutes")
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		v.mu.Lock()
		v.conn, v.enc = c, json.NewEncoder(c)
		v.mu.Unlock()
		go v.read(c)
		// The agent starts reading only once the guest has booted: ping
		// until it answers.
		for time.Now().Before(deadline) {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := v.do(pctx, request{Op: "ping"})
			cancel()
			if err == nil {
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select {
			case err := <-v.done:
				return fmt.Errorf("qemu exited: %v", err)
			default:
			}
		}
	}
}

func (v *VM) read(c net.Conn) {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var r reply
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		v.mu.Lock()
		ch := v.pending[r.ID]
		delete(v.pending, r.ID)
		v.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

func (v *VM) do(ctx context.Context, r request) (reply, error) {
	ch := make(chan reply, 1)
	v.mu.Lock()
	v.nextID++
	r.ID = v.nextID
	v.pending[r.ID] = ch
	err := v.enc.Encode(r)
	v.mu.Unlock()
	if err != nil {
		return reply{}, err
	}
	select {
	case rep := <-ch:
		return rep, nil
	case <-ctx.Done():
		v.mu.Lock()
		delete(v.pending, r.ID)
		v.mu.Unlock()
		return reply{}, ctx.Err()
	}
}

// Sh runs a shell command in the guest and returns its combined output.
// A non-zero exit is an error that carries the output.
func (v *VM) Sh(ctx context.Context, timeout time.Duration, cmd string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	rep, err := v.do(cctx, request{Cmd: cmd, TimeoutMS: timeout.Milliseconds()})
	if err != nil {
		return "", fmt.Errorf("%s: %q: %w", v.Spec.Name, cmd, err)
	}
	if rep.RC != 0 {
		return rep.Out, fmt.Errorf("%s: %q: exit %d: %s", v.Spec.Name, cmd, rep.RC, strings.TrimSpace(rep.Out))
	}
	return rep.Out, nil
}

// Write writes a file in the guest.
func (v *VM) Write(ctx context.Context, path string, data []byte) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := v.do(cctx, request{Op: "write", Path: path, Data: data})
	if err == nil && rep.RC != 0 {
		err = errors.New(rep.Err)
	}
	if err != nil {
		return fmt.Errorf("%s: write %s: %w", v.Spec.Name, path, err)
	}
	return nil
}

// Kill stops the guest (its disk is a snapshot: nothing to save).
func (v *VM) Kill() {
	if v.cmd.Process != nil {
		_ = v.cmd.Process.Kill()
	}
	v.mu.Lock()
	if v.conn != nil {
		v.conn.Close()
	}
	v.mu.Unlock()
	select {
	case <-v.done:
	case <-time.After(10 * time.Second):
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ClockOffset estimates the guest's clock minus the lab's from n "clock"
// requests: the one with the shortest round trip, its guest time taken
// as the middle of the trip. It returns the offset and that round trip
// (the offset's uncertainty is half of it).
func (v *VM) ClockOffset(ctx context.Context, n int) (time.Duration, time.Duration, error) {
	best := time.Duration(-1)
	var off time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		rep, err := v.do(ctx, request{Op: "clock"})
		t1 := time.Now()
		if err != nil {
			return 0, 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(rep.Out), 10, 64)
		if err != nil || rep.RC != 0 {
			return 0, 0, fmt.Errorf("%s: clock: %q %s", v.Spec.Name, rep.Out, rep.Err)
		}
		if rtt := t1.Sub(t0); best < 0 || rtt < best {
			best = rtt
			off = time.Unix(0, ns).Sub(t0.Add(rtt / 2))
		}
	}
	return off, best, nil
}

// StartSampler starts the guest's sampler of its SCSI disks' completed
// I/O (every interval, into path).
func (v *VM) StartSampler(ctx context.Context, path string, every time.Duration) error {
	rep, err := v.do(ctx, request{Op: "sample", Path: path, TimeoutMS: every.Milliseconds()})
	if err == nil && rep.RC != 0 {
		err = fmt.Errorf("%s: sample: %s", v.Spec.Name, rep.Err)
	}
	return err
}

// StopSampler stops it and returns the lines it wrote.
func (v *VM) StopSampler(ctx context.Context) (int, error) {
	rep, err := v.do(ctx, request{Op: "sample-stop"})
	if err != nil {
		return 0, err
	}
	if rep.RC != 0 {
		return 0, fmt.Errorf("%s: sample-stop: %s", v.Spec.Name, rep.Err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(rep.Out))
	return n, nil
}
