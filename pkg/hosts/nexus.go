package hosts

import (
	"context"
	"errors"
	"time"

	"github.com/aluad/aluad/pkg/alua"
	"github.com/aluad/aluad/pkg/initiator"
)

// Nexus is one logged-in I_T nexus. A command that ends in CHECK
// CONDITION returns an error with a KeyASC method; any other error means
// the transport is broken and the nexus is dead.
type Nexus interface {
	Read(ctx context.Context, lun, lba uint64, blocks uint32) ([]byte, error)
	Write(ctx context.Context, lun, lba uint64, data []byte, fua bool) error
	TestUnitReady(ctx context.Context, lun uint64) error
	ReportTargetPortGroups(ctx context.Context, lun uint64) ([]byte, error)
	SetTargetPortGroups(ctx context.Context, lun uint64, reqs []alua.GroupRequest) error
	// TPGS is the standard INQUIRY TPGS field: 01b implicit ALUA, 10b
	// explicit, 11b both.
	TPGS(ctx context.Context, lun uint64) (byte, error)
	// EndTask makes sure the command that failed with err, a command the
	// nexus stopped waiting for (the host's command timeout), can no
	// longer complete at the target: task management, each step given
	// step to be answered, escalating as the transport's error handling
	// does. Nil means the target confirmed it; any other answer leaves
	// the nexus dropped and the command's fate unknown.
	EndTask(ctx context.Context, err error, step time.Duration) error
	// Done is closed when the nexus dies.
	Done() <-chan struct{}
	Close() error
}

// Dialer logs one path in.
type Dialer func(ctx context.Context) (Nexus, error)

// Sensed is what a CHECK CONDITION error offers.
type Sensed interface {
	error
	KeyASC() (key, asc, ascq byte)
}

// senseOf returns the sense of a CHECK CONDITION, or ok=false for a
// transport error.
func senseOf(err error) (key, asc, ascq byte, ok bool) {
	var s Sensed
	if !errors.As(err, &s) {
		return 0, 0, 0, false
	}
	key, asc, ascq = s.KeyASC()
	return key, asc, ascq, true
}

// BlockSize of the LUNs the hosts address (the lab's LUNs are 512-byte).
const BlockSize = 512

// sessionNexus adapts an initiator session.
type sessionNexus struct{ s *initiator.Session }

// NewSessionNexus wraps a logged-in Go initiator session.
func NewSessionNexus(s *initiator.Session) Nexus { return sessionNexus{s} }

// SessionDialer logs in with cfg and clears the unit attentions the login
// left on luns (a new nexus reports power on/reset, 29/00, which a real
// stack swallows while it scans).
func SessionDialer(cfg initiator.Config) Dialer {
	return func(ctx context.Context) (Nexus, error) {
		s, err := initiator.Dial(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return sessionNexus{s}, nil
	}
}

// Logout ends the session with a Logout Request (an orderly departure).
func (n sessionNexus) Logout(ctx context.Context) error { return n.s.Logout(ctx) }

func (n sessionNexus) Read(ctx context.Context, lun, lba uint64, blocks uint32) ([]byte, error) {
	return n.s.Read16(ctx, lun, lba, blocks, BlockSize)
}

func (n sessionNexus) Write(ctx context.Context, lun, lba uint64, data []byte, fua bool) error {
	return n.s.Write16(ctx, lun, lba, data, BlockSize, fua)
}

func (n sessionNexus) TestUnitReady(ctx context.Context, lun uint64) error {
	return n.s.TestUnitReady(ctx, lun)
}

func (n sessionNexus) ReportTargetPortGroups(ctx context.Context, lun uint64) ([]byte, error) {
	return n.s.ReportTargetPortGroups(ctx, lun, true)
}

func (n sessionNexus) SetTargetPortGroups(ctx context.Context, lun uint64, reqs []alua.GroupRequest) error {
	return n.s.SetTargetPortGroups(ctx, lun, reqs)
}

func (n sessionNexus) TPGS(ctx context.Context, lun uint64) (byte, error) {
	d, err := n.s.Inquiry(ctx, lun, false, 0)
	if err != nil {
		return 0, err
	}
	if len(d) < 6 {
		return 0, errors.New("standard INQUIRY data too short for TPGS")
	}
	return d[5] >> 4 & 3, nil
}

// EndTask is the initiator's ABORT TASK, LOGICAL UNIT RESET and session
// drop (initiator.Session.EndTask).
func (n sessionNexus) EndTask(ctx context.Context, err error, step time.Duration) error {
	var a *initiator.Abandoned
	if !errors.As(err, &a) {
		n.s.Close() // no task to name: only the session's end ends it
		return initiator.ErrTaskUnknown
	}
	return n.s.EndTask(ctx, a, step)
}

func (n sessionNexus) Done() <-chan struct{} { return n.s.Done() }
func (n sessionNexus) Close() error          { return n.s.Close() }
