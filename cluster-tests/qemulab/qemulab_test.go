package qemulab

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/config"
)

func TestParseMultipathLL(t *testing.T) {
	b, err := os.ReadFile("testdata/multipath-ll-alua.txt")
	require.NoError(t, err)
	maps, err := ParseMultipathLL(string(b))
	require.NoError(t, err)
	require.Len(t, maps, 2)
	m := maps[0]
	require.Equal(t, "360000003706b7bb049d21aaf7937e234", m.Name)
	require.Equal(t, "dm-0", m.DM)
	require.Equal(t, "1 queue_if_no_path", m.Features)
	require.Equal(t, "1 alua", m.HWHandler)
	require.Len(t, m.Groups, 2)
	require.Equal(t, 10, m.Groups[1].Prio)
	require.Equal(t, "enabled", m.Groups[1].Status)
	g := m.ActiveGroup()
	require.Equal(t, 50, g.Prio)
	require.Equal(t, []string{"sdc", "sdg"}, []string{g.Paths[0].Dev, g.Paths[1].Dev})
	require.Equal(t, "4:0:0:0", g.Paths[0].HCTL)
	require.Len(t, m.Paths(), 4)

	// A failed path, user_friendly_names, and no group marked active.
	out := "mpatha (3600aa) dm-0 ALUAD,aluad array\nsize=256M features='0' hwhandler='1 alua' wp=rw\n" +
		"|-+- policy='round-robin 0' prio=0 status=enabled\n| `- 2:0:0:0 sda 8:0 failed faulty running\n" +
		"`-+- policy='round-robin 0' prio=1 status=enabled\n  `- 3:0:0:0 sdb 8:16 active ghost running\n"
	maps, err = ParseMultipathLL(out)
	require.NoError(t, err)
	require.Equal(t, "mpatha", maps[0].Name)
	require.Equal(t, "3600aa", maps[0].WWID)
	require.Equal(t, "failed", maps[0].Groups[0].Paths[0].DMState)
	require.Equal(t, "ghost", maps[0].ActiveGroup().Paths[0].Check, "the highest priority group when none is active")

	// A WWID from a T10 vendor id designator (udev ranks a locally
	// assigned NAA below it), as aluad's LUNs show.
	maps, err = ParseMultipathLL("1ALUAD_ALUAD000DF72D04FCED4 dm-1 ALUAD,aluad array\n" +
		"size=256M features='1 queue_if_no_path' hwhandler='1 alua' wp=rw\n" +
		"`-+- policy='service-time 0' prio=50 status=active\n  `- 2:0:0:0 sdb 8:16 active ready running\n")
	require.NoError(t, err)
	require.Equal(t, "1ALUAD_ALUAD000DF72D04FCED4", maps[0].WWID)
	require.Len(t, maps[0].Paths(), 1)

	for _, bad := range []string{
		"|-+- policy='service-time 0' prio=50 status=active\n",
		"mpatha (3600aa) dm-0 ALUAD,aluad\n| `- 2:0:0:0 sda 8:0 active ready running\n",
		"mpatha (3600aa) dm-0 ALUAD,aluad\nsomething else\n",
	} {
		_, err := ParseMultipathLL(bad)
		require.Error(t, err, bad)
	}
	maps, err = ParseMultipathLL("")
	require.NoError(t, err)
	require.Empty(t, maps)
}

func TestParseDisks(t *testing.T) {
	ds, err := ParseDisks("sda 10.77.1.20:3260 0\nsdb 10.77.2.10:3260 1\n")
	require.NoError(t, err)
	require.Equal(t, []DiskPath{{"sda", "10.77.1.20:3260", 0}, {"sdb", "10.77.2.10:3260", 1}}, ds)
	require.Equal(t, "b", nodeOfPortal(ds[0].Portal))
	require.Equal(t, "a", nodeOfPortal(ds[1].Portal))
	require.Equal(t, "", nodeOfPortal("10.77.3.10:3260"))
	for _, bad := range []string{"sda 10.77.1.20:3260", "sda p x"} {
		_, err := ParseDisks(bad)
		require.Error(t, err)
	}
}

