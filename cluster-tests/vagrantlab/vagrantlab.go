// Package vagrantlab runs the smoke test of the Vagrant lab (the
// Vagrantfile at the top of the repository: two controller VMs running
// aluad controller, a witness VM, client VMs with dm-multipath): fio on
// every client, a planned move of a LUN and back, a controller VM's power
// loss (virsh destroy) and its start, then, with Destroy, vagrant destroy
// and a check that no domain, network or volume of the lab is left.
//
// It owns: reaching the machines (vagrant ssh-config, then ssh), the
// controllers' API on the management network, and the smoke's steps and
// figures. Per client and step it measures, on the host's clock:
//
//   - follow: from the operator's action (the move command sent, the power
//     cut) until all of the client's I/O to the LUN completes at the new
//     owner's ports: the later of the first GOOD READ or WRITE there and
//     the last one at the old owner, from GET /v1/io of both controllers,
//     polled every 100 ms;
//   - stall: the longest time in the step with no I/O of the client's to
//     the LUN completing, from fio's own completion log in the client
//     (the host's view);
//   - fio's errors (fio stops a job at its first I/O error).
//
// What the guests print is parsed by the QEMU lab's parsers
// (cluster-tests/qemulab), and the clients run the QEMU lab's fio job.
package vagrantlab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Machines reaches the lab's machines by SSH, with the configuration
// vagrant ssh-config prints (written once to a file, so each command is
// one ssh process and no Ruby start-up).
type Machines struct {
	Dir    string // the directory of the Vagrantfile
	config string // the ssh-config file
	Names  []string
	Hosts  map[string]string // machine -> its management address
}

// ParseSSHConfig reads vagrant ssh-config's output: every Host block's
// name and HostName.
func ParseSSHConfig(out string) (names []string, hosts map[string]string, err error) {
	hosts = map[string]string{}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "Host":
			cur = f[1]
			names = append(names, cur)
		case "HostName":
			if cur == "" {
				return nil, nil, fmt.Errorf("ssh-config: HostName before any Host")
			}
			hosts[cur] = f[1]
		}
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("ssh-config: no Host")
	}
	for _, n := range names {
		if hosts[n] == "" {
			return nil, nil, fmt.Errorf("ssh-config: Host %s has no HostName", n)
		}
	}
	return names, hosts, nil
}

// OpenMachines runs vagrant ssh-config in dir.
func OpenMachines(ctx context.Context, dir string) (*Machines, error) {
	cmd := exec.CommandContext(ctx, "vagrant", "ssh-config")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("vagrant ssh-config (are the machines up? vagrant up): %w", err)
	}
	names, hosts, err := ParseSSHConfig(string(out))
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "aluad-vagrant-ssh-*.config")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Write(out); err != nil {
		return nil, err
	}
	return &Machines{Dir: dir, config: f.Name(), Names: names, Hosts: hosts}, nil
}

// Close removes the ssh-config file.
func (m *Machines) Close() { os.Remove(m.config) }

// Sh runs a shell command as root on a machine.
func (m *Machines) Sh(ctx context.Context, timeout time.Duration, name, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// One SSH connection per machine, kept open: a handshake costs a TCG
	// guest seconds of emulated crypto.
	cmd := exec.CommandContext(ctx, "ssh", "-F", m.config, "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10",
		"-o", "ControlMaster=auto", "-o", "ControlPath="+m.config+"-%h", "-o", "ControlPersist=120",
		name, "sudo sh -c "+shellQuote(script))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %s: %w: %s", name, firstLine(script), err, strings.TrimSpace(lastLines(string(out), 5)))
	}
	return string(out), nil
}

// Clock measures a machine's clock against the host's: the best of five
// round trips, the machine's reading taken at their midpoint.
func (m *Machines) Clock(ctx context.Context, name string) (time.Duration, error) {
	best, off := time.Duration(1<<62), time.Duration(0)
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		out, err := m.Sh(ctx, 30*time.Second, name, "date +%s%N")
		rtt := time.Since(t0)
		if err != nil {
			return 0, err
		}
		var ns int64
		if _, err := fmt.Sscan(strings.TrimSpace(out), &ns); err != nil {
			return 0, fmt.Errorf("%s: clock: %q", name, out)
		}
		if rtt < best {
			best, off = rtt, time.Unix(0, ns).Sub(t0.Add(rtt/2))
		}
	}
	return off, nil
}

// Domain is the libvirt domain of a machine (its id as vagrant-libvirt
// recorded it).
func (m *Machines) Domain(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(m.Dir, ".vagrant", "machines", name, "libvirt", "id"))
	if err != nil {
		return "", fmt.Errorf("%s: no libvirt domain recorded (vagrant up): %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Virsh runs virsh on the host's system libvirt.
func Virsh(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "virsh", append([]string{"-c", "qemu:///system"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// Leftovers lists the libvirt objects of a lab whose domains are named
// prefix+machine: domains, networks the Vagrantfile names (aluad-*) or
// vagrant-libvirt made (vagrant-libvirt), and volumes of those domains
// (the box's base image, which vagrant-libvirt keeps for the next up,
// is not the lab's).
func Leftovers(domains, networks, volumes []string, prefix string) []string {
	var left []string
	for _, d := range domains {
		if strings.HasPrefix(d, prefix) {
			left = append(left, "domain "+d)
		}
	}
	for _, n := range networks {
		if strings.HasPrefix(n, "aluad-") || n == "vagrant-libvirt" {
			left = append(left, "network "+n)
		}
	}
	for _, v := range volumes {
		if strings.HasPrefix(v, prefix) {
			left = append(left, "volume "+v)
		}
	}
	sort.Strings(left)
	return left
}

// runIn runs a command in dir, bounded by timeout.
func runIn(ctx context.Context, dir string, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
