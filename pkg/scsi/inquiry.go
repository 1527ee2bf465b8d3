package scsi

import (
	"encoding/binary"
	"fmt"
)

// Limits advertised in the Block Limits VPD page (SBC-3 6.5.3) and enforced.
const (
	MaxTransferBlocks  = 65536 // 32 MiB at 512-byte blocks
	MaxCAWBlocks       = 255
	MaxUnmapBlocks     = 1 << 20
	MaxUnmapDescs      = 256
	MaxWriteSameBlocks = 1 << 22
	UnmapGranularity   = 8
)

// inquiry answers INQUIRY (SPC-4 6.6).
func inquiry(x *exec) ([]byte, error) {
	cdb := x.cdb()
	allocLen := int(be16(cdb[3:]))
	if cdb[1]&0x02 != 0 { // CMDDT is obsolete
		return nil, InvalidCDBField(1, 1)
	}
	evpd := cdb[1]&0x01 != 0
	if !evpd {
		if cdb[2] != 0 {
			return nil, InvalidCDBField(2, 7)
		}
		return alloc(x.standardInquiry(), allocLen), nil
	}
	if x.lu == nil {
		// SPC-4 6.6.2: a LUN that is not supported answers with qualifier
		// 011b; VPD pages for it are not available.
		return nil, Sense(ReasonLUNotSupported)
	}
	var page []byte
	switch cdb[2] {
	case 0x00:
		page = vpdPage(0x00, []byte{0x00, 0x80, 0x83, 0x86, 0xb0, 0xb1, 0xb2})
	case 0x80:
		page = vpdPage(0x80, []byte(x.lu.cfg.Identity.Serial))
	case 0x83:
		page = vpdPage(0x83, x.deviceIdentification())
	case 0x86:
		page = vpdPage(0x86, extendedInquiry())
	case 0xb0:
		page = vpdPage(0xb0, blockLimits(x.lu))
	case 0xb1:
		page = vpdPage(0xb1, blockCharacteristics(x.lu))
	case 0xb2:
		page = vpdPage(0xb2, provisioning())
	default:
		return nil, InvalidCDBField(2, 7)
	}
	return alloc(page, allocLen), nil
}

// TPGSImplicit is the TPGS field value for implicit ALUA only (SPC-4 6.6.2).
const TPGSImplicit = 0x01

func (x *exec) standardInquiry() []byte {
	b := make([]byte, 96)
	if x.lu == nil {
		b[0] = 0x7f // qualifier 011b: no LU here; device type 1Fh
	}
	b[2] = 0x06        // SPC-4
	b[3] = 0x10 | 0x02 // HISUP, response data format 2
	b[4] = byte(len(b) - 5)
	id := Identity{Vendor: "ALUAD", Product: "aluad", Revision: "0001"}
	if x.lu != nil {
		id = x.lu.cfg.Identity
		b[5] = x.s.tpgs() << 4
	}
	b[6] = 0x10 // MULTIP: more than one target port
	b[7] = 0x02 // CMDQUE
	copy(b[8:16], pad(id.Vendor, 8))
	copy(b[16:32], pad(id.Product, 16))
	copy(b[32:36], pad(id.Revision, 4))
	// Version descriptors (SPC-4 table 146): SAM-5, SPC-4, SBC-3, iSCSI.
	for i, v := range []uint16{0x00a0, 0x0460, 0x04c0, 0x0960} {
		binary.BigEndian.PutUint16(b[58+2*i:], v)
	}
	return b
}

func pad(s string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = ' '
	}
	copy(b, s)
	return b
}

func vpdPage(code byte, body []byte) []byte {
	b := make([]byte, 4, 4+len(body))
	b[1] = code
	binary.BigEndian.PutUint16(b[2:], uint16(len(body)))
	return append(b, body...)
}

// designator builds one identification descriptor (SPC-4 7.8.6.1).
func designator(proto, codeSet, assoc, typ byte, piv bool, id []byte) []byte {
	d := make([]byte, 4, 4+len(id))
	d[0] = proto<<4 | codeSet
	d[1] = assoc<<4 | typ
	if piv {
		d[1] |= 0x80
	}
	d[3] = byte(len(id))
	return append(d, id...)
}

const protoISCSI = 0x5