func TestModuleOrder(t *testing.T) {
	dep := "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n" +
		"kernel/lib/crc16.ko:\nkernel/fs/mbcache.ko:\nkernel/fs/jbd2/jbd2.ko:\n" +
		"kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/drivers/virtio/virtio_ring.ko:\nkernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko\n" +
		"kernel/arch/x86/crypto/crc32c-intel.ko:\n"
	order, err := moduleOrder(dep, "kernel/drivers/virtio/virtio_pci.ko\n", []string{"virtio_pci", "virtio_blk", "ext4", "crc32c_intel", "crc32c_generic?"})
	require.NoError(t, err)
	base := func(s []string) []string {
		var out []string
		for _, m := range s {
			out = append(out, filepath.Base(m))
		}
		return out
	}
	require.Equal(t, []string{"virtio_ring.ko", "virtio.ko", "virtio_blk.ko", "jbd2.ko", "mbcache.ko", "crc16.ko", "ext4.ko", "crc32c-intel.ko"}, base(order))
	// Built in: nothing to load; optional and missing: skipped; missing:
	// an error.
	_, err = moduleOrder(dep, "", []string{"virtio_pci"})
	require.ErrorContains(t, err, "neither in modules.dep nor in modules.builtin")
	_, err = moduleOrder(dep, "", []string{"nope"})
	require.ErrorContains(t, err, "neither in modules.dep")
}

// The initrd is a gzip'd newc archive the kernel can unpack: every entry
// has a valid header, name and 4-byte alignment, and it ends in a trailer.
func TestBuildInitrd(t *testing.T) {
	dir := t.TempDir()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	add := func(name, body string) {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	dep := ""
	for _, m := range bootModules {
		m = strings.TrimSuffix(m, "?")
		dep += "kernel/" + m + ".ko:\n"
		add("kernel/"+m+".ko", "module "+m)
	}
	add("modules.dep", dep)
	require.NoError(t, tw.Close())
	img := Image{Modules: filepath.Join(dir, "modules.tar")}
	require.NoError(t, os.WriteFile(img.Modules, tb.Bytes(), 0o644))
	for _, f := range []string{"agent", "busybox"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(f+" binary"), 0o755))
	}
	out := filepath.Join(dir, "initrd.gz")
	require.NoError(t, BuildInitrd(img, filepath.Join(dir, "agent"), filepath.Join(dir, "busybox"), out))

	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	files := map[string]string{}
	for off := 0; ; {
		require.Equal(t, "070701", string(raw[off:off+6]), "newc magic at %d", off)
		field := func(i int) int {
			v, err := strconv.ParseUint(string(raw[off+6+8*i:off+14+8*i]), 16, 32)
			require.NoError(t, err)
			return int(v)
		}
		size, namesize := field(6), field(11)
		name := string(raw[off+110 : off+110+namesize-1])
		data := (off + 110 + namesize + 3) &^ 3
		files[name] = string(raw[data : data+size])
		off = (data + size + 3) &^ 3
		if name == "TRAILER!!!" {
			require.Equal(t, len(raw), off)
			break
		}
	}
	require.Equal(t, "agent binary", files["aluad-agent"])
	require.Equal(t, "busybox binary", files["bin/busybox"])
	require.Contains(t, files["init"], "switch_root /newroot /run/aluad-agent")
	require.Equal(t, strings.Join([]string{"virtio_pci.ko", "virtio_blk.ko", "virtio_console.ko", "crc32c_generic.ko", "ext4.ko"}, "\n")+"\n", files["modules.order"])
	require.Equal(t, "module ext4", files["lib/modules/ext4.ko"])

	require.Error(t, BuildInitrd(img, filepath.Join(dir, "agent"), filepath.Join(dir, "missing"), out), "no busybox")
	// A dynamically linked busybox would not run in the initrd.
	if _, err := os.Stat("/bin/sh"); err == nil {
		sh, _ := filepath.EvalSymlinks("/bin/sh")
		require.ErrorContains(t, BuildInitrd(img, filepath.Join(dir, "agent"), sh, out), "dynamically linked")
	}
}

// The lab's aluad configuration is one aluad itself accepts, with the
// ports on the lab fabrics and the hosts declared.
func TestArrayConfigLoads(t *testing.T) {
	dir := t.TempDir()
	spec := ArraySpec{LUNs: 3, Capacity: 42, FailbackWindow: 5 * time.Second,
		Hosts: []HostDecl{{"c1", "linux-dmmp", "iqn.2026-11.org.example:c1"}, {"c2", "linux", "iqn.2026-11.org.example:c2"}}}
	p := filepath.Join(dir, "aluad.yaml")
	require.NoError(t, os.WriteFile(p, []byte(spec.Config(dir)), 0o644))
	cfg, err := config.Load(p)
	require.NoError(t, err)
	require.Equal(t, Target, cfg.Target)
	require.Len(t, cfg.LUNs, 3)
	require.Equal(t, "b", cfg.LUNs[1].Preferred)
	require.Equal(t, "10.77.2.20:3260", cfg.Nodes[1].Ports[1].Addr)
	require.Len(t, cfg.Hosts, 2)
	require.Equal(t, "linux-dmmp", cfg.Hosts[0].Type)
	require.Equal(t, 42.0, cfg.Ownership.NodeCapacity)
}

