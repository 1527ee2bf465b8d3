package tcmu

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The TCMU generic netlink family ("TCM-USER", version 2) and its one
// multicast group, "config" (uapi target_core_user.h, target_core_user.c).
const (
	FamilyName  = "TCM-USER"
	familyVer   = 2
	ConfigGroup = "config"

	CmdAddedDevice        = 1
	CmdRemovedDevice      = 2
	CmdReconfigDevice     = 3
	CmdAddedDeviceDone    = 4
	CmdRemovedDeviceDone  = 5
	CmdReconfigDeviceDone = 6
	CmdSetFeatures        = 7

	AttrDevice           = 1 // string: the UIO name, tcm-user/<hba>/<dev>/<dev_config>
	AttrMinor            = 2 // u32: the UIO minor
	AttrDevCfg           = 4 // string (reconfig)
	AttrDevSize          = 5 // u64 (reconfig)
	AttrWriteCache       = 6 // u8 (reconfig)
	AttrCmdStatus        = 7 // s32 (replies)
	AttrDeviceID         = 8 // u32: the se_device index, echoed in replies
	AttrSuppKernCmdReply = 9 // u8 (set features)

	nlmsgHdrLen          = 16
	genlHdrLen           = 4
	nlaHdrLen            = 4
	nlmNoop              = 1
	nlmError             = 2
	nlmDone              = 3
	genlIDCtrl           = 0x10
	ctrlCmdGetFamily     = 3
	ctrlAttrFamilyID     = 1
	ctrlAttrFamilyName   = 2
	ctrlAttrMcastGroups  = 7
	ctrlAttrMcastGrpName = 1
	ctrlAttrMcastGrpID   = 2
	nlmFRequest          = 0x1
	nlmFAck              = 0x4
)

// Event is one TCMU netlink notification from the kernel.
type Event struct {
	Cmd      byte
	Device   string // tcm-user/<hba>/<name>/<dev_config>
	Minor    uint32
	DeviceID uint32
	HasID    bool
	// Reconfiguration.
	DevCfg     string
	DevSize    uint64
	WriteCache *bool
}

// Name is the device's name (the configfs directory) from the UIO name.
func (e Event) Name() string {
	hba, name, cfg, ok := SplitUIOName(e.Device)
	_, _ = hba, cfg
	if !ok {
		return ""
	}
	return name
}

