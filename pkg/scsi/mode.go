package scsi

import "encoding/binary"

// modeState holds the changeable mode parameters of a LU (SPC-4 7.5).
type modeState struct {
	wce    bool // caching page: write cache enable
	rcd    bool // caching page: read cache disable
	dsense bool // control page: descriptor-format sense
	swp    bool // control page: software write protect
}

func defaultModeState() modeState { return modeState{wce: true} }

// ModeParams are a LU's changeable mode parameters: what MODE SELECT with
// SP=1 saves, MODE SENSE reports as saved values, and a restart restores
// (the daemon keeps them in its state).
type ModeParams struct {
	// WCE: write-back caching (false: every write is on stable media
	// before GOOD, as with FUA).
	WCE    bool `json:"wce"`
	RCD    bool `json:"rcd,omitempty"`
	DSense bool `json:"dsense,omitempty"`
	SWP    bool `json:"swp,omitempty"`
}

// DefaultModeParams are the parameters a LU starts with.
func DefaultModeParams() ModeParams { return defaultModeState().params() }

func (m modeState) params() ModeParams {
	return ModeParams{WCE: m.wce, RCD: m.rcd, DSense: m.dsense, SWP: m.swp}
}

func (p ModeParams) state() modeState {
	return modeState{wce: p.WCE, rcd: p.RCD, dsense: p.DSense, swp: p.SWP}
}

// SavedMode returns the LU's saved mode parameters.
func (lu *LU) SavedMode() ModeParams {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	return lu.saved.params()
}

// RestoreMode makes p the LU's saved and current mode parameters (at
// start, from the saved state).
func (lu *LU) RestoreMode(p ModeParams) {
	lu.mu.Lock()
	defer lu.mu.Unlock()
	lu.saved = p.state()
	lu.setMode(lu.saved)
}

// setMode makes m current; lu.mu is held.
func (lu *LU) setMode(m modeState) {
	lu.mode = m
	lu.writeThrough.Store(!m.wce)
}

// modePage is one supported page: its code, how to render it for a page
// control value, and the mask of changeable bits.
type modePage struct {
	code   byte
	render func(m modeState) []byte
	mask   []byte // changeable bits (same layout as render output)
	apply  func(m *modeState, p []byte)
}

