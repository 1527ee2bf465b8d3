package iscsi

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// KV is one key=value pair of a text or login data segment (RFC 7143 6.1).
// Order is preserved: negotiation answers in the order keys were offered.
type KV struct{ Key, Value string }

// Limits from RFC 7143 6.1: keys up to 63 bytes, values up to 255 bytes
// except for a few keys (8192 for ones carrying binary/large values).
const (
	maxKeyLen   = 63
	maxValueLen = 8192
)

// ErrText reports a malformed text segment.
var ErrText = errors.New("iscsi: malformed text key")

// ParseText splits a NUL-separated key=value data segment. Trailing padding
// NULs are accepted; an empty segment yields no pairs.
func ParseText(b []byte) ([]KV, error) {
	var out []KV
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		var item []byte
		if i < 0 {
			item, b = b, nil
		} else {
			item, b = b[:i], b[i+1:]
		}
		if len(item) == 0 {
			continue
		}
		eq := bytes.IndexByte(item, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("%w: %q has no key=value form", ErrText, truncate(item))
		}
		k, v := string(item[:eq]), string(item[eq+1:])
		if len(k) > maxKeyLen || len(v) > maxValueLen {
			return nil, fmt.Errorf("%w: %q too long", ErrText, truncate(item))
		}
		for _, c := range k {
			if !isKeyChar(c) {
				return nil, fmt.Errorf("%w: bad key %q", ErrText, truncate(item[:eq]))
			}
		}
		out = append(out, KV{k, v})
	}
	return out, nil
}

func isKeyChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '-' || c == '+' || c == '@' || c == '_'
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// AppendText serialises pairs as key=value\0 ...
func AppendText(b []byte, kvs []KV) []byte {
	for _, kv := range kvs {
		b = append(b, kv.Key...)
		b = append(b, '=')
		b = append(b, kv.Value...)
		b = append(b, 0)
	}
	return b
}

// Lookup returns the value of key in kvs.
func Lookup(kvs []KV, key string) (string, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// FormatISID renders an ISID as the 12 hex digits used in initiator port names.
func FormatISID(isid [6]byte) string {
	return fmt.Sprintf("%02x%02x%02x%02x%02x%02x", isid[0], isid[1], isid[2], isid[3], isid[4], isid[5])
}

// InitiatorPortName is the SCSI initiator port name for iSCSI (RFC 7143 10.1.2.? /
// SAM-5 annex): "<iqn>,i,0x<isid>".
func InitiatorPortName(iqn string, isid [6]byte) string {
	return strings.ToLower(iqn) + ",i,0x" + FormatISID(isid)
}

// TargetPortName is the SCSI target port name: "<iqn>,t,0x<tpgt>".
func TargetPortName(iqn string, tpgt uint16) string {
	return fmt.Sprintf("%s,t,0x%04x", strings.ToLower(iqn), tpgt)
}