// SplitUIOName splits a TCMU UIO name, tcm-user/<hba>/<name>[/<config>].
func SplitUIOName(s string) (hba, name, config string, ok bool) {
	const pfx = "tcm-user/"
	if len(s) <= len(pfx) || s[:len(pfx)] != pfx {
		return "", "", "", false
	}
	rest := s[len(pfx):]
	i := indexByte(rest, '/')
	if i <= 0 {
		return "", "", "", false
	}
	hba, rest = rest[:i], rest[i+1:]
	j := indexByte(rest, '/')
	if j < 0 {
		return hba, rest, "", rest != ""
	}
	return hba, rest[:j], rest[j+1:], j > 0
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// nlAttrs walks netlink attributes; a malformed one ends the walk with
// an error (never a panic).
func nlAttrs(b []byte, fn func(typ uint16, val []byte) error) error {
	for len(b) > 0 {
		if len(b) < nlaHdrLen {
			return errors.New("netlink: truncated attribute header")
		}
		l := int(binary.LittleEndian.Uint16(b))
		typ := binary.LittleEndian.Uint16(b[2:]) & 0x3fff // without NESTED / BYTEORDER flags
		if l < nlaHdrLen || l > len(b) {
			return fmt.Errorf("netlink: attribute %d of length %d in %d bytes", typ, l, len(b))
		}
		if err := fn(typ, b[nlaHdrLen:l]); err != nil {
			return err
		}
		al := (l + 3) &^ 3
		if al > len(b) {
			al = len(b)
		}
		b = b[al:]
	}
	return nil
}

func nlString(v []byte) string {
	for i, c := range v {
		if c == 0 {
			return string(v[:i])
		}
	}
	return string(v)
}

func nlU32(v []byte) (uint32, error) {
	if len(v) < 4 {
		return 0, errors.New("netlink: short u32 attribute")
	}
	return binary.LittleEndian.Uint32(v), nil
}

// nlMessages walks the netlink messages of a datagram: kernel errors end
// the walk as errors, NOOP and DONE are skipped, the rest go to fn with
// their type and body.
func nlMessages(b []byte, fn func(typ uint16, body []byte) error) error {
	for len(b) > 0 {
		if len(b) < nlmsgHdrLen {
			return errors.New("netlink: truncated message header")
		}
		l := int(binary.LittleEndian.Uint32(b))
		typ := binary.LittleEndian.Uint16(b[4:])
		if l < nlmsgHdrLen || l > len(b) {
			return fmt.Errorf("netlink: message of length %d in %d bytes", l, len(b))
		}
		body := b[nlmsgHdrLen:l]
		switch typ {
		case nlmError:
			if len(body) >= 4 {
				if errno := int32(binary.LittleEndian.Uint32(body)); errno != 0 {
					return fmt.Errorf("netlink: kernel error %d", -errno)
				}
			}
		case nlmNoop, nlmDone:
		default:
			if err := fn(typ, body); err != nil {
				return err
			}
		}
		b = b[min((l+3)&^3, len(b)):]
	}
	return nil
}

// ParseMessages splits a datagram into netlink messages and decodes the
// TCMU events among them (messages of other families are skipped when
// family is non-zero and differs). Kernel errors are returned as errors.
func ParseMessages(b []byte, family uint16) ([]Event, error) {
	var out []Event
	err := nlMessages(b, func(typ uint16, body []byte) error {
		if family != 0 && typ != family {
			return nil
		}
		e, err := parseEvent(body)
		if err == nil {
			out = append(out, e)
		}
		return err
	})
	return out, err
}

func parseEvent(body []byte) (Event, error) {
	if len(body) < genlHdrLen {
		return Event{}, errors.New("netlink: truncated generic header")
	}
	e := Event{Cmd: body[0]}
	err := nlAttrs(body[genlHdrLen:], func(typ uint16, v []byte) error {
		var err error
		switch typ {
		case AttrDevice:
			e.Device = nlString(v)
		case AttrMinor:
			e.Minor, err = nlU32(v)
		case AttrDeviceID:
			e.DeviceID, err = nlU32(v)
			e.HasID = err == nil
		case AttrDevCfg:
			e.DevCfg = nlString(v)
		case AttrDevSize:
			if len(v) < 8 {
				return errors.New("netlink: short u64 attribute")
			}
			e.DevSize = binary.LittleEndian.Uint64(v)
		case AttrWriteCache:
			if len(v) < 1 {
				return errors.New("netlink: empty u8 attribute")
			}
			wc := v[0] != 0
			e.WriteCache = &wc
		}
		return err
	})
	return e, err
}

// appendAttr appends one attribute, padded to 4 bytes.
func appendAttr(b []byte, typ uint16, val []byte) []byte {
	l := nlaHdrLen + len(val)
	b = binary.LittleEndian.AppendUint16(b, uint16(l))
	b = binary.LittleEndian.AppendUint16(b, typ)
	b = append(b, val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// genlMessage builds one generic netlink request.
func genlMessage(family uint16, flags uint16, seq uint32, cmd, version byte, attrs []byte) []byte {
	l := nlmsgHdrLen + genlHdrLen + len(attrs)
	b := make([]byte, 0, l)
	b = binary.LittleEndian.AppendUint32(b, uint32(l))
	b = binary.LittleEndian.AppendUint16(b, family)
	b = binary.LittleEndian.AppendUint16(b, nlmFRequest|flags)
	b = binary.LittleEndian.AppendUint32(b, seq)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, cmd, version, 0, 0)
	return append(b, attrs...)
}

// ReplyMessage is the kernel's expected answer to an added, removed or
// reconfigured device event (TCMU_CMD_*_DONE with the device id and a
// status, 0 or a negative errno).
func ReplyMessage(family uint16, seq uint32, e Event, status int32) ([]byte, error) {
	var cmd byte
	switch e.Cmd {
	case CmdAddedDevice:
		cmd = CmdAddedDeviceDone
	case CmdRemovedDevice:
		cmd = CmdRemovedDeviceDone
	case CmdReconfigDevice:
		cmd = CmdReconfigDeviceDone
	default:
		return nil, fmt.Errorf("tcmu: no reply to netlink command %d", e.Cmd)
	}
	if !e.HasID {
		return nil, errors.New("tcmu: the event carries no device id to reply to")
	}
	var a []byte
	a = appendAttr(a, AttrCmdStatus, binary.LittleEndian.AppendUint32(nil, uint32(status)))
	a = appendAttr(a, AttrDeviceID, binary.LittleEndian.AppendUint32(nil, e.DeviceID))
	return genlMessage(family, nlmFAck, seq, cmd, familyVer, a), nil
}

// getFamilyMessage asks the generic netlink controller for a family.
func getFamilyMessage(seq uint32, name string) []byte {
	return genlMessage(genlIDCtrl, nlmFAck, seq, ctrlCmdGetFamily, 1, appendAttr(nil, ctrlAttrFamilyName, append([]byte(name), 0)))
}

// parseFamily reads the controller's answer: the family id and its
// multicast groups by name.
func parseFamily(b []byte) (id uint16, groups map[string]uint32, err error) {
	groups = map[string]uint32{}
	err = nlMessages(b, func(typ uint16, body []byte) error {
		if typ != genlIDCtrl {
			return nil
		}
		if len(body) < genlHdrLen {
			return errors.New("netlink: truncated generic header")
		}
		return nlAttrs(body[genlHdrLen:], func(t uint16, v []byte) error {
			switch t {
			case ctrlAttrFamilyID:
				if len(v) < 2 {
					return errors.New("netlink: short family id")
				}
				id = binary.LittleEndian.Uint16(v)
			case ctrlAttrMcastGroups:
				return nlAttrs(v, func(_ uint16, grp []byte) error {
					var name string
					var gid uint32
					err := nlAttrs(grp, func(t uint16, v []byte) error {
						var err error
						switch t {
						case ctrlAttrMcastGrpName:
							name = nlString(v)
						case ctrlAttrMcastGrpID:
							gid, err = nlU32(v)
						}
						return err
					})
					if name != "" {
						groups[name] = gid
					}
					return err
				})
			}
			return nil
		})
	})
	if err != nil {
		return 0, nil, fmt.Errorf("%w (is target_core_user loaded?)", err)
	}
	if id == 0 {
		return 0, nil, errors.New("netlink: no family id in the answer")
	}
	return id, groups, nil
}
