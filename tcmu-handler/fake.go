package tcmu

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// FakeRegion plays the kernel's side of a TCMU shared region in memory,
// as target_core_user.c lays it out: the mailbox, a command ring right
// after it, and a data area after the ring. Tests (here and in the
// front end) queue commands into it, run a Ring over Mem, and reap the
// responses, with no kernel. It is not safe for concurrent Queue/Reap;
// the Ring side may run concurrently.
type FakeRegion struct {
	Mem      []byte
	CmdrSize uint32
	// PageSize splits data buffers into iovecs of at most this many bytes
	// (the kernel hands out one iovec per run of data pages).
	PageSize int

	head, cleaned uint32
	dataNext      int
	queued        map[uint16]fakeCmd
	nextID        uint16
}

type fakeCmd struct {
	off      uint32
	dataLen  int
	dataIOVs []IOVec
}

// NewFakeRegion makes a region with a ring of cmdrSize bytes (a multiple
// of 8) and dataSize bytes of data area, and the mailbox flags given.
func NewFakeRegion(cmdrSize uint32, dataSize int, flags uint16) *FakeRegion {
	f := &FakeRegion{Mem: make([]byte, MailboxSize+int(cmdrSize)+dataSize), CmdrSize: cmdrSize, PageSize: 4096,
		queued: map[uint16]fakeCmd{}, nextID: 1}
	le := binary.LittleEndian
	le.PutUint16(f.Mem[mbVersion:], MailboxVersion)
	le.PutUint16(f.Mem[mbFlags:], flags)
	le.PutUint32(f.Mem[mbCmdrOff:], MailboxSize)
	le.PutUint32(f.Mem[mbCmdrSize:], cmdrSize)
	return f
}

func (f *FakeRegion) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&f.Mem[off])) }

func (f *FakeRegion) tail() uint32 { return atomic.LoadUint32(f.word(mbCmdTail)) }

func (f *FakeRegion) free() uint32 {
	// One byte short of full, as the kernel keeps head != tail-when-full.
	t := f.tail()
	if f.head >= t {
		return f.CmdrSize - (f.head - t) - 8
	}
	return t - f.head - 8
}

// Pad writes a PAD entry of n bytes at the head (what the kernel does
// when the next command would not fit before the ring's end).
func (f *FakeRegion) Pad(n uint32) {
	off := MailboxSize + int(f.head)
	binary.LittleEndian.PutUint32(f.Mem[off:], n|OpPad)
	f.advance(n)
}

func (f *FakeRegion) advance(n uint32) {
	f.head = (f.head + n) % f.CmdrSize
	atomic.StoreUint32(f.word(mbCmdHead), f.head)
}

// Queue puts a command in the ring: its CDB, data-out (written into the
// data area) or a data-in buffer of dataIn bytes. It returns the command
// id, or an error when the ring or data area is full.
func (f *FakeRegion) Queue(cdb []byte, dataOut []byte, dataIn int) (uint16, error) {
	n := dataIn
	if dataOut != nil {
		n = len(dataOut)
	}
	var iovs []IOVec
	dataStart := MailboxSize + int(f.CmdrSize)
	for left := n; left > 0; {
		k := min(left, f.PageSize)
		if dataStart+f.dataNext+k > len(f.Mem) {
			f.dataNext = 0 // the fake reuses the data area from its start
		}
		off := dataStart + f.dataNext
		iovs = append(iovs, IOVec{Off: uint64(off), Len: uint64(k)})
		f.dataNext += k
		left -= k
	}
	if dataOut != nil {
		rest := dataOut
		for _, v := range iovs {
			rest = rest[copy(f.Mem[v.Off:v.Off+v.Len], rest):]
		}
	}
	// As the kernel: the CDB follows the iovecs (or the response's end,
	// whichever is later) and the entry is rounded up to 8 bytes.
	base := max(uint32(reqIOV+len(iovs)*iovSize), rspEnd)
	size := (base + uint32(len(cdb)) + 7) &^ 7
	if f.head+size > f.CmdrSize {
		pad := f.CmdrSize - f.head
		if f.free() < pad+size {
			return 0, fmt.Errorf("fake ring full")
		}
		f.Pad(pad)
	}
	if f.free() < size {
		return 0, fmt.Errorf("fake ring full")
	}
	id := f.nextID
	f.nextID++
	off := f.head
	ent := f.Mem[MailboxSize+int(off) : MailboxSize+int(off+size)]
	clear(ent)
	le := binary.LittleEndian
	le.PutUint32(ent, size|OpCmd)
	le.PutUint16(ent[4:], id)
	le.PutUint32(ent[reqIOVCnt:], uint32(len(iovs)))
	for i, v := range iovs {
		le.PutUint64(ent[reqIOV+i*iovSize:], v.Off)
		le.PutUint64(ent[reqIOV+i*iovSize+8:], v.Len)
	}
	cdbAt := int(base)
	copy(ent[cdbAt:], cdb)
	le.PutUint64(ent[reqCDBOff:], uint64(MailboxSize+int(off)+cdbAt))
	f.queued[id] = fakeCmd{off: off, dataLen: n, dataIOVs: iovs}
	f.advance(size)
	return id, nil
}

