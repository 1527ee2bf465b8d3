package tcmu

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/scsi"
)

// recHandler answers GOOD and records who each command was credited to.
type recHandler struct {
	mu  sync.Mutex
	got []string
}

func (h *recHandler) Execute(c *scsi.Command) scsi.Response {
	h.mu.Lock()
	h.got = append(h.got, c.Nexus.InitiatorName)
	h.mu.Unlock()
	return scsi.Response{Status: scsi.StatusGood}
}
func (h *recHandler) NexusUp(scsi.Nexus)                 {}
func (h *recHandler) NexusLost(scsi.Nexus)               {}
func (h *recHandler) Reset(scsi.Nexus, scsi.TMF, uint64) {}
func (h *recHandler) LUNExists(scsi.Nexus, uint64) bool  { return true }
func (h *recHandler) last() string                       { h.mu.Lock(); defer h.mu.Unlock(); return h.got[len(h.got)-1] }
func (h *recHandler) since(i int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got[i:]...)
}
func (h *recHandler) count() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.got) }

// aclLab is a Frontend over MemFS with fake rings, two declared hosts,
// and the kernel's side (sessions, LIO's counts) played by the test.
type aclLab struct {
	f    *Frontend
	fs   *MemFS
	h    *recHandler
	l    Layout
	mu   sync.Mutex
	devs map[string]*FakeDevice
	lio  map[string]uint64 // what LIO counted, per (initiator, lun, port)
	ans  map[string]uint64 // what the front end handed on as answered by LIO
}

const (
	h1 = "iqn.2026-11.org.example:h1"
	h2 = "iqn.2026-11.org.example:h2"
)

// h2's name as configured: its ACL bears it; its sessions are h2 (lower
// case, as the front end keys every session).
const h2Configured = "iqn.2026-11.org.example:H2"

func startACLLab(t *testing.T) *aclLab {
	t.Helper()
	l := testLayout()
	l.Initiators = []string{h1, h2Configured}
	lab := &aclLab{fs: NewMemFS(), h: &recHandler{}, l: l, devs: map[string]*FakeDevice{}, lio: map[string]uint64{},
		ans: map[string]uint64{}}
	lab.fs.MkdirAll("/t")
	f, err := New(Options{Layout: l, FS: lab.fs, Handler: lab.h, Poll: time.Hour, // the test polls
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnAnswered: func(n scsi.Nexus, lun uint64, cmds uint64) {
			lab.mu.Lock()
			defer lab.mu.Unlock()
			lab.ans[fmt.Sprintf("%s/%d/%d", n.InitiatorName, lun, n.TargetPort)] += cmds
		},
		State: func(uint64, uint16) alua.AccessState { return alua.ActiveOptimized },
		OpenRegion: func(lun uint64, port uint16) (Region, error) {
			lab.mu.Lock()
			defer lab.mu.Unlock()
			d := NewFakeDevice(DeviceName(lun, port))
			lab.devs[d.Name] = d
			return d, nil
		}})
	require.NoError(t, err)
	require.NoError(t, f.Start())
	lab.f = f
	for _, ini := range []string{h1, h2} { // LIO's counters start at 0
		for _, tg := range l.Targets {
			for _, p := range tg.TPGs {
				for _, lun := range l.LUNs {
					lab.sends(ini, lun.ID, p.TPGT, 0)
				}
			}
		}
	}
	t.Cleanup(func() { _ = f.Shutdown(t.Context()) })
	return lab
}

func (a *aclLab) tpg(port uint16) string {
	return a.l.TPGDir(a.f.iqnOf[port], port)
}

// login puts ini's session under its ACL on port (or ends it).
func (a *aclLab) login(t *testing.T, port uint16, ini string, on bool) {
	t.Helper()
	info := "No active iSCSI Session for Initiator Endpoint: " + ini + "\n"
	if on {
		info = "InitiatorName: " + ini + "\nInitiatorAlias: \nLIO Session ID: 1   ISID: 0x23d000001  TSIH: 1  SessionType: Normal\nSession State: TARG_SESS_STATE_LOGGED_IN\n"
	}
	a.fs.Set(filepath.Join(a.tpg(port), "acls", a.f.aclName[ini], "info"), info)
}

// sends is LIO counting n commands from ini on (lun, port).
func (a *aclLab) sends(ini string, lun uint64, port uint16, n uint64) {
	k := fmt.Sprintf("%s/%d/%d", ini, lun, port)
	a.lio[k] += n
	a.fs.Set(filepath.Join(a.tpg(port), "acls", a.f.aclName[ini], fmt.Sprintf("lun_%d", lun), "statistics", "scsi_auth_intr", "num_cmds"),
		fmt.Sprintf("%d\n", a.lio[k]))
}

