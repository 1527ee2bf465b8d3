package tcmu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// FS is the part of a file system the configfs set-up uses: the real one
// (OSFS over /sys/kernel/config/target), or a recording fake in tests.
type FS interface {
	Mkdir(path string) error
	Write(path, value string) error
	Read(path string) (string, error)
	Symlink(target, link string) error
	Remove(path string) error // rmdir or unlink
	List(path string) ([]string, error)
	Exists(path string) bool
}

// OSFS is configfs itself.
type OSFS struct{}

func (OSFS) Mkdir(p string) error { return os.Mkdir(p, 0o755) }

// Write writes a configfs attribute: one write of the whole value, as
// configfs stores what a single write(2) carries.
func (OSFS) Write(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(v))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", v, p, err)
	}
	return nil
}

func (OSFS) Read(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}
func (OSFS) Symlink(t, l string) error { return os.Symlink(t, l) }
func (OSFS) Remove(p string) error     { return os.Remove(p) }
func (OSFS) List(p string) ([]string, error) {
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, nil
}
func (OSFS) Exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// Layout is what the TCMU front end builds in LIO.
type Layout struct {
	Root string // the configfs target directory, /sys/kernel/config/target
	HBA  int    // core/user_<HBA>
	// Targets: one LIO iSCSI target per storage node, each with one TPG
	// per controller port (TPGT = the port's relative target port id).
	Targets []TargetSpec
	LUNs    []LUNSpec
	// Subtype is dev_config's first part: tcmu-runner looks handlers up by
	// it, and has none for aluad's.
	Subtype string
	// Initiators are the declared hosts' initiator names: each gets an
	// explicit node ACL in every TPG, with every LUN mapped at its ID (what
	// demo mode shows any other initiator), so that LIO counts its
	// commands per (LUN, port) and aluad can tell it apart from another
	// host on the same port (ACLCommands).
	Initiators []string
}

// TargetSpec is one node's LIO target.
type TargetSpec struct {
	Node string
	IQN  string
	TPGs []TPGSpec
}

// TPGSpec is one controller port: a TPG with one network portal.
type TPGSpec struct {
	Port   string // the port's name (a0)
	TPGT   uint16 // = its relative target port id
	Portal string // ip:port
}

// LUNSpec is one logical unit.
type LUNSpec struct {
	ID        uint64
	Size      int64
	BlockSize int
}

// DeviceName is the backstore of LUN lun behind port (one per (LUN,
// port): a command's device tells aluad the LUN and the target port).
func DeviceName(lun uint64, tpgt uint16) string { return fmt.Sprintf("aluad_l%d_p%d", lun, tpgt) }

// ParseDeviceName inverts DeviceName.
func ParseDeviceName(s string) (lun uint64, tpgt uint16, ok bool) {
	var l uint64
	var p uint16
	if n, err := fmt.Sscanf(s, "aluad_l%d_p%d", &l, &p); err != nil || n != 2 || DeviceName(l, p) != s {
		return 0, 0, false
	}
	return l, p, true
}

func (l Layout) hbaDir() string { return filepath.Join(l.Root, "core", fmt.Sprintf("user_%d", l.HBA)) }

// DevDir is a device's configfs directory.
func (l Layout) DevDir(lun uint64, tpgt uint16) string {
	return filepath.Join(l.hbaDir(), DeviceName(lun, tpgt))
}

// TPGDir is a port's TPG directory.
func (l Layout) TPGDir(iqn string, tpgt uint16) string {
	return filepath.Join(l.Root, "iscsi", iqn, fmt.Sprintf("tpgt_%d", tpgt))
}

// ControlString is written to a device's control attribute before it is
// enabled. nl_reply_supported=-1: the kernel never waits on a netlink
// reply for aluad's devices, so neither aluad nor a tcmu-runner running
// beside it (which has no handler for the subtype and would fail the
// device) is in the way of enabling them.
func (l Layout) ControlString(lun LUNSpec, tpgt uint16, maxSectors int) string {
	return fmt.Sprintf("dev_config=%s/lun%d/port%d,dev_size=%d,hw_block_size=%d,hw_max_sectors=%d,nl_reply_supported=-1",
		l.Subtype, lun.ID, tpgt, lun.Size, lun.BlockSize, maxSectors)
}