// deviceIdentification builds VPD 0x83 for the path the command came in on:
// the LU's NAA (the same on every path), a T10 vendor id, the relative
// target port (type 4), the target port group (type 5) and the target
// port's SCSI name (type 8), per SPC-4 7.8.6.
func (x *exec) deviceIdentification() []byte {
	id := x.lu.cfg.Identity
	var b []byte
	if len(id.NAA) > 0 {
		b = append(b, designator(0, 1, 0, 3, false, id.NAA)...)
	}
	t10 := append(pad(id.Vendor, 8), []byte(id.Serial)...)
	b = append(b, designator(0, 2, 0, 1, false, t10)...)
	port := x.c.Nexus.TargetPort
	rel := make([]byte, 4)
	binary.BigEndian.PutUint16(rel[2:], port)
	b = append(b, designator(protoISCSI, 1, 1, 4, true, rel)...)
	if grp, ok := x.s.portGroup(port); ok {
		g := make([]byte, 4)
		binary.BigEndian.PutUint16(g[2:], grp)
		b = append(b, designator(protoISCSI, 1, 1, 5, true, g)...)
	}
	if p, ok := x.s.targetPort(port); ok && p.Name != "" {
		b = append(b, designator(protoISCSI, 3, 1, 8, true, scsiName(p.Name))...)
	}
	return b
}

// scsiName NUL-terminates and pads a SCSI name string to a multiple of 4.
func scsiName(s string) []byte {
	n := (len(s) + 1 + 3) &^ 3
	b := make([]byte, n)
	copy(b, s)
	return b
}

// extendedInquiry is the Extended INQUIRY Data page (SPC-4 7.8.7): no
// protection information, SIMPLE task attributes (every command is run as
// one), a volatile write cache (WCE). LUICLR=0: a REPORTED LUNS DATA HAS
// CHANGED reported on one LU is cleared on that LU only.
func extendedInquiry() []byte {
	b := make([]byte, 0x3c)
	b[1] = 0x01 // SIMPSUP
	b[2] = 0x01 // V_SUP: a volatile cache; NV_SUP=0
	return b
}

func blockLimits(lu *LU) []byte {
	b := make([]byte, 0x3c)
	b[0] = 0x01 // WSNZ: a WRITE SAME of zero blocks is an error
	b[1] = MaxCAWBlocks
	binary.BigEndian.PutUint16(b[2:], UnmapGranularity) // optimal transfer length granularity
	binary.BigEndian.PutUint32(b[4:], MaxTransferBlocks)
	binary.BigEndian.PutUint32(b[8:], 2048) // optimal transfer length (1 MiB)
	binary.BigEndian.PutUint32(b[12:], MaxTransferBlocks)
	binary.BigEndian.PutUint32(b[16:], MaxUnmapBlocks)
	binary.BigEndian.PutUint32(b[20:], MaxUnmapDescs)
	binary.BigEndian.PutUint32(b[24:], UnmapGranularity)
	binary.BigEndian.PutUint32(b[28:], 0x80000000) // UGAVALID, alignment 0
	binary.BigEndian.PutUint64(b[32:], MaxWriteSameBlocks)
	return b
}

func blockCharacteristics(lu *LU) []byte {
	b := make([]byte, 0x3c)
	if lu.cfg.Rotational {
		binary.BigEndian.PutUint16(b[0:], 7200)
	} else {
		binary.BigEndian.PutUint16(b[0:], 1) // non-rotating medium
	}
	b[3] = 0x02 // nominal form factor: 3.5 inch
	return b
}

func provisioning() []byte {
	b := make([]byte, 4)
	// LBPU, LBPWS, LBPWS10, LBPRZ (unmapped blocks read as zeros).
	b[1] = 0x80 | 0x40 | 0x20 | 0x04
	b[2] = 0x02 // provisioning type: thin
	return b
}

// readCapacity10 answers READ CAPACITY(10) (SBC-3 5.15).
func readCapacity10(x *exec) ([]byte, error) {
	cdb := x.cdb()
	if cdb[8]&0x01 == 0 && be32(cdb[2:]) != 0 { // LBA without PMI
		return nil, InvalidCDBField(2, 7)
	}
	b := make([]byte, 8)
	last := x.lu.blocks() - 1
	if last > 0xffffffff {
		last = 0xffffffff
	}
	binary.BigEndian.PutUint32(b, uint32(last))
	binary.BigEndian.PutUint32(b[4:], uint32(x.lu.blockSize()))
	return b, nil
}

// PhysicalBlockExponent is log2(physical / logical) for READ
// CAPACITY(16), and whether physical is a power of two multiple of
// logical that the 4-bit field can carry.
func PhysicalBlockExponent(logical, physical int) (byte, bool) {
	for e := 0; e < 16; e++ {
		if logical<<e == physical {
			return byte(e), true
		}
	}
	return 0, false
}