// follow: the switch is the later of the first I/O at the new owner and
// the last at the old one; a host still using the old owner has not switched.
func TestFollow(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lun := uint64(0)
	const ini = "iqn.2026-11.org.example:c1"
	ch := api.Event{Kind: api.EventALUA, Time: at(0), Change: &api.ChangeInfo{LUNs: []uint64{0}, From: "a", To: "b", Cause: "manual", Stop: time.Millisecond}}
	w := &Watcher{steps: map[pathKey][]mediaStep{}, last: map[pathKey]time.Time{}}
	w.events = []api.Event{ch,
		{Kind: api.EventUA, Time: at(-3000), Initiator: ini, LUN: &lun, Reason: "2A/06"}, // an older move's
		{Kind: api.EventUA, Time: at(5), Initiator: ini, LUN: &lun, Reason: "2A/06", Host: "c1"},
	}
	newKey, oldKey := pathKey{ini, "b", 0}, pathKey{ini, "a", 0}
	w.steps[newKey] = []mediaStep{{at(-500), 3}, {at(40), 4}, {at(60), 9}}
	w.last[oldKey] = at(300)

	cases := []struct {
		name     string
		last     time.Time
		eval     time.Time
		switched time.Time
	}{
		{"old path used after the first new I/O", at(300), at(10000), at(300)},
		{"clean switch", at(-10), at(10000), at(40)},
		{"still on the old owner", at(9500), at(10000), time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w.last[oldKey] = c.last
			f := w.follow(ini, 0, ch, c.eval)
			require.Equal(t, at(5), f.UA)
			require.Equal(t, at(40), f.FirstNew, "the count before the move is the baseline")
			require.Equal(t, c.switched, f.Switched)
			if !c.switched.IsZero() {
				require.Equal(t, c.switched.Sub(at(0)), f.MoveToSwitch())
				require.Equal(t, c.switched.Sub(at(5)), f.UAToSwitch())
			}
		})
	}
	// I/O already arriving at the new owner just before the move.
	w.steps[newKey] = []mediaStep{{at(-3000), 1}, {at(-500), 3}, {at(40), 4}}
	require.True(t, w.follow(ini, 0, ch, at(10000)).Already)
	w.steps[newKey] = []mediaStep{{at(-6000), 1}, {at(-3000), 3}, {at(40), 4}}
	require.False(t, w.follow(ini, 0, ch, at(10000)).Already, "the last I/O there was 3 s before the move")

	// No I/O at the new owner at all.
	f := w.follow("iqn.2026-11.org.example:other", 0, ch, at(10000))
	require.False(t, f.Done())
	require.True(t, f.UA.IsZero())
}

// The Vagrant lab's array (two controller VMs) has the QEMU lab's ports, and
// declares the client host types the scenarios use.
func TestVagrantConfig(t *testing.T) {
	cfg, err := config.Load("../vagrant/cluster.yaml")
	require.NoError(t, err)
	require.Equal(t, Target, cfg.Target)
	for node := range cfg.Nodes {
		for f := range Fabrics {
			require.Equal(t, PortAddr(node, f)+":3260", cfg.Nodes[node].Ports[f].Addr)
		}
	}
	types := map[string]string{}
	for _, h := range cfg.Hosts {
		types[h.Name] = h.Type
	}
	require.Equal(t, map[string]string{"c1": cDefaultsDMMP.HostType, "c3": cALUA.HostType, "c4": cFollowover.HostType}, types)
	// Fenced between machines, by the witness's NFS fence.
	require.Equal(t, "command", cfg.Cluster.Fencing)
	require.Equal(t, "/usr/local/sbin/aluad-fence", cfg.Cluster.FenceCommand[0])
	b, err := os.ReadFile("../../Vagrantfile")
	require.NoError(t, err)
	for _, c := range []ClientSpec{cDefaultsDMMP, cALUA, cFollowover} {
		require.Contains(t, string(b), `["`+c.Name+`", "`+c.Conf+`", "`+c.HostType+`"]`)
		byName, ok := ClientByName(c.Name)
		require.True(t, ok, c.Name)
		require.Equal(t, c, byName)
	}
	_, ok := ClientByName("c9")
	require.False(t, ok)
}

