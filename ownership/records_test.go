package ownership

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

// The leader's decisions about the ownership records, one rule a row.
// The base view: nodes a, b, c; a and b members (joined at 10 and 20), c
// not; the term began at 0, the start grace is 1000 ms, failback after
// 500 ms; now is 2000 ms; the leader reaches every member.
func TestDecideRecords(t *testing.T) {
	base := func() RecordsView {
		return RecordsView{Nodes: []string{"a", "b", "c"}, Members: map[string]int64{"a": 10, "b": 20},
			Now: 2000, TermStart: 0, MemberSince: map[string]int64{"a": 0, "b": 0}, StartGrace: 1000, FailbackAfter: 500,
			BackoffUntil: map[uint64]int64{}, Reached: map[string]bool{"a": true, "b": true}}
	}
	rec := func(owner string, rev int64) RecordView {
		return RecordView{LUN: 7, Owner: owner, Rev: rev, Preferred: owner, Cause: alua.CauseFailover}
	}
	for _, tc := range []struct {
		name string
		edit func(v *RecordsView, r *RecordView)
		want []RecordAction // Record filled in from the row's record
	}{
		{"owner serving, nothing to do", func(v *RecordsView, r *RecordView) { *r = rec("a", 15) }, nil},
		{"fresh record, owner joined since: served as it is",
			func(v *RecordsView, r *RecordView) { *r = rec("a", 5); r.Fresh = true },
			[]RecordAction{{Kind: RecordServe, To: "a"}}},
		{"owner restarted: its partner takes over and replays",
			func(v *RecordsView, r *RecordView) { *r = rec("a", 5) },
			[]RecordAction{{Kind: RecordTakeover, To: "b", Replay: true}}},
		{"owner restarted, no partner: it serves from the media",
			func(v *RecordsView, r *RecordView) { *r = rec("a", 5); delete(v.Members, "b") },
			[]RecordAction{{Kind: RecordTakeover, To: "a"}}},
		{"owner gone: the holder takes over once it is fenced",
			func(v *RecordsView, r *RecordView) { *r = rec("c", 30) },
			[]RecordAction{{Kind: RecordTakeover, To: "a", Replay: true, OwnerGone: true, FenceFirst: true}}},
		{"owner gone: the holder is the next member after it",
			func(v *RecordsView, r *RecordView) {
				*r = rec("a", 30)
				v.Members = map[string]int64{"c": 40, "b": 20}
				delete(v.Members, "a")
			},
			[]RecordAction{{Kind: RecordTakeover, To: "b", Replay: true, OwnerGone: true, FenceFirst: true}}},
		{"owner gone: the recorded holder takes over, not the next member",
			func(v *RecordsView, r *RecordView) {
				*r = rec("a", 30)
				v.Members = map[string]int64{"b": 20, "c": 40}
				v.Holders = map[string]string{"a": "c"}
			},
			[]RecordAction{{Kind: RecordTakeover, To: "c", Replay: true, OwnerGone: true, FenceFirst: true}}},
		{"owner gone, its recorded holder gone too: the next member",
			func(v *RecordsView, r *RecordView) {
				*r = rec("a", 30)
				v.Members = map[string]int64{"b": 20}
				v.Holders = map[string]string{"a": "c"}
			},
			[]RecordAction{{Kind: RecordTakeover, To: "b", Replay: true, OwnerGone: true, FenceFirst: true}}},
		{"owner gone, holder unknown (a generation from before holders): the next member",
			func(v *RecordsView, r *RecordView) {
				*r = rec("a", 30)
				v.Members = map[string]int64{"b": 20, "c": 40}
				v.Holders = map[string]string{"a": ""}
			},
			[]RecordAction{{Kind: RecordTakeover, To: "b", Replay: true, OwnerGone: true, FenceFirst: true}}},
		{"owner gone, recorded as its own holder (unknown): the next member",
			func(v *RecordsView, r *RecordView) {
				*r = rec("a", 30)
				v.Members = map[string]int64{"b": 20, "c": 40}
				v.Holders = map[string]string{"a": "a"}
			},
			[]RecordAction{{Kind: RecordTakeover, To: "b", Replay: true, OwnerGone: true, FenceFirst: true}}},
		{"owner restarted: the recorded holder of its earlier incarnation takes over",
			func(v *RecordsView, r *RecordView) {
				*r = rec("a", 5)
				v.Members["c"] = 40
				v.Holders = map[string]string{"a": "c"}
			},
			[]RecordAction{{Kind: RecordTakeover, To: "c", Replay: true}}},
		{"owner restarted, its recorded holder gone: the next member",
			func(v *RecordsView, r *RecordView) { *r = rec("a", 5); v.Holders = map[string]string{"a": "c"} },
			[]RecordAction{{Kind: RecordTakeover, To: "b", Replay: true}}},
		{"owner restarted, its recorded holder gone and no other member: it serves from the media",
			func(v *RecordsView, r *RecordView) {
				*r = rec("a", 5)
				delete(v.Members, "b")
				v.Holders = map[string]string{"a": "c"}
			},
			[]RecordAction{{Kind: RecordTakeover, To: "a"}}},
		{"owner gone, nobody left to hold its copies: it waits",
			func(v *RecordsView, r *RecordView) { *r = rec("c", 30); v.Members = map[string]int64{} }, nil},
		{"first start: a fresh record waits for its owner's controller",
			func(v *RecordsView, r *RecordView) { *r = rec("c", 3); r.Fresh = true; v.Now = 999 }, nil},
		{"first start: after the grace it is taken over",
			func(v *RecordsView, r *RecordView) { *r = rec("c", 3); r.Fresh = true; v.Now = 1000 },
			[]RecordAction{{Kind: RecordTakeover, To: "a", Replay: true, OwnerGone: true, FenceFirst: true}}},
		{"a move under way is handed over",
			func(v *RecordsView, r *RecordView) { *r = rec("a", 15); r.To = "b" },
			[]RecordAction{{Kind: RecordHandOver, To: "b", Joined: 10}}},
		{"a move to a gone target is rolled back",
			func(v *RecordsView, r *RecordView) { *r = rec("a", 15); r.To = "c" },
			[]RecordAction{{Kind: RecordRollback, To: "c", Joined: 10}}},
		{"a record the leader is moving is left alone",
			func(v *RecordsView, r *RecordView) { *r = rec("c", 30); r.Moving = true }, nil},
		{"without the core: failback to the preferred owner",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "a" },
			[]RecordAction{{Kind: RecordFailback, To: "a", Joined: 20}}},
		{"with the core: the failback is the core's",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "a"; v.Core = true }, nil},
		{"an operator's move is not failed back",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "a"; r.Cause = alua.CauseManual }, nil},
		{"the preferred owner not a member for long enough",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "a"; v.MemberSince["a"] = 1501 }, nil},
		{"the preferred owner a member just long enough",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "a"; v.MemberSince["a"] = 1500 },
			[]RecordAction{{Kind: RecordFailback, To: "a", Joined: 20}}},
		{"the preferred owner is no member",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "c" }, nil},
		{"a rolled-back failback backs off",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "a"; v.BackoffUntil[7] = 2000 }, nil},
		{"no link to the owner to ask for the flush",
			func(v *RecordsView, r *RecordView) { *r = rec("b", 25); r.Preferred = "a"; v.Reached["b"] = false }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := base()
			var r RecordView
			tc.edit(&v, &r)
			v.Records = []RecordView{r}
			var want []RecordAction
			for _, a := range tc.want {
				a.Record = r
				want = append(want, a)
			}
			require.Equal(t, want, DecideRecords(v))
		})
	}
}

// One round decides every record, in the records' order, and does not
// change the view it was given.
func TestDecideRecordsRound(t *testing.T) {
	v := RecordsView{Nodes: []string{"a", "b"}, Members: map[string]int64{"b": 20}, Now: 5000, StartGrace: 1000,
		MemberSince: map[string]int64{"b": 0}, Reached: map[string]bool{"b": true}}
	for id := uint64(0); id < 4; id++ {
		v.Records = append(v.Records, RecordView{LUN: id, Owner: []string{"a", "b"}[id%2], Rev: 30, Preferred: []string{"a", "b"}[id%2]})
	}
	acts := DecideRecords(v)
	require.Len(t, acts, 2)
	for i, a := range acts {
		require.Equal(t, uint64(2*i), a.Record.LUN)
		require.Equal(t, RecordTakeover, a.Kind)
		require.Equal(t, "b", a.To)
		require.True(t, a.FenceFirst)
	}
	require.Equal(t, map[string]int64{"b": 20}, v.Members)
}