var modePages = []modePage{
	{ // Read-Write Error Recovery (SBC-3 6.4.9)
		code: 0x01,
		render: func(modeState) []byte {
			b := make([]byte, 12)
			b[0], b[1], b[2] = 0x01, 10, 0xc0 // AWRE, ARRE
			return b
		},
		mask: make([]byte, 12),
	},
	{ // Caching (SBC-3 6.4.5)
		code: 0x08,
		render: func(m modeState) []byte {
			b := make([]byte, 20)
			b[0], b[1] = 0x80|0x08, 18 // PS: saved with SP=1
			if m.wce {
				b[2] |= 0x04
			}
			if m.rcd {
				b[2] |= 0x01
			}
			return b
		},
		mask:  []byte{0, 0, 0x05, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		apply: func(m *modeState, p []byte) { m.wce, m.rcd = p[2]&0x04 != 0, p[2]&0x01 != 0 },
	},
	{ // Control (SPC-4 7.5.8)
		code: 0x0a,
		render: func(m modeState) []byte {
			b := make([]byte, 12)
			b[0], b[1] = 0x80|0x0a, 10 // PS: saved with SP=1
			if m.dsense {
				b[2] |= 0x04
			}
			b[3] = 0x10 // QUEUE ALGORITHM MODIFIER 1: unrestricted reordering
			if m.swp {
				b[4] |= 0x08
			}
			b[5] = 0x40                               // TAS: aborted tasks get TASK ABORTED
			binary.BigEndian.PutUint16(b[8:], 0xffff) // busy timeout: unlimited
			return b
		},
		mask: []byte{0, 0, 0x04, 0, 0x08, 0, 0, 0, 0, 0, 0, 0},
		apply: func(m *modeState, p []byte) {
			m.dsense, m.swp = p[2]&0x04 != 0, p[4]&0x08 != 0
		},
	},
	{ // Informational Exceptions Control (SPC-4 7.5.11)
		code: 0x1c,
		render: func(modeState) []byte {
			b := make([]byte, 12)
			b[0], b[1] = 0x1c, 10
			b[2] = 0x08 // DEXCPT: exceptions reporting disabled
			return b
		},
		mask: make([]byte, 12),
	},
}

func findModePage(code byte) *modePage {
	for i := range modePages {
		if modePages[i].code == code {
			return &modePages[i]
		}
	}
	return nil
}

// modePagesFor renders the requested page(s) for page control pc.
func (x *exec) modePagesFor(pc, code, sub byte) ([]byte, error) {
	if sub != 0 && !(code == 0x3f && sub == 0xff) {
		return nil, InvalidCDBField(3, 7)
	}
	x.lu.mu.Lock()
	cur, saved := x.lu.mode, x.lu.saved
	x.lu.mu.Unlock()
	one := func(p *modePage) []byte {
		switch pc {
		case 1:
			return append([]byte{p.code, p.mask[1]}, p.mask[2:]...)
		case 2:
			return p.render(defaultModeState())
		case 3:
			return p.render(saved)
		}
		return p.render(cur)
	}
	if code == 0x3f {
		var b []byte
		for i := range modePages {
			b = append(b, one(&modePages[i])...)
		}
		return b, nil
	}
	p := findModePage(code)
	if p == nil {
		return nil, InvalidCDBField(2, 5)
	}
	b := one(p)
	if pc == 1 {
		b[1] = byte(len(b) - 2)
	}
	return b, nil
}

// deviceSpecific is the device-specific parameter of the mode header
// (SBC-3 6.4.1): WP and DPOFUA.
func (x *exec) deviceSpecific() byte {
	b := byte(0x10) // DPOFUA
	if x.writable() != nil {
		b |= 0x80
	}
	return b
}

func (x *exec) blockDescriptor(long bool) []byte {
	bs := uint32(x.lu.blockSize())
	if long {
		b := make([]byte, 16)
		binary.BigEndian.PutUint64(b, x.lu.blocks())
		binary.BigEndian.PutUint32(b[12:], bs)
		return b
	}
	b := make([]byte, 8)
	n := x.lu.blocks()
	if n > 0xffffffff {
		n = 0xffffffff
	}
	binary.BigEndian.PutUint32(b, uint32(n))
	b[5], b[6], b[7] = byte(bs>>16), byte(bs>>8), byte(bs)
	return b
}

// modeSense6 answers MODE SENSE(6) (SPC-4 6.11).
func modeSense6(x *exec) ([]byte, error) {
	cdb := x.cdb()
	pages, err := x.modePagesFor(cdb[2]>>6, cdb[2]&0x3f, cdb[3])
	if err != nil {
		return nil, err
	}
	var bd []byte
	if cdb[1]&0x08 == 0 {
		bd = x.blockDescriptor(false)
	}
	b := []byte{0, 0, x.deviceSpecific(), byte(len(bd))}
	b = append(append(b, bd...), pages...)
	b[0] = byte(len(b) - 1)
	return alloc(b, int(cdb[4])), nil
}

// modeSense10 answers MODE SENSE(10) (SPC-4 6.12).
func modeSense10(x *exec) ([]byte, error) {
	cdb := x.cdb()
	pages, err := x.modePagesFor(cdb[2]>>6, cdb[2]&0x3f, cdb[3])
	if err != nil {
		return nil, err
	}
	var bd []byte
	long := cdb[1]&0x10 != 0
	if cdb[1]&0x08 == 0 {
		bd = x.blockDescriptor(long)
	}
	b := make([]byte, 8)
	b[3] = x.deviceSpecific()
	if long && bd != nil {
		b[4] = 0x01 // LONGLBA
	}
	binary.BigEndian.PutUint16(b[6:], uint16(len(bd)))
	b = append(append(b, bd...), pages...)
	binary.BigEndian.PutUint16(b, uint16(len(b)-2))
	return alloc(b, int(be16(cdb[7:]))), nil
}

func modeSelect6(x *exec) ([]byte, error) {
	cdb := x.cdb()
	return nil, x.modeSelect(cdb[1], int(cdb[4]), 4)
}

func modeSelect10(x *exec) ([]byte, error) {
	cdb := x.cdb()
	return nil, x.modeSelect(cdb[1], int(be16(cdb[7:])), 8)
}

// modeSelect applies a MODE SELECT parameter list (SPC-4 6.9, 6.10): only
// changeable bits may differ from the current values; anything else is
// INVALID FIELD IN PARAMETER LIST and nothing is applied.
func (x *exec) modeSelect(flags byte, plen, hdrLen int) error {
	x.dataOutLen = plen
	save := flags&0x01 != 0 // SP: save the pages as well
	if plen == 0 {
		return nil
	}
	if plen < hdrLen {
		return Sense(ReasonParamListLength)
	}
	d, err := x.dataOut(plen)
	if err != nil {
		return err
	}
	var bdLen int
	if hdrLen == 4 {
		bdLen = int(d[3])
	} else {
		bdLen = int(be16(d[6:]))
	}
	if hdrLen+bdLen > plen {
		return Sense(ReasonParamListLength)
	}
	x.lu.mu.Lock()
	next := x.lu.mode
	x.lu.mu.Unlock()
	rest := d[hdrLen+bdLen:]
	for len(rest) > 0 {
		if len(rest) < 2 || rest[0]&0x40 != 0 { // SPF (subpage format) unsupported
			return Sense(ReasonInvalidFieldInParam)
		}
		p := findModePage(rest[0] & 0x3f)
		if p == nil {
			return Sense(ReasonInvalidFieldInParam)
		}
		n := int(rest[1]) + 2
		if n != len(p.mask) || n > len(rest) {
			return Sense(ReasonParamListLength)
		}
		cur := p.render(next)
		for i := 2; i < n; i++ {
			if (rest[i]^cur[i])&^p.mask[i] != 0 {
				return Sense(ReasonInvalidFieldInParam)
			}
		}
		if p.apply != nil {
			p.apply(&next, rest[:n])
		}
		rest = rest[n:]
	}
	x.lu.mu.Lock()
	changed := x.lu.mode != next
	x.lu.setMode(next)
	saved := save && x.lu.saved != next
	if save {
		x.lu.saved = next
	}
	x.lu.mu.Unlock()
	if saved && x.s.onPersist != nil {
		x.s.onPersist(x.c.LUN)
	}
	if changed {
		x.desc = next.dsense
		x.s.mu.RLock()
		for n := range x.s.nexuses {
			if n != x.c.Nexus {
				x.lu.ua.add(n, ReasonUAModeParamsChanged)
			}
		}
		x.s.mu.RUnlock()
	}
	return nil
}
