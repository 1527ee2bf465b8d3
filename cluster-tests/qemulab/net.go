package qemulab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
)

// Net is the lab network: a network namespace with two bridged fabrics,
// as a dual-fabric SAN has. Each storage node has one port on each
// fabric; each guest one NIC on each.
//
//	fabric A  brA 10.77.1.0/24:  a0 10.77.1.10  b0 10.77.1.20  guests 10.77.1.100+
//	fabric B  brB 10.77.2.0/24:  a1 10.77.2.10  b1 10.77.2.20  guests 10.77.2.100+
type Net struct {
	NS   string
	taps []string
}

// Fabrics are the bridges, in NIC order.
var Fabrics = []string{"brA", "brB"}

// PortAddr is the address of node's port on fabric f (0 or 1).
func PortAddr(node int, f int) string { return fmt.Sprintf("10.77.%d.%d", f+1, 10*(node+1)) }

// GuestAddr is guest i's address on fabric f.
func GuestAddr(i, f int) string { return fmt.Sprintf("10.77.%d.%d", f+1, 100+i) }

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// NewNet creates the namespace, bridges and port addresses for nodes
// storage nodes.
func NewNet(nodes int) (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the QEMU lab needs root (network namespace, bridges, taps)")
	}
	n := &Net{NS: fmt.Sprintf("aluadlab%d", os.Getpid())}
	steps := [][]string{{"netns", "add", n.NS}, {"-n", n.NS, "link", "set", "lo", "up"}}
	for f, br := range Fabrics {
		steps = append(steps, []string{"-n", n.NS, "link", "add", br, "type", "bridge"},
			[]string{"-n", n.NS, "link", "set", br, "up"})
		for node := 0; node < nodes; node++ {
			steps = append(steps, []string{"-n", n.NS, "addr", "add", PortAddr(node, f) + "/24", "dev", br})
		}
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

// HostAddr is the lab host's own address on fabric f when the nodes run
// in a storage guest (TCMU lab): the lab reaches that guest's API there.
func HostAddr(f int) string { return fmt.Sprintf("10.77.%d.1", f+1) }

// AddHostAddrs gives the namespace's bridges the lab host's addresses.
func (n *Net) AddHostAddrs() error {
	for f, br := range Fabrics {
		if err := ipCmd("-n", n.NS, "addr", "add", HostAddr(f)+"/24", "dev", br); err != nil {
			return err
		}
	}
	return nil
}

// DialContext dials from inside the lab namespace (the lab process
// itself stays outside): the socket is made on an OS thread switched
// into the namespace for the call, then the thread is switched back.
func (n *Net) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + n.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	const cloneNewNet = 0x40000000
	const sysSetns = 308 // x86-64; the lab runs QEMU on x86-64 hosts
	if _, _, e := syscall.RawSyscall(sysSetns, target.Fd(), cloneNewNet, 0); e != 0 {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns %s: %v", n.NS, e)
	}
	var d net.Dialer
	c, derr := d.DialContext(ctx, network, addr)
	if _, _, e := syscall.RawSyscall(sysSetns, orig.Fd(), cloneNewNet, 0); e != 0 {
		// The thread is stuck in the namespace: let it die with the
		// goroutine rather than run anything else.
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("setns back: %v", e)
	}
	runtime.UnlockOSThread()
	return c, derr
}

// Tap creates a tap on fabric f for a guest NIC.
func (n *Net) Tap(name string, f int) error {
	for _, s := range [][]string{
		{"-n", n.NS, "tuntap", "add", "name", name, "mode", "tap"},
		{"-n", n.NS, "link", "set", name, "master", Fabrics[f]},
		{"-n", n.NS, "link", "set", name, "up"},
	} {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	n.taps = append(n.taps, name)
	return nil
}

// Link sets a guest NIC's link up or down: a real cable pull on one fabric.
func (n *Net) Link(tap string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return ipCmd("-n", n.NS, "link", "set", tap, state)
}

// Exec returns a command that runs inside the namespace.
func (n *Net) Exec(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.NS, name}, args...)...)
}

// Close deletes the namespace and everything in it.
func (n *Net) Close() {
	_ = ipCmd("netns", "del", n.NS)
}
