package initiator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Abandoned is the error of a SCSI command its caller stopped waiting for
// (the context ended) before the target answered. The command may still
// be in the target's task set and change the medium later: a caller that
// sends it again, on this session or another, first ends it with
// EndTask, as the Linux SCSI error handler aborts a timed-out command
// before dm-multipath may retry it on another path.
type Abandoned struct {
	Err   error // the context's error
	LUN   uint64
	Tag   uint32 // Initiator Task Tag
	CmdSN uint32
}

func (e *Abandoned) Error() string {
	return fmt.Sprintf("initiator: task %#x on LUN %d abandoned: %v", e.Tag, e.LUN, e.Err)
}

func (e *Abandoned) Unwrap() error { return e.Err }

// TMF response codes (RFC 7143 11.6.1).
const (
	TMFComplete     = 0
	TMFTaskNotExist = 1
)

// TMFError is a task management function the target did not carry out.
type TMFError struct{ Function, Response byte }

func (e *TMFError) Error() string {
	return fmt.Sprintf("initiator: task management function %d answered %d", e.Function, e.Response)
}

// ErrTaskUnknown: EndTask could not learn that the task was ended; it
// dropped the session. Whether the command ran is unknown.
var ErrTaskUnknown = errors.New("initiator: the task was not confirmed ended; the session was dropped")

// AbortTask sends ABORT TASK for the abandoned command and waits for the
// answer. Nil means the task will not complete after it: "function
// complete" (it was ended, SAM-5 7.2) or "task does not exist" (it had
// completed, or was never received and will not be, RFC 7143 11.5.1).
func (s *Session) AbortTask(ctx context.Context, a *Abandoned) error {
	resp, err := s.taskMgmt(ctx, TMFAbortTask, a.LUN, a.Tag, a.CmdSN)
	if err != nil {
		return err
	}
	if resp != TMFComplete && resp != TMFTaskNotExist {
		return &TMFError{TMFAbortTask, resp}
	}
	return nil
}

// ResetLUN sends LOGICAL UNIT RESET and waits for "function complete":
// every task of the LUN on this nexus has then ended (SAM-5 7.7).
func (s *Session) ResetLUN(ctx context.Context, lun uint64) error {
	resp, err := s.taskMgmt(ctx, TMFLUNReset, lun, 0, 0)
	if err != nil {
		return err
	}
	if resp != TMFComplete {
		return &TMFError{TMFLUNReset, resp}
	}
	return nil
}

// EndTask makes sure an abandoned command can no longer complete, with
// the escalation of the Linux SCSI error handler over open-iscsi: ABORT
// TASK, then LOGICAL UNIT RESET, each given at most step to be answered;
// when neither is, the session is dropped and ErrTaskUnknown returned
// (the caller then holds the command as a session recovery timeout
// would). Nil means the target confirmed it.
func (s *Session) EndTask(ctx context.Context, a *Abandoned, step time.Duration) error {
	try := func(f func(context.Context) error) error {
		tctx, cancel := context.WithTimeout(ctx, step)
		defer cancel()
		return f(tctx)
	}
	if try(func(c context.Context) error { return s.AbortTask(c, a) }) == nil {
		return nil
	}
	if try(func(c context.Context) error { return s.ResetLUN(c, a.LUN) }) == nil {
		return nil
	}
	s.Close()
	return ErrTaskUnknown
}
