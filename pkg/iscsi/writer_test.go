package iscsi

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aluad/aluad/pkg/scsi"
	"github.com/stretchr/testify/require"
)

// heldHandler holds the first n commands until all n have arrived, so
// their statuses reach the writer together, and counts the write data
// buffers the garbage collector frees.
type heldHandler struct {
	stubHandler
	n       int
	arrived atomic.Int32
	all     chan struct{}
	once    sync.Once
	freed   atomic.Int32
}

func (h *heldHandler) Execute(c *scsi.Command) scsi.Response {
	if len(c.Data) > 0 {
		runtime.SetFinalizer(&c.Data[0], func(*byte) { h.freed.Add(1) })
	}
	if n := int(h.arrived.Add(1)); n <= h.n {
		if n == h.n {
			h.once.Do(func() { close(h.all) })
		}
		<-h.all
	}
	return scsi.Response{Status: scsi.StatusGood, DataOutLen: len(c.Data)}
}

// TestWriterKeepsNoTask: the writer answers a batch of commands in one
// write; once answered, nothing of theirs stays reachable from it (a
// status PDU lives in its task, and a task holds its write data, outside
// the write-data budgets once the task has ended).
func TestWriterKeepsNoTask(t *testing.T) {
	const n = 16
	h := &heldHandler{stubHandler: stubHandler{up: map[scsi.Nexus]bool{}}, n: n, all: make(chan struct{})}
	tg := orderTarget(t, h, &evRec{})
	c, br, status, _, err := rawLogin(t, tg.Addrs()[0], 1, 0)
	require.NoError(t, err)
	require.Zero(t, status)
	defer c.Close()
	send := func(itt, cmdSN uint32) {
		var cmd BHS
		cmd.SetOpcode(OpSCSICmd)
		cmd.SetFlags(FlagFinal | FlagWrite | 0x01)
		cmd.SetITT(itt)
		cmd.SetExpectedDataLen(4096)
		cmd.SetCmdSN(cmdSN)
		// WRITE AND VERIFY(10) to LBA 0: its data is not from the pool
		// (plain WRITEs' is), so the finalizer sees it freed.
		copy(cmd[32:48], []byte{0x2e, 0, 0, 0, 0, 0, 0, 0, 8, 0})
		_, err := c.Write(AppendPDU(nil, &PDU{BHS: cmd, Data: make([]byte, 4096)}, Digests{}))
		require.NoError(t, err)
	}
	for i := 0; i < n; i++ {
		send(uint32(100+i), uint32(1+i))
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < n; i++ {
		r, err := ReadPDU(br, Digests{}, 1<<20, nil)
		require.NoError(t, err)
		require.Equal(t, OpSCSIResp, r.BHS.Opcode())
	}
	send(999, n+1) // the writer's next batch is a single PDU
	_, err = ReadPDU(br, Digests{}, 1<<20, nil)
	require.NoError(t, err)
	for i := 0; i < 50 && h.freed.Load() < n; i++ {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	require.GreaterOrEqual(t, int(h.freed.Load()), n, "answered commands' write data is still reachable")
}
