package ownership

import "github.com/aluad/aluad/pkg/alua"

// Cluster mode's own decisions: who serves each LUN's ownership record
// when a controller's process is gone or came back, and the failback of
// a LUN when the core does not run. The elected leader reads the members
// and the records from the store into a RecordsView, these rules decide,
// and the leader carries each RecordAction out as a conditioned write (a
// deposed leader, or a record that changed since it was read, changes
// nothing). The rules are pure: times are milliseconds on the leader's
// clock, given as inputs.

// RecordView is one LUN's ownership record as the leader read it.
type RecordView struct {
	LUN uint64
	// Owner serves the LUN; To is the destination of a move in progress
	// ("" when none).
	Owner, To string
	// Cause is why the record last changed.
	Cause alua.Cause
	// Rev is the record's revision (its fencing token).
	Rev int64
	// Fresh: no controller has served it yet (the array's first start).
	Fresh bool
	// Preferred is the LUN's preferred owner.
	Preferred string
	// Moving: the leader is moving it now (an operator's or the core's
	// move under way): no rule touches it.
	Moving bool
}

// RecordsView is what the leader knows at one round.
type RecordsView struct {
	// Nodes is the configuration's node order: a node mirrors to the
	// first member after it in that order when it records a generation.
	Nodes []string
	// Members maps each node with a live membership to the revision its
	// incarnation joined at (a restart is a new, higher one).
	Members map[string]int64
	// Holders maps a node to the holder recorded with the latest mirror
	// generation of the incarnation a takeover of its records concerns
	// (a gone node's newest incarnation; a restarted node's newest before
	// the current member's): the only node its copies may be on. A node
	// with none recorded ("", or absent) is unknown.
	Holders map[string]string
	Records []RecordView
	// Now and TermStart are the leader's clock and when its term began;
	// MemberSince is when the leader first saw each member this term
	// (all milliseconds).
	Now, TermStart int64
	MemberSince    map[string]int64
	// StartGrace: how long a term waits for a controller that never
	// served before its records are taken over (the partner's power-on
	// wait of a real array); FailbackAfter: how long the preferred owner
	// must have been a member before a failback (milliseconds).
	StartGrace, FailbackAfter int64
	// BackoffUntil: a LUN whose failback was rolled back is not tried
	// again before then.
	BackoffUntil map[uint64]int64
	// Core: the ownership core runs (failbacks are its decisions).
	Core bool
	// Reached: the nodes the leader can ask to flush (itself, and those
	// with an interlink up).
	Reached map[string]bool
}

// RecordActionKind is what the leader does to a record.
type RecordActionKind string

const (
	// RecordServe rewrites a fresh record whose owner joined, under
	// MemberSince(owner, rev): it serves it with nothing to replay.
	RecordServe RecordActionKind = "serve"
	// RecordTakeover gives the record to To (Replay: To replays the mirror
	// copies of the owner it holds). When the owner restarted it is
	// written under MemberSince(owner, rev); when the owner is gone,
	// under MemberGone(owner) and IsFenced(owner) once the owner's last
	// process is fenced (FenceFirst).
	RecordTakeover RecordActionKind = "takeover"
	// RecordRollback ends a move whose target is no member: the owner
	// keeps it.
	RecordRollback RecordActionKind = "rollback"
	// RecordHandOver completes a move under way: the owner flushes, then
	// the record names To (or is rolled back without the flush).
	RecordHandOver RecordActionKind = "hand-over"
	// RecordFailback starts a move back to the preferred owner To (the
	// record names it as the target), then hands over.
	RecordFailback RecordActionKind = "failback"
)

// RecordAction is one decision about a record.
type RecordAction struct {
	Kind RecordActionKind
	// Record is the record as read (the write is conditioned on its rev).
	Record RecordView
	// To is the new owner (takeover, failback) or the target (hand-over).
	To string
	// Replay: the new owner replays the old owner's mirror copies.
	Replay bool
	// OwnerGone: the owner has no membership (a takeover written under
	// MemberGone); else it restarted (under MemberSince).
	OwnerGone bool
	// FenceFirst: the owner's last process must be fenced before the
	// write (it may be paused with a write it checked in time).
	FenceFirst bool
	// Joined is the owner's incarnation the write holds for (hand-over,
	// rollback: MemberIs(owner, Joined)).
	Joined int64
}