// Create builds the devices, targets, TPGs, portals and LUNs, devices
// first. enableDevice is called for each device once its control string is
// written (it writes enable; the caller may need to be ready for the
// kernel's netlink event then). Kernel ALUA is left on (see the package
// documentation): its transition delays are zeroed.
func (l Layout) Create(f FS) error {
	if err := mkdirAll(f, l.hbaDir()); err != nil {
		return err
	}
	maxSectors := 2048 // 1 MiB of 512-byte sectors per command
	for _, t := range l.Targets {
		for _, tpg := range t.TPGs {
			for _, lun := range l.LUNs {
				dir := l.DevDir(lun.ID, tpg.TPGT)
				if err := f.Mkdir(dir); err != nil {
					return fmt.Errorf("tcmu: create device %s: %w", dir, err)
				}
				ms := maxSectors * 512 / lun.BlockSize
				if err := f.Write(filepath.Join(dir, "control"), l.ControlString(lun, tpg.TPGT, ms)); err != nil {
					return err
				}
				if err := f.Write(filepath.Join(dir, "enable"), "1"); err != nil {
					return fmt.Errorf("tcmu: enable device %s: %w", dir, err)
				}
				gp := filepath.Join(dir, "alua", "default_tg_pt_gp")
				for _, kv := range [][2]string{{"alua_access_type", "1"}, {"nonop_delay_msecs", "0"},
					{"trans_delay_msecs", "0"}, {"implicit_trans_secs", "0"}} {
					if err := f.Write(filepath.Join(gp, kv[0]), kv[1]); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, t := range l.Targets {
		if err := mkdirAll(f, filepath.Join(l.Root, "iscsi", t.IQN)); err != nil {
			return err
		}
		for _, tpg := range t.TPGs {
			dir := l.TPGDir(t.IQN, tpg.TPGT)
			if err := f.Mkdir(dir); err != nil {
				return fmt.Errorf("tcmu: create TPG %s: %w", dir, err)
			}
			if err := f.Mkdir(filepath.Join(dir, "np", npName(tpg.Portal))); err != nil {
				return fmt.Errorf("tcmu: portal %s on %s: %w", tpg.Portal, dir, err)
			}
			for _, lun := range l.LUNs {
				ld := filepath.Join(dir, "lun", fmt.Sprintf("lun_%d", lun.ID))
				if err := f.Mkdir(ld); err != nil {
					return err
				}
				if err := f.Symlink(l.DevDir(lun.ID, tpg.TPGT), filepath.Join(ld, lunLink)); err != nil {
					return fmt.Errorf("tcmu: export LUN %d on %s: %w", lun.ID, dir, err)
				}
			}
			for _, ini := range l.Initiators {
				if err := l.createACL(f, dir, ini); err != nil {
					return err
				}
			}
			// Any other initiator may log in and sees every LUN, as on
			// the pure-Go fabric.
			for _, kv := range [][2]string{{"generate_node_acls", "1"}, {"cache_dynamic_acls", "1"},
				{"demo_mode_write_protect", "0"}, {"authentication", "0"}} {
				if err := f.Write(filepath.Join(dir, "attrib", kv[0]), kv[1]); err != nil {
					return err
				}
			}
			if err := f.Write(filepath.Join(dir, "enable"), "1"); err != nil {
				return fmt.Errorf("tcmu: enable TPG %s: %w", dir, err)
			}
		}
	}
	return nil
}

// aclDir is an initiator's node ACL in a TPG, named as configured: LIO
// matches a login's initiator name to ACLs byte for byte.
func aclDir(tpgDir, ini string) string { return filepath.Join(tpgDir, "acls", ini) }

// createACL makes an explicit node ACL for ini with every LUN mapped at
// its own ID, made before the TPG is enabled, so no session of ini ever
// runs under a dynamic ACL (converting one in place queues REPORTED
// LUNS DATA HAS CHANGED on the host's other LUNs).
func (l Layout) createACL(f FS, tpgDir, ini string) error {
	acl := aclDir(tpgDir, ini)
	if err := f.Mkdir(acl); err != nil {
		return fmt.Errorf("tcmu: node ACL %s: %w", acl, err)
	}
	for _, lun := range l.LUNs {
		ml := filepath.Join(acl, fmt.Sprintf("lun_%d", lun.ID))
		if err := f.Mkdir(ml); err != nil {
			return fmt.Errorf("tcmu: mapped LUN %s: %w", ml, err)
		}
		if err := f.Symlink(filepath.Join(tpgDir, "lun", fmt.Sprintf("lun_%d", lun.ID)), filepath.Join(ml, lunLink)); err != nil {
			return fmt.Errorf("tcmu: map LUN %d for %s: %w", lun.ID, ini, err)
		}
	}
	return nil
}

// ACLSession tells whether ini has a session under its explicit ACL in
// a TPG (LIO's acls/<ini>/info: "No active iSCSI Session ..." or the
// session's details).
func (l Layout) ACLSession(f FS, iqn string, tpgt uint16, ini string) (bool, error) {
	s, err := f.Read(filepath.Join(aclDir(l.TPGDir(iqn, tpgt), ini), "info"))
	if err != nil {
		return false, err
	}
	return ParseACLInfo(s), nil
}

// ParseACLInfo reads an ACL's info attribute: true when it describes a
// session.
func ParseACLInfo(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && !strings.HasPrefix(s, "No active")
}

// ACLCommands is LIO's count of the commands ini sent to lun through a
// TPG (acls/<ini>/lun_N/statistics/scsi_auth_intr/num_cmds: counted at
// LUN lookup, so it includes what LIO answers itself).
func (l Layout) ACLCommands(f FS, iqn string, tpgt uint16, ini string, lun uint64) (uint64, error) {
	p := filepath.Join(aclDir(l.TPGDir(iqn, tpgt), ini), fmt.Sprintf("lun_%d", lun), "statistics", "scsi_auth_intr", "num_cmds")
	s, err := f.Read(p)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("tcmu: %s: %w", p, err)
	}
	return n, nil
}

// npName is LIO's network portal directory name: ip:port, IPv6 in [].
func npName(portal string) string { return portal }

func mkdirAll(f FS, p string) error {
	if f.Exists(p) {
		return nil
	}
	if err := mkdirAll(f, filepath.Dir(p)); err != nil {
		return err
	}
	if err := f.Mkdir(p); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("tcmu: mkdir %s: %w", p, err)
	}
	return nil
}

// Remove tears down what Create built (and what a previous aluad left
// after a crash): the targets' TPGs (disabled first, which ends their
// sessions), their LUNs and portals, then aluad's devices and their HBA.
// Missing pieces are skipped; the first other error is returned.
func (l Layout) Remove(f FS) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil && !errors.Is(err, fs.ErrNotExist) {
			first = err
		}
	}
	for _, t := range l.Targets {
		tdir := filepath.Join(l.Root, "iscsi", t.IQN)
		if !f.Exists(tdir) {
			continue
		}
		tpgs, _ := f.List(tdir)
		for _, tp := range tpgs {
			if !strings.HasPrefix(tp, "tpgt_") {
				continue
			}
			dir := filepath.Join(tdir, tp)
			_ = f.Write(filepath.Join(dir, "enable"), "0")
			// Mapped LUNs first: each links to a TPG LUN.
			acls, _ := f.List(filepath.Join(dir, "acls"))
			for _, a := range acls {
				ad := filepath.Join(dir, "acls", a)
				mls, _ := f.List(ad)
				for _, ml := range mls {
					if !strings.HasPrefix(ml, "lun_") {
						continue
					}
					unlinkAll(f, filepath.Join(ad, ml), keep)
					keep(f.Remove(filepath.Join(ad, ml)))
				}
				keep(f.Remove(ad))
			}
			luns, _ := f.List(filepath.Join(dir, "lun"))
			for _, ln := range luns {
				ld := filepath.Join(dir, "lun", ln)
				unlinkAll(f, ld, keep)
				keep(f.Remove(ld))
			}
			nps, _ := f.List(filepath.Join(dir, "np"))
			for _, np := range nps {
				keep(f.Remove(filepath.Join(dir, "np", np)))
			}
			keep(f.Remove(dir))
		}
		keep(f.Remove(tdir))
	}
	devs, _ := f.List(l.hbaDir())
	sort.Strings(devs)
	for _, d := range devs {
		if _, _, ok := ParseDeviceName(d); ok {
			keep(f.Remove(filepath.Join(l.hbaDir(), d)))
		}
	}
	if f.Exists(l.hbaDir()) {
		keep(f.Remove(l.hbaDir()))
	}
	return first
}