// readCapacity16 answers READ CAPACITY(16) (SBC-3 5.16).
func readCapacity16(x *exec) ([]byte, error) {
	allocLen := int(be32(x.cdb()[10:]))
	b := make([]byte, 32)
	binary.BigEndian.PutUint64(b, x.lu.blocks()-1)
	binary.BigEndian.PutUint32(b[8:], uint32(x.lu.blockSize()))
	e, _ := PhysicalBlockExponent(x.lu.blockSize(), x.lu.cfg.PhysicalBlockSize)
	b[13] = e           // LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT; lowest aligned LBA 0
	b[14] = 0x80 | 0x40 // LBPME, LBPRZ
	return alloc(b, allocLen), nil
}

func serviceActionIn16(x *exec) ([]byte, error) {
	switch x.cdb()[1] & 0x1f {
	case SAReadCapacity16:
		return readCapacity16(x)
	case SAGetLBAStatus:
		return getLBAStatus(x)
	}
	return nil, InvalidCDBField(1, 4)
}

// reportLUNs answers REPORT LUNS (SPC-4 6.33). It also clears a pending
// REPORTED LUNS DATA HAS CHANGED unit attention on this nexus.
func reportLUNs(x *exec) ([]byte, error) {
	cdb := x.cdb()
	allocLen := int(be32(cdb[6:]))
	switch cdb[2] {
	case 0x00, 0x01, 0x02:
	default:
		return nil, InvalidCDBField(2, 7)
	}
	if allocLen < 16 {
		return nil, InvalidCDBField(6, 7)
	}
	luns := x.s.visible(x.c.Nexus)
	if cdb[2] == 0x01 { // well-known LUs only: we have none
		luns = nil
	}
	b := make([]byte, 8, 8+8*len(luns))
	for _, l := range luns {
		var e [8]byte
		if l < 256 {
			e[1] = byte(l)
		} else {
			e[0] = 0x40 | byte(l>>8)&0x3f
			e[1] = byte(l)
		}
		b = append(b, e[:]...)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-8))
	for _, l := range x.s.LUNs() {
		if lu := x.s.LU(l); lu != nil {
			lu.ua.clear(x.c.Nexus, ReasonUAReportedLUNsChanged)
		}
	}
	return alloc(b, allocLen), nil
}

func (s *Server) targetPort(id uint16) (TargetPortInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.ports[id]
	return p, ok
}

// portGroup returns the target port group of a port when ALUA is set up.
func (s *Server) portGroup(id uint16) (uint16, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.alua == nil {
		return 0, false
	}
	return s.alua.PortGroup(id)
}

func (s *Server) tpgs() byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.alua == nil {
		return 0
	}
	return s.alua.TPGS()
}

// String describes a LU for logs.
func (lu *LU) String() string {
	return fmt.Sprintf("LUN %d (%d x %d B)", lu.cfg.LUN, lu.cfg.Blocks, lu.cfg.BlockSize)
}

// maxLBAStatusDescs bounds one GET LBA STATUS answer.
const maxLBAStatusDescs = 256

// getLBAStatus answers GET LBA STATUS (SBC-3 5.16): from the starting LBA,
// consecutive runs of mapped (0) and deallocated (1) blocks, as many as
// the allocation length holds. A block partly mapped is mapped.
func getLBAStatus(x *exec) ([]byte, error) {
	cdb := x.cdb()
	lba := be64(cdb[2:])
	allocLen := int(be32(cdb[10:]))
	if lba >= x.lu.blocks() {
		return nil, Sense(ReasonLBAOutOfRange)
	}
	descs := min(maxLBAStatusDescs, max(allocLen-8, 0)/16)
	bs := int64(x.lu.blockSize())
	st, _ := x.lu.cfg.Backend.(LBAStatuser)
	b := make([]byte, 8, 8+16*max(descs, 1))
	for i := 0; lba < x.lu.blocks() && (i < descs || i == 0); i++ {
		end, mapped := x.lu.blocks(), true
		if st != nil {
			e, m, err := st.LBAStatus(x.via(), int64(lba)*bs)
			if err != nil {
				return nil, mediaErr(err, false)
			}
			mapped = m
			if mapped {
				end = uint64((e + bs - 1) / bs)
			} else {
				end = uint64(e / bs)
			}
			if end <= lba { // a block partly mapped
				end, mapped = lba+1, true
			}
		}
		end = min(end, x.lu.blocks(), lba+0xffffffff)
		d := make([]byte, 16)
		binary.BigEndian.PutUint64(d, lba)
		binary.BigEndian.PutUint32(d[8:], uint32(end-lba))
		if !mapped {
			d[12] = 0x01 // deallocated
		}
		b = append(b, d...)
		lba = end
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return alloc(b, allocLen), nil
}