// ring delivers one TUR on (lun, port) and waits for its answer.
func (a *aclLab) ring(t *testing.T, lun uint64, port uint16) {
	t.Helper()
	a.mu.Lock()
	d := a.devs[DeviceName(lun, port)]
	a.mu.Unlock()
	_, err := d.Queue([]byte{0, 0, 0, 0, 0, 0}, nil, 0)
	require.NoError(t, err)
	d.Signal()
	require.Eventually(t, func() bool { return len(d.Reap()) == 1 }, 5*time.Second, time.Millisecond)
}

// dev is the front end's device for (lun, port).
func (a *aclLab) dev(lun uint64, port uint16) *device {
	for _, d := range a.f.devs {
		if d.lun == lun && d.port == port {
			return d
		}
	}
	return nil
}

// lapse polls until credit left now has lapsed.
func (a *aclLab) lapse() {
	for range lapsePolls + 1 {
		a.f.pollSessions()
	}
}

// waitSessions polls the sessions: the front end sees exactly these on port.
func (a *aclLab) waitSessions(t *testing.T, port uint16, want ...string) {
	t.Helper()
	a.f.pollSessions()
	d, o := a.f.sessionsOf(port)
	require.Equal(t, fmt.Sprint(want), fmt.Sprint(append(d, o...)))
}

// Declared hosts get explicit ACLs with every LUN mapped, named as
// configured (LIO matches names byte for byte), and Remove takes them
// down before the TPG LUNs they link to, whatever their links are named.
func TestLayoutACLs(t *testing.T) {
	l := testLayout()
	l.Initiators = []string{h1, h2Configured}
	fs := NewMemFS()
	fs.MkdirAll("/t")
	require.NoError(t, l.Create(fs))
	tpg := l.TPGDir("iqn.2026-11.org.aluad:x.b", 3)
	for _, lun := range []int{0, 4} {
		link := filepath.Join(tpg, "acls", h1, fmt.Sprintf("lun_%d", lun), lunLink)
		require.True(t, fs.Exists(link), link)
	}
	require.True(t, fs.Exists(filepath.Join(tpg, "acls", h2Configured, "lun_4", lunLink)))
	require.False(t, fs.Exists(filepath.Join(tpg, "acls", h2)))
	ok, err := l.ACLSession(fs, "iqn.2026-11.org.aluad:x.b", 3, h1)
	require.NoError(t, err)
	require.False(t, ok, "an attribute never written: no session")
	_, err = l.ACLCommands(fs, "iqn.2026-11.org.aluad:x.b", 3, h1, 7)
	require.Error(t, err, "LUN 7 is not mapped")
	fs.Set(filepath.Join(tpg, "acls", h1, "lun_4", "statistics", "scsi_auth_intr", "num_cmds"), "not a number\n")
	_, err = l.ACLCommands(fs, "iqn.2026-11.org.aluad:x.b", 3, h1, 4)
	require.ErrorContains(t, err, "num_cmds")
	// targetcli's link names are hex.
	require.NoError(t, fs.Symlink(filepath.Join(tpg, "lun", "lun_0"), filepath.Join(tpg, "acls", h1, "lun_0", "6847ded961")))
	require.NoError(t, l.Remove(fs))
	require.False(t, fs.Exists("/t/iscsi/iqn.2026-11.org.aluad:x.b"))
}

func TestParseACLInfo(t *testing.T) {
	for _, tc := range []struct {
		info string
		want bool
	}{
		{"No active iSCSI Session for Initiator Endpoint: iqn.2026-11.org.example:h1\n", false},
		{"", false},
		{"\n", false},
		{"InitiatorName: iqn.2026-11.org.example:h1\nInitiatorAlias: \nLIO Session ID: 3   ISID: 0x00023d000001  TSIH: 3  SessionType: Normal\nSession State: TARG_SESS_STATE_LOGGED_IN\n", true},
	} {
		require.Equal(t, tc.want, ParseACLInfo(tc.info), "%q", tc.info)
	}
}