// lunAttrs are what a TPG LUN or a mapped LUN holds besides its link.
var lunAttrs = map[string]bool{"statistics": true, "write_protect": true, "alua_tg_pt_gp": true,
	"alua_tg_pt_offline": true, "alua_tg_pt_status": true, "alua_tg_pt_write_md": true}

// unlinkAll removes the links in a TPG LUN or mapped LUN, whatever their
// names (aluad's are lunLink; targetcli names them in hex).
func unlinkAll(f FS, dir string, keep func(error)) {
	names, _ := f.List(dir)
	for _, n := range names {
		if !lunAttrs[n] {
			keep(f.Remove(filepath.Join(dir, n)))
		}
	}
}

// lunLink is the name of the link from a TPG LUN to its device.
const lunLink = "aluad"

// SetState writes a device's kernel ALUA access state (the state LIO's
// own gate applies, and whose change makes LIO queue 2A/06 on every
// I_T nexus of the device).
func (l Layout) SetState(f FS, lun uint64, tpgt uint16, state byte) error {
	return f.Write(filepath.Join(l.DevDir(lun, tpgt), "alua", "default_tg_pt_gp", "alua_access_state"), fmt.Sprint(state))
}

// SetPortEnabled enables or disables one port's TPG. Disabling ends the
// TPG's sessions and refuses logins on it: a port down.
func (l Layout) SetPortEnabled(f FS, iqn string, tpgt uint16, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	return f.Write(filepath.Join(l.TPGDir(iqn, tpgt), "enable"), v)
}

// Sessions lists the initiators logged in to a TPG (LIO's
// dynamic_sessions: names separated by a newline and a NUL).
func (l Layout) Sessions(f FS, iqn string, tpgt uint16) ([]string, error) {
	s, err := f.Read(filepath.Join(l.TPGDir(iqn, tpgt), "dynamic_sessions"))
	if err != nil {
		return nil, err
	}
	return ParseDynamicSessions(s), nil
}

// ParseDynamicSessions splits the dynamic_sessions attribute.
func ParseDynamicSessions(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == 0 }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