// PutRaw writes raw bytes as the next entry (its length taken from the
// bytes' own header, which may be a lie) and moves the head by adv.
func (f *FakeRegion) PutRaw(b []byte, adv uint32) {
	copy(f.Mem[MailboxSize+int(f.head):], b)
	f.advance(adv)
}

// Done is one command the ring answered.
type Done struct {
	CmdID   uint16
	Status  byte
	Sense   []byte
	UFlags  byte
	ReadLen uint32
	Data    []byte // the data-in buffers' contents
}

// Reap returns the responses for every entry the tail has passed since
// the last call, in ring order (PAD and other non-command entries are
// skipped), as the kernel's tcmu_handle_completions walks them.
func (f *FakeRegion) Reap() []Done {
	var out []Done
	tail := f.tail()
	le := binary.LittleEndian
	for f.cleaned != tail {
		ent := f.Mem[MailboxSize+int(f.cleaned):]
		lenOp := le.Uint32(ent)
		size := lenOp &^ opMask
		if size == 0 {
			break
		}
		if lenOp&opMask == OpCmd {
			id := le.Uint16(ent[4:])
			d := Done{CmdID: id, Status: ent[rspStatus], UFlags: ent[7], ReadLen: le.Uint32(ent[rspReadLen:])}
			sense := ent[rspSense:rspEnd]
			if d.Status != 0 {
				d.Sense = append([]byte(nil), sense...)
			}
			if q, ok := f.queued[id]; ok {
				for _, v := range q.dataIOVs {
					d.Data = append(d.Data, f.Mem[v.Off:v.Off+v.Len]...)
				}
				delete(f.queued, id)
			}
			out = append(out, d)
		}
		f.cleaned = (f.cleaned + size) % f.CmdrSize
	}
	return out
}

// MemFS is an in-memory stand-in for configfs: directories, attribute
// values as last written, links, and the log of every write in order
// (tests check what the front end told LIO, and when).
type MemFS struct {
	mu     sync.Mutex
	dirs   map[string]bool
	files  map[string]string
	links  map[string]string
	Writes []string // "path=value", in order
}

// NewMemFS returns an empty MemFS.
func NewMemFS() *MemFS {
	return &MemFS{dirs: map[string]bool{"/": true}, files: map[string]string{}, links: map[string]string{}}
}

func (m *MemFS) Mkdir(p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirs[p] {
		return fs.ErrExist
	}
	if !m.dirs[path.Dir(p)] {
		return fmt.Errorf("mkdir %s: %w", p, fs.ErrNotExist)
	}
	m.dirs[p] = true
	// configfs makes a group's default groups with it.
	parent := path.Base(path.Dir(p))
	var groups []string
	switch {
	case strings.HasPrefix(parent, "user_"):
		groups = []string{"alua", "alua/default_tg_pt_gp", "attrib"}
	case strings.HasPrefix(path.Base(p), "tpgt_"):
		groups = []string{"attrib", "np", "lun", "acls", "param", "auth"}
	case parent == "acls": // a node ACL
		groups = []string{"attrib", "auth", "param", "fabric_statistics"}
	case path.Base(path.Dir(path.Dir(p))) == "acls": // a mapped LUN
		groups = []string{"statistics", "statistics/scsi_auth_intr", "statistics/scsi_att_intr_port"}
	}
	for _, g := range groups {
		m.dirs[p+"/"+g] = true
	}
	return nil
}

func (m *MemFS) Write(p, v string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[path.Dir(p)] {
		return fmt.Errorf("write %s: %w", p, fs.ErrNotExist)
	}
	m.files[p] = v
	m.Writes = append(m.Writes, p+"="+v)
	return nil
}

func (m *MemFS) Read(p string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.files[p]
	if !ok {
		if m.dirs[path.Dir(p)] {
			return "", nil // an attribute never written reads empty
		}
		return "", fs.ErrNotExist
	}
	return v, nil
}