// The results page names every client, every follow (switched, already
// there, not within the window) and every check, and says FAIL when any
// check failed.
func TestMarkdown(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	r := &Results{Scenario: "full", Started: t0, Pass: false,
		Clients: []*ClientResult{{Spec: cDefaultsDMMP, Maps: 2, Paths: 8, AOOnOwner: true, FioIOs: 100, Before: "before\n", After: "after\n"}},
		Steps: []*StepResult{{Name: "move", Changes: []string{"LUNs [0] a -> b (manual)"},
			MultipathLL: map[string]string{"c1": "after-move\n"},
			Follows: []Follow{
				{Host: "c1", LUN: 0, From: "a", To: "b", Cause: "manual", Moved: t0, UA: t0.Add(20 * time.Millisecond), Switched: t0.Add(400 * time.Millisecond)},
				{Host: "c2", LUN: 0, From: "a", To: "b", Cause: "manual", Moved: t0, Already: true},
				{Host: "c4", LUN: 1, From: "b", To: "a", Cause: "balance", Moved: t0},
			}}},
		Checks:  []Check{{Name: "c1: move", OK: true, Detail: "fine"}, {Name: "c5: failover", OK: false, Detail: "stuck"}},
		Polling: PollStats{Polls: 3000, Errors: 1, Mean: 12 * time.Millisecond, Longest: 95 * time.Millisecond},
	}
	md := r.Markdown()
	for _, want := range []string{
		"# aluad QEMU lab: full (FAIL)",
		"| c1 | bookworm | dm-multipath at its defaults; declared Linux DM-MP (non-owner paths STANDBY) | linux-dmmp |",
		"| c1 | 0 | a -> b | manual | 0s | 20 ms | 380 ms | 400 ms |",
		"| c2 | 0 | a -> b | manual | 0s | no UA | - | already there |",
		"| c4 | 1 | b -> a | balance | 0s | no UA | - | not within the window |",
		"- `ok  ` c1: move: fine", "- `FAIL` c5: failover: stuck",
		"After step move:\n\n```\nafter-move\n```",
		"read 3000 times, every 12ms on average, the longest gap 95ms (1 failed reads)",
	} {
		require.Contains(t, md, want)
	}
	dir := t.TempDir()
	require.NoError(t, r.Write(dir))
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"scenario": "full"`)
}

// mpFollows reads multipathd's topology: the active group's paths all on
// the owner, with a dead controller's removed paths left out.
func TestMPFollows(t *testing.T) {
	c := &ClientResult{disks: map[string]DiskPath{
		"sda": {Dev: "sda", Portal: PortAddr(0, 0) + ":3260", LUN: 0},
		"sdb": {Dev: "sdb", Portal: PortAddr(1, 0) + ":3260", LUN: 0},
	}}
	out := `mpatha (36001405aaaa) dm-0 ALUAD,aluad
size=64M features='1 queue_if_no_path' hwhandler='1 alua' wp=rw
|-+- policy='service-time 0' prio=50 status=active
| |- 3:0:0:0 sdb 8:16 active ready  running
| |- 2:0:0:0 sda 8:0  failed faulty running
| ` + "`" + `- #:#:#:# -   #:#  failed faulty running
` + "`" + `-+- policy='service-time 0' prio=0 status=enabled
  ` + "`" + `- 2:0:0:0 sda 8:0  failed faulty running
`
	got := c.mpFollows(out, 0, "b")
	if got == nil || !*got {
		t.Fatalf("the active group is b's: %v", got)
	}
	if got := c.mpFollows(out, 0, "a"); got == nil || *got {
		t.Fatalf("not a's: %v", got)
	}
	if got := c.mpFollows(out, 1, "a"); got != nil {
		t.Fatalf("no map for LUN 1: %v", *got)
	}
}

// guestFollow: the later of the first completion on the new owner's paths
// and the last on the old owner's before it; an old path's completion
// after the new owner carried I/O is a failed command being retried.
func TestGuestFollow(t *testing.T) {
	c := &ClientResult{disks: map[string]DiskPath{
		"sda": {Dev: "sda", Portal: PortAddr(0, 0) + ":3260", LUN: 0},
		"sdb": {Dev: "sdb", Portal: PortAddr(1, 0) + ":3260", LUN: 0},
	}}
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	g := &guestView{steps: map[string][]rise{
		"sda": {{at(-20), at(-10), 1}, {at(40), at(50), 2}, {at(700), at(750), 3}}, // the last: a failed command
		"sdb": {{at(90), at(100), 1}, {at(200), at(210), 2}},
	}}
	s, ok := g.guestFollow(c, 0, "b", t0, at(10000))
	if !ok || s.lo != 90*time.Millisecond || s.hi != 100*time.Millisecond {
		t.Fatalf("follow %v %v, want 90-100 ms", s, ok)
	}
	// A failure on the old path near the end (udev's probe failed in the
	// guest) does not undo it.
	g.steps["sda"] = append(g.steps["sda"], rise{at(9500), at(9510), 4})
	if s, ok := g.guestFollow(c, 0, "b", t0, at(10000)); !ok || s.hi != 100*time.Millisecond {
		t.Fatalf("follow %v %v, want 90-100 ms", s, ok)
	}
	// Never on the new owner: not followed.
	delete(g.steps, "sdb")
	if _, ok := g.guestFollow(c, 0, "b", t0, at(10000)); ok {
		t.Fatal("followed to a node whose paths carried nothing")
	}
}