// Holder is the member a takeover of owner's records goes to: the holder
// of its copies recorded with its latest generation, while it is a member;
// otherwise (unknown, or gone too: the copies are gone with it) the first
// member after owner in configuration order ("" when none).
func (v RecordsView) Holder(owner string) string {
	if h := v.Holders[owner]; h != "" && h != owner {
		if _, up := v.Members[h]; up {
			return h
		}
	}
	return v.next(owner)
}

// next is the first member after owner in configuration order ("" when
// none).
func (v RecordsView) next(owner string) string {
	at := -1
	for i, n := range v.Nodes {
		if n == owner {
			at = i
		}
	}
	for i := 1; i <= len(v.Nodes); i++ {
		n := v.Nodes[(at+i+len(v.Nodes))%len(v.Nodes)]
		if _, up := v.Members[n]; up && n != owner {
			return n
		}
	}
	return ""
}

// DecideRecords makes one round of cluster decisions, one action at most
// per record, in the records' order:
//
//   - a fresh record whose owner joined after it was written is served
//     as it is (the array's first start: nothing to replay);
//   - a record whose owner restarted since it was written is taken over
//     by the holder of the owner's mirror copies (Holder) (its cache is gone, the
//     partner replays them, and the core or a failback brings it back
//     later); with nobody to hold them the owner serves it from the
//     media;
//   - a record whose owner is no member is taken over by the holder,
//     once the owner is fenced; a fresh one waits out the start grace
//     (the owner's controller may still be starting), and one with no
//     holder waits;
//   - a move under way is handed over, or rolled back if its target is
//     gone;
//   - without the core: a LUN away from its preferred owner (not by an
//     operator's move) fails back once the preferred owner has been a
//     member for FailbackAfter, its backoff is over and the leader
//     reaches the owner to ask for the flush.
func DecideRecords(v RecordsView) []RecordAction {
	var out []RecordAction
	starting := v.Now-v.TermStart < v.StartGrace
	for _, r := range v.Records {
		if r.Moving {
			continue
		}
		joined, alive := v.Members[r.Owner]
		switch {
		case alive && joined > r.Rev && r.Fresh:
			out = append(out, RecordAction{Kind: RecordServe, Record: r, To: r.Owner})
		case alive && joined > r.Rev:
			to := v.Holder(r.Owner)
			if to == "" {
				out = append(out, RecordAction{Kind: RecordTakeover, Record: r, To: r.Owner})
			} else {
				out = append(out, RecordAction{Kind: RecordTakeover, Record: r, To: to, Replay: true})
			}
		case !alive && r.Fresh && starting:
		case !alive:
			if to := v.Holder(r.Owner); to != "" {
				out = append(out, RecordAction{Kind: RecordTakeover, Record: r, To: to, Replay: true, OwnerGone: true,
					FenceFirst: true})
			}
		case r.To != "":
			kind := RecordHandOver
			if _, up := v.Members[r.To]; !up {
				kind = RecordRollback
			}
			out = append(out, RecordAction{Kind: kind, Record: r, To: r.To, Joined: joined})
		case !v.Core && r.Cause != alua.CauseManual && r.Owner != r.Preferred && v.failbackDue(r):
			out = append(out, RecordAction{Kind: RecordFailback, Record: r, To: r.Preferred, Joined: joined})
		}
	}
	return out
}

// failbackDue: r's preferred owner has been a member long enough, r's
// backoff is over, and the leader can ask its owner to flush.
func (v RecordsView) failbackDue(r RecordView) bool {
	if _, up := v.Members[r.Preferred]; !up {
		return false
	}
	since, seen := v.MemberSince[r.Preferred]
	return seen && v.Now-since >= v.FailbackAfter && v.Now > v.BackoffUntil[r.LUN] &&
		v.Reached[r.Owner]
}