func (m *MemFS) Symlink(target, link string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[target] {
		return fmt.Errorf("symlink to %s: %w", target, fs.ErrNotExist)
	}
	m.links[link] = target
	return nil
}

func (m *MemFS) Remove(p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.links[p]; ok {
		delete(m.links, p)
		return nil
	}
	if !m.dirs[p] {
		return fs.ErrNotExist
	}
	for d := range m.dirs {
		if strings.HasPrefix(d, p+"/") && !attrGroup(d) {
			return fmt.Errorf("rmdir %s: not empty (%s)", p, d)
		}
	}
	for l, t := range m.links {
		if strings.HasPrefix(l, p+"/") {
			return fmt.Errorf("rmdir %s: holds link %s", p, l)
		}
		if t == p {
			return fmt.Errorf("rmdir %s: in use by %s", p, l)
		}
	}
	for d := range m.dirs {
		if d == p || strings.HasPrefix(d, p+"/") {
			delete(m.dirs, d)
		}
	}
	for f := range m.files {
		if strings.HasPrefix(f, p+"/") {
			delete(m.files, f)
		}
	}
	return nil
}

// attrGroup: configfs default groups, which go with their parent.
func attrGroup(d string) bool {
	b := path.Base(d)
	switch b {
	case "alua", "default_tg_pt_gp", "attrib", "np", "lun", "acls", "param", "auth",
		"fabric_statistics", "statistics", "scsi_auth_intr", "scsi_att_intr_port":
		return true
	}
	return false
}

func (m *MemFS) List(p string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirs[p] {
		return nil, fs.ErrNotExist
	}
	var out []string
	for d := range m.dirs {
		if path.Dir(d) == p && d != p {
			out = append(out, path.Base(d))
		}
	}
	for l := range m.links {
		if path.Dir(l) == p {
			out = append(out, path.Base(l))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (m *MemFS) Exists(p string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, l := m.links[p]
	_, f := m.files[p]
	return m.dirs[p] || l || f
}

// Value is an attribute's last written value.
func (m *MemFS) Value(p string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.files[p]
}

// Set sets an attribute without logging it (what the kernel shows, such
// as dynamic_sessions).
func (m *MemFS) Set(p, v string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[p] = v
}

// MkdirAll makes p and its parents (what the kernel provides, such as
// the device's alua/default_tg_pt_gp group).
func (m *MemFS) MkdirAll(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for q := p; q != "/" && q != "."; q = path.Dir(q) {
		m.dirs[q] = true
	}
}

// WritesTo returns the logged writes whose path ends with suffix.
func (m *MemFS) WritesTo(suffix string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, w := range m.Writes {
		if p, _, _ := strings.Cut(w, "="); strings.HasSuffix(p, suffix) {
			out = append(out, w)
		}
	}
	return out
}

// FakeDevice is a Region over a FakeRegion: Signal wakes Wait as the
// kernel's UIO interrupt does; Kicks counts the ring's kicks.
type FakeDevice struct {
	*FakeRegion
	Name   string
	sig    chan struct{}
	closed chan struct{}
	once   sync.Once
	kicks  atomic.Int64
	count  atomic.Uint32
	// Kicked receives (without blocking) after every kick.
	Kicked chan struct{}
}

// NewFakeDevice makes a device with a 64 KiB ring and 1 MiB of data.
func NewFakeDevice(name string) *FakeDevice {
	return &FakeDevice{FakeRegion: NewFakeRegion(64<<10, 1<<20, MailboxFlagOOOC|MailboxFlagReadLen), Name: name,
		sig: make(chan struct{}, 1), closed: make(chan struct{}), Kicked: make(chan struct{}, 1)}
}

func (d *FakeDevice) Bytes() []byte  { return d.Mem }
func (d *FakeDevice) String() string { return d.Name }

// Signal is the kernel's interrupt after queueing.
func (d *FakeDevice) Signal() {
	select {
	case d.sig <- struct{}{}:
	default:
	}
}

func (d *FakeDevice) Wait() (uint32, error) {
	select {
	case <-d.sig:
		return d.count.Add(1), nil
	case <-d.closed:
		return 0, fs.ErrClosed
	}
}

func (d *FakeDevice) Kick() error {
	d.kicks.Add(1)
	select {
	case d.Kicked <- struct{}{}:
	default:
	}
	return nil
}

// Kicks is how many times the ring kicked the kernel.
func (d *FakeDevice) Kicks() int64 { return d.kicks.Load() }

func (d *FakeDevice) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}
