package qemulab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aluad/aluad/pkg/api"
)

// The storage guest (the TCMU lab): LIO and aluad --fabric tcmu run in a
// QEMU guest of their own, with the nodes' ports as its addresses, and
// the lab reaches aluad's management API over the lab network.
const (
	storageName = "storage"
	storageAPI  = "10.77.1.5:8090"
)

// storageModules: the NICs, the agent channel, configfs and LIO with its
// userspace backstore and iSCSI fabric.
var storageModules = []string{"virtio_net", "configfs", "uio", "target_core_mod", "target_core_user", "iscsi_target_mod"}

// StartStorage boots the storage guest with aluad (a static binary,
// aluadBin) in its initrd, configures node b's port addresses beside
// node a's, and starts aluad serve --fabric tcmu there.
func StartStorage(ctx context.Context, n *Net, img Image, agent, busybox, aluadBin, dir string, s ArraySpec) (*Array, error) {
	initrd := filepath.Join(dir, "initrd-storage.gz")
	if err := BuildInitrdWith(img, agent, busybox, initrd, map[string]string{"aluad-tcmu": aluadBin}); err != nil {
		return nil, err
	}
	vm, err := StartVM(ctx, n, img, "", dir, VMSpec{Name: storageName, Index: 90, Mem: 1024, CPUs: 1,
		Modules: storageModules, Addr: []string{PortAddr(0, 0), PortAddr(0, 1)}, Initrd: initrd})
	if err != nil {
		return nil, err
	}
	a := &Array{Dir: dir, guest: vm}
	fail := func(err error) (*Array, error) {
		a.Stop()
		return nil, err
	}
	setup := fmt.Sprintf("ip addr add %s/24 dev eth0 && ip addr add %s/24 dev eth1 && ip addr add %s/24 dev eth0 && "+
		"(mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config) && "+
		"ls /sys/kernel/config/target && mkdir -p /run/aluad",
		PortAddr(1, 0), PortAddr(1, 1), strings.Split(storageAPI, ":")[0])
	if out, err := vm.Sh(ctx, time.Minute, setup); err != nil {
		return fail(fmt.Errorf("storage guest set-up: %w\n%s", err, out))
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	token := hex.EncodeToString(tok)
	if err := vm.Write(ctx, "/run/aluad/token", []byte(token+"\n")); err != nil {
		return fail(err)
	}
	cfg := s.Config("/run/aluad") + "fabric: {kind: tcmu}\n"
	if err := os.WriteFile(filepath.Join(dir, "aluad-storage.yaml"), []byte(cfg), 0o644); err != nil {
		return fail(err)
	}
	if err := vm.Write(ctx, "/run/aluad/aluad.yaml", []byte(cfg)); err != nil {
		return fail(err)
	}
	start := "setsid /run/aluad-tcmu serve --config /run/aluad/aluad.yaml --control /run/aluad/aluad.sock --stats-interval 1s " +
		"--api " + storageAPI + " --api-token-file /run/aluad/token </dev/null >/run/aluad/aluad.log 2>&1 &"
	if out, err := vm.Sh(ctx, 30*time.Second, start); err != nil {
		return fail(fmt.Errorf("starting aluad in the storage guest: %w\n%s", err, out))
	}
	if a.ClockOffset, err = clockOffset(ctx, vm); err != nil {
		return fail(err)
	}
	a.Client = api.NewHTTPClientDial("http://"+storageAPI, token, n.DialContext)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := a.Client.LUNs(); err == nil {
			return a, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			out, _ := vm.Sh(context.Background(), 20*time.Second, "tail -40 /run/aluad/aluad.log; dmesg | tail -30")
			return fail(fmt.Errorf("aluad in the storage guest did not answer on %s:\n%s", storageAPI, out))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// GuestLog copies aluad's log and the kernel log out of the storage
// guest into dir.
func (a *Array) GuestLog(ctx context.Context) {
	if a.guest == nil {
		return
	}
	out, _ := a.guest.Sh(ctx, 30*time.Second, "cat /run/aluad/aluad.log")
	_ = os.WriteFile(filepath.Join(a.Dir, "aluad.log"), []byte(out), 0o644)
	out, _ = a.guest.Sh(ctx, 30*time.Second, "dmesg")
	_ = os.WriteFile(filepath.Join(a.Dir, "storage-dmesg.log"), []byte(out), 0o644)
	out, _ = a.guest.Sh(ctx, 30*time.Second, "find /sys/kernel/config/target/iscsi -maxdepth 3 | sort; "+
		"for f in /sys/kernel/config/target/core/user_*/*/alua/default_tg_pt_gp/alua_access_state; do echo \"$f $(cat $f)\"; done")
	_ = os.WriteFile(filepath.Join(a.Dir, "storage-lio.txt"), []byte(out), 0o644)
}

// clockOffset measures the guest's clock against the lab's: the best of
// five agent round trips, the guest's reading taken at their midpoint.
func clockOffset(ctx context.Context, vm *VM) (time.Duration, error) {
	best, off := time.Duration(1<<62), time.Duration(0)
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		out, err := vm.Sh(ctx, 10*time.Second, "date +%s%N")
		rtt := time.Since(t0)
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("guest clock: %q", out)
		}
		if rtt < best {
			best, off = rtt, time.Unix(0, ns).Sub(t0.Add(rtt/2))
		}
	}
	return off, nil
}