// Two declared hosts on one port: each ring command is credited to the
// host LIO counted it from; credit LIO's own answers left lapses; a lone
// session needs no count; an undeclared host is credited only when no
// declared host's count explains the command.
func TestCreditByLIOCounts(t *testing.T) {
	a := startACLLab(t)
	const lun, port = 0, 1
	a.login(t, port, h1, true)
	a.waitSessions(t, port, h1)

	// Alone on the port: credited without a count.
	a.sends(h1, lun, port, 1)
	a.ring(t, lun, port)
	require.Equal(t, h1, a.h.last())

	a.login(t, port, h2, true)
	a.waitSessions(t, port, h1, h2)
	for _, step := range []struct {
		from string
	}{{h2}, {h1}, {h2}, {h2}, {h1}} {
		a.sends(step.from, lun, port, 1)
		a.ring(t, lun, port)
		require.Equal(t, step.from, a.h.last())
	}

	// Both send two at once: each is credited two.
	a.sends(h1, lun, port, 2)
	a.sends(h2, lun, port, 2)
	i := a.h.count()
	for range 4 {
		a.ring(t, lun, port)
	}
	got := map[string]int{}
	for _, ini := range a.h.since(i) {
		got[ini]++
	}
	require.Equal(t, map[string]int{h1: 2, h2: 2}, got)

	// h1's RTPG, answered by LIO itself, never reaches the ring: its
	// credit lapses, handed on as a command LIO answered, and a command no
	// count explains goes to nobody.
	a.sends(h1, lun, port, 1)
	a.lapse()
	require.Equal(t, map[string]uint64{fmt.Sprintf("%s/%d/%d", h1, lun, port): 1}, a.ans)
	a.ring(t, lun, port)
	require.Equal(t, "", a.h.last(), "no host's count explains it")

	// An undeclared host joins: what the counts do not explain is its.
	dyn := "iqn.2026-11.org.example:guest"
	a.fs.Set(filepath.Join(a.tpg(port), "dynamic_sessions"), dyn+"\n\x00")
	a.waitSessions(t, port, h1, h2, dyn)
	a.ring(t, lun, port)
	require.Equal(t, dyn, a.h.last())
	a.sends(h2, lun, port, 1)
	a.ring(t, lun, port)
	require.Equal(t, h2, a.h.last())

	// Counts are per device: h2's count on LUN 4 credits nothing on LUN 0.
	a.sends(h2, 4, port, 1)
	a.ring(t, lun, port)
	require.Equal(t, dyn, a.h.last())
	a.ring(t, 4, port)
	require.Equal(t, h2, a.h.last())
}

// The races a poll makes with commands on their way, and what a count
// cannot explain.
func TestCreditRaces(t *testing.T) {
	const lun, port = 0, 1
	dyn := "iqn.2026-11.org.example:guest"

	t.Run("a poll while a command is on its way takes none of its credit", func(t *testing.T) {
		a := startACLLab(t)
		a.fs.Set(filepath.Join(a.tpg(port), "dynamic_sessions"), dyn+"\n\x00")
		a.login(t, port, h1, true)
		a.waitSessions(t, port, h1, dyn)
		d := a.dev(lun, port)
		for range 2 * lapsePolls {
			a.sends(h1, lun, port, 1) // counted by LIO, on its way to the ring
			a.f.pollSessions()
			require.Equal(t, h1, a.f.nexus(d).InitiatorName)
		}
		require.Empty(t, a.ans, "nothing LIO answered itself")
	})

	t.Run("credit left by LIO's own answer does not take another host's command", func(t *testing.T) {
		a := startACLLab(t)
		a.login(t, port, h1, true)
		a.login(t, port, h2, true)
		a.waitSessions(t, port, h1, h2)
		d := a.dev(lun, port)
		a.sends(h1, lun, port, 2) // a UA LIO answered, then h1's retry
		require.Equal(t, h1, a.f.nexus(d).InitiatorName)
		a.sends(h2, lun, port, 1) // h2's RTPG, within the millisecond
		require.Equal(t, h2, a.f.nexus(d).InitiatorName)
	})

	t.Run("a declared host under a dynamic ACL is not taken for one with a count", func(t *testing.T) {
		a := startACLLab(t)
		// The host's real name is in lower case: LIO does not match it to
		// the ACL named as configured, and it logs in under demo mode.
		a.fs.Set(filepath.Join(a.tpg(port), "dynamic_sessions"), h2+"\n\x00")
		a.login(t, port, h1, true)
		a.waitSessions(t, port, h1, h2)
		declared, other := a.f.sessionsOf(port)
		require.Equal(t, []string{h1}, declared)
		require.Equal(t, []string{h2}, other)
		require.Equal(t, h2, a.f.nexus(a.dev(lun, port)).InitiatorName, "what no count explains is the undeclared session's")
	})

	t.Run("commands credited to the one session before a poll saw the next are undone", func(t *testing.T) {
		a := startACLLab(t)
		a.login(t, port, h1, true)
		a.waitSessions(t, port, h1)
		d := a.dev(lun, port)
		a.login(t, port, h2, true)
		for range 3 { // h2's login scan before the next poll
			a.sends(h2, lun, port, 1)
			require.Equal(t, h1, a.f.nexus(d).InitiatorName)
		}
		a.waitSessions(t, port, h1, h2)
		for range 3 {
			a.sends(h1, lun, port, 1)
			require.Equal(t, h1, a.f.nexus(d).InitiatorName)
		}
	})

	t.Run("a logout's unused credit is not the next session's", func(t *testing.T) {
		a := startACLLab(t)
		a.login(t, port, h1, true)
		a.login(t, port, h2, true)
		a.waitSessions(t, port, h1, h2)
		a.sends(h2, lun, port, 3) // LIO's answers to h2 as it logs out
		a.login(t, port, h2, false)
		a.waitSessions(t, port, h1)
		a.login(t, port, h2, true)
		a.waitSessions(t, port, h1, h2)
		a.sends(h1, lun, port, 1)
		require.Equal(t, h1, a.f.nexus(a.dev(lun, port)).InitiatorName)
	})
}
