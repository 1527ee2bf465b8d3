package qemulab

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MPath is one multipath map as `multipath -ll` prints it.
type MPath struct {
	Name, WWID, DM, Vendor string
	Features, HWHandler    string
	Groups                 []PathGroup
}

// PathGroup is one priority group of a map.
type PathGroup struct {
	Policy string
	Prio   int
	Status string // active, enabled, disabled
	Paths  []MPathPath
}

// MPathPath is one path of a group.
type MPathPath struct {
	HCTL, Dev              string
	DMState, Check, Online string
}

var (
	// A WWID is whatever udev's scsi_id made of the best designator: "3..."
	// from an NAA, "1VENDOR_SERIAL" from a T10 vendor id.
	reMap   = regexp.MustCompile(`^(\S+) \((\S+)\) (dm-\d+) (.*)$`)
	reMap2  = regexp.MustCompile(`^(\S+) (dm-\d+) (.*)$`) // user_friendly_names no
	reGroup = regexp.MustCompile(`policy='([^']*)' prio=(-?\d+) status=(\w+)`)
	rePath  = regexp.MustCompile(`(\d+:\d+:\d+:\d+) (\S+) +\d+:\d+ +(\w+) +(\w+) +(\w+)`)
	reFeat  = regexp.MustCompile(`features='([^']*)' hwhandler='([^']*)'`)
)

// ParseMultipathLL parses `multipath -ll` output.
func ParseMultipathLL(out string) ([]MPath, error) {
	var maps []MPath
	var cur *MPath
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, " \r")
		if line == "" {
			continue
		}
		if m := reMap.FindStringSubmatch(line); m != nil {
			maps = append(maps, MPath{Name: m[1], WWID: m[2], DM: m[3], Vendor: m[4]})
			cur = &maps[len(maps)-1]
			continue
		}
		if m := reMap2.FindStringSubmatch(line); m != nil {
			maps = append(maps, MPath{Name: m[1], WWID: m[1], DM: m[2], Vendor: m[3]})
			cur = &maps[len(maps)-1]
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("multipath -ll: a line before any map: %q", line)
		}
		if m := reFeat.FindStringSubmatch(line); m != nil {
			cur.Features, cur.HWHandler = m[1], m[2]
			continue
		}
		if m := reGroup.FindStringSubmatch(line); m != nil {
			p, _ := strconv.Atoi(m[2])
			cur.Groups = append(cur.Groups, PathGroup{Policy: m[1], Prio: p, Status: m[3]})
			continue
		}
		if m := rePath.FindStringSubmatch(line); m != nil {
			if len(cur.Groups) == 0 {
				return nil, fmt.Errorf("multipath -ll: a path before any group: %q", line)
			}
			g := &cur.Groups[len(cur.Groups)-1]
			g.Paths = append(g.Paths, MPathPath{HCTL: m[1], Dev: m[2], DMState: m[3], Check: m[4], Online: m[5]})
			continue
		}
		if strings.HasPrefix(line, "size=") {
			continue
		}
		return nil, fmt.Errorf("multipath -ll: unexpected line %q", line)
	}
	return maps, nil
}

// ActiveGroup returns the group dm-multipath sends I/O to (status
// active), or the highest-priority one if none is marked active.
func (m MPath) ActiveGroup() *PathGroup {
	best := -1
	for i, g := range m.Groups {
		if g.Status == "active" {
			return &m.Groups[i]
		}
		if best < 0 || g.Prio > m.Groups[best].Prio {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	return &m.Groups[best]
}

// Paths returns every path of the map.
func (m MPath) Paths() []MPathPath {
	var out []MPathPath
	for _, g := range m.Groups {
		out = append(out, g.Paths...)
	}
	return out
}

// DiskPath says where a guest's SCSI disk leads: the portal (address) of
// the target port and the LUN.
type DiskPath struct {
	Dev    string
	Portal string // "10.77.1.10:3260"
	LUN    uint64
}

// DiskScript prints "dev portal lun" for each iSCSI disk of an open-iscsi
// guest, from sysfs.
const DiskScript = `for d in /sys/block/sd*; do
  [ -e "$d" ] || continue
  s=$(readlink -f $d/device); sess=$(echo "$s" | grep -o 'session[0-9]*' | head -1)
  [ -n "$sess" ] || continue
  c=$(ls -d /sys/class/iscsi_connection/connection${sess#session}:* | head -1)
  echo "$(basename $d) $(cat $c/persistent_address):$(cat $c/persistent_port) ${s##*:}"
done`

// scsiBlockScript prints "dev hctl" for every SCSI disk (QEMU scsi-block
// guests, whose target id is the drive's index).
const scsiBlockScript = `for d in /sys/block/sd*; do [ -e "$d" ] && echo "$(basename $d) $(basename $(readlink -f $d/device))"; done`

// ParseDisks parses DiskScript's output.
func ParseDisks(out string) ([]DiskPath, error) {
	var ds []DiskPath
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("disk line %q: want dev portal lun", line)
		}
		lun, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("disk line %q: %v", line, err)
		}
		ds = append(ds, DiskPath{Dev: f[0], Portal: f[1], LUN: lun})
	}
	return ds, nil
}

// FioResult is what a fio run reports, per job.
type FioResult struct {
	Jobs []FioJob `json:"jobs"`
}

// FioJob is one fio job's totals.
type FioJob struct {
	Name  string  `json:"jobname"`
	Error int     `json:"error"`
	Read  FioDirn `json:"read"`
	Write FioDirn `json:"write"`
}

// FioDirn is one direction's totals.
type FioDirn struct {
	IOs  uint64  `json:"total_ios"`
	IOPS float64 `json:"iops"`
	Lat  struct {
		Max  float64 `json:"max"`
		Mean float64 `json:"mean"`
	} `json:"clat_ns"`
}
