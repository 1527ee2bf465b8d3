package initiator

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/scsi"
)

// CheckError is a command that completed with a non-GOOD status.
type CheckError struct {
	Status byte
	Sense  []byte
}

func (e *CheckError) Error() string {
	if len(e.Sense) >= 14 && e.Sense[0]&0x7f == 0x70 {
		return fmt.Sprintf("scsi status 0x%02x sense %x/%02x/%02x", e.Status, e.Sense[2]&0x0f, e.Sense[12], e.Sense[13])
	}
	if len(e.Sense) >= 4 && e.Sense[0]&0x7f == 0x72 {
		return fmt.Sprintf("scsi status 0x%02x sense %x/%02x/%02x", e.Status, e.Sense[1]&0x0f, e.Sense[2], e.Sense[3])
	}
	return fmt.Sprintf("scsi status 0x%02x", e.Status)
}

// KeyASC returns the sense key, ASC and ASCQ of a CheckError.
func (e *CheckError) KeyASC() (key, asc, ascq byte) {
	if len(e.Sense) >= 14 && e.Sense[0]&0x7f == 0x70 {
		return e.Sense[2] & 0x0f, e.Sense[12], e.Sense[13]
	}
	if len(e.Sense) >= 4 {
		return e.Sense[1] & 0x0f, e.Sense[2], e.Sense[3]
	}
	return 0, 0, 0
}

func good(r *Result, err error) (*Result, error) {
	if err != nil {
		return nil, err
	}
	if r.Status != 0 {
		return r, &CheckError{Status: r.Status, Sense: r.Sense}
	}
	return r, nil
}

// Read16 reads n blocks of bs bytes at lba.
func (s *Session) Read16(ctx context.Context, lun, lba uint64, n uint32, bs int) ([]byte, error) {
	cdb := make([]byte, 16)
	cdb[0] = 0x88
	binary.BigEndian.PutUint64(cdb[2:], lba)
	binary.BigEndian.PutUint32(cdb[10:], n)
	r, err := good(s.Execute(ctx, lun, cdb, nil, int(n)*bs))
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// Write16 writes data (a whole number of blocks of bs) at lba.
func (s *Session) Write16(ctx context.Context, lun, lba uint64, data []byte, bs int, fua bool) error {
	cdb := make([]byte, 16)
	cdb[0] = 0x8a
	if fua {
		cdb[1] = 0x08
	}
	binary.BigEndian.PutUint64(cdb[2:], lba)
	binary.BigEndian.PutUint32(cdb[10:], uint32(len(data)/bs))
	_, err := good(s.Execute(ctx, lun, cdb, data, 0))
	return err
}

// TestUnitReady sends TEST UNIT READY.
func (s *Session) TestUnitReady(ctx context.Context, lun uint64) error {
	_, err := good(s.Execute(ctx, lun, make([]byte, 6), nil, 0))
	return err
}

// ClearUA sends TEST UNIT READY until it stops returning UNIT ATTENTION
// (at most max times) and returns the attentions seen as ASC/ASCQ pairs.
func (s *Session) ClearUA(ctx context.Context, lun uint64, max int) ([][2]byte, error) {
	var seen [][2]byte
	for i := 0; i < max; i++ {
		err := s.TestUnitReady(ctx, lun)
		if err == nil {
			return seen, nil
		}
		ce, ok := err.(*CheckError)
		if !ok {
			return seen, err
		}
		key, asc, ascq := ce.KeyASC()
		if key != 0x6 {
			return seen, err
		}
		seen = append(seen, [2]byte{asc, ascq})
	}
	return seen, fmt.Errorf("initiator: unit attentions did not clear after %d TEST UNIT READY", max)
}

// ReadCapacity16 returns the number of blocks and the block size.
func (s *Session) ReadCapacity16(ctx context.Context, lun uint64) (blocks uint64, bs int, err error) {
	cdb := make([]byte, 16)
	cdb[0], cdb[1] = 0x9e, 0x10
	binary.BigEndian.PutUint32(cdb[10:], 32)
	r, err := good(s.Execute(ctx, lun, cdb, nil, 32))
	if err != nil {
		return 0, 0, err
	}
	if len(r.Data) < 12 {
		return 0, 0, fmt.Errorf("initiator: short READ CAPACITY(16) data")
	}
	return binary.BigEndian.Uint64(r.Data) + 1, int(binary.BigEndian.Uint32(r.Data[8:])), nil
}

// Inquiry returns standard INQUIRY data or a VPD page.
func (s *Session) Inquiry(ctx context.Context, lun uint64, evpd bool, page byte) ([]byte, error) {
	cdb := make([]byte, 6)
	cdb[0] = 0x12
	if evpd {
		cdb[1] = 1
		cdb[2] = page
	}
	binary.BigEndian.PutUint16(cdb[3:], 4096)
	r, err := good(s.Execute(ctx, lun, cdb, nil, 4096))
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// ReportLUNs lists the LUNs.
func (s *Session) ReportLUNs(ctx context.Context) ([]uint64, error) {
	cdb := make([]byte, 12)
	cdb[0] = 0xa0
	binary.BigEndian.PutUint32(cdb[6:], 8192)
	r, err := good(s.Execute(ctx, 0, cdb, nil, 8192))
	if err != nil {
		return nil, err
	}
	if len(r.Data) < 8 {
		return nil, fmt.Errorf("initiator: short REPORT LUNS data")
	}
	n := int(binary.BigEndian.Uint32(r.Data)) / 8
	var out []uint64
	for i := 0; i < n && 8+8*i+8 <= len(r.Data); i++ {
		e := r.Data[8+8*i:]
		switch e[0] >> 6 {
		case 0:
			out = append(out, uint64(e[1]))
		case 1:
			out = append(out, uint64(e[0]&0x3f)<<8|uint64(e[1]))
		}
	}
	return out, nil
}

// SyncCache sends SYNCHRONIZE CACHE(10) for the whole LU.
func (s *Session) SyncCache(ctx context.Context, lun uint64) error {
	cdb := make([]byte, 10)
	cdb[0] = 0x35
	_, err := good(s.Execute(ctx, lun, cdb, nil, 0))
	return err
}

// ReportTargetPortGroups sends REPORT TARGET PORT GROUPS (SPC-4 6.36) in
// the extended or length-only format and returns the raw parameter data.
func (s *Session) ReportTargetPortGroups(ctx context.Context, lun uint64, extended bool) ([]byte, error) {
	cdb := []byte{0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}
	if extended {
		cdb[1] |= 0x20
	}
	r, err := good(s.Execute(ctx, lun, cdb, nil, 4096))
	if err != nil {
		return nil, err
	}
	return r.Data, nil
}

// SetTargetPortGroups sends SET TARGET PORT GROUPS (SPC-4 6.46): MAINTENANCE
// OUT, service action 0Ah, asking for the states in reqs.
func (s *Session) SetTargetPortGroups(ctx context.Context, lun uint64, reqs []alua.GroupRequest) error {
	params := scsi.AppendSTPG(nil, reqs)
	cdb := make([]byte, 12)
	cdb[0], cdb[1] = 0xa4, 0x0a
	binary.BigEndian.PutUint32(cdb[6:], uint32(len(params)))
	_, err := good(s.Execute(ctx, lun, cdb, params, 0))
	return err
}
