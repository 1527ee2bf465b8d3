package iscsi

import (
	"bufio"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/scsi"
)

// dataOutHandler answers every command as a device server answers a
// data-out command it was given none for: the CDB's data-out length.
type dataOutHandler struct{ stubHandler }

func (h *dataOutHandler) Execute(c *scsi.Command) scsi.Response {
	return scsi.Response{Status: scsi.StatusGood, DataOutLen: 512}
}

// A WRITE sent without the W bit and no data (EDTL 0) reports the whole
// transfer as an overflow residual, as with the W bit: the response says
// what was not transferred.
func TestDataOutResidualWithoutWriteBit(t *testing.T) {
	for _, w := range []bool{true, false} {
		h := &dataOutHandler{stubHandler{up: map[scsi.Nexus]bool{}}}
		tg := orderTarget(t, h, &evRec{})
		c, br, status, _, err := rawLogin(t, tg.Addrs()[0], 1, 0)
		require.NoError(t, err)
		require.Zero(t, status)
		var cmd BHS
		cmd.SetOpcode(OpSCSICmd)
		flags := byte(FlagFinal)
		if w {
			flags |= 0x20 // W
		}
		cmd.SetFlags(flags | 0x01) // SIMPLE
		cmd.SetITT(9)
		cmd.SetExpectedDataLen(0)
		cmd.SetCmdSN(1)
		copy(cmd[32:48], []byte{0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0})
		_, err = c.Write(AppendPDU(nil, &PDU{BHS: cmd}, Digests{}))
		require.NoError(t, err)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		r, err := ReadPDU(bufio.NewReader(br), Digests{}, 1<<20, nil)
		require.NoError(t, err)
		require.Equal(t, OpSCSIResp, r.BHS.Opcode())
		require.Equal(t, byte(FlagOverflow), r.BHS[1]&(FlagOverflow|FlagUnderflow), "W=%v", w)
		require.Equal(t, []byte{0, 0, 2, 0}, r.BHS[44:48], "512 bytes of residual")
		c.Close()
	}
}
