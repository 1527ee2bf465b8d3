package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// kindTopology: two nodes of two ports (a: 1,2; b: 3,4), one LUN on a, a
// host of the kind on every path.
const kindTopology = "nodes a:2,b:2\nlun 0 pref=a pages=4\nhost h1 type=linux paths=1,2,3,4 luns=0 kind=%s\n"

// stepWorld runs script lines in w as the run loop does.
func stepWorld(t *testing.T, w *World, lines string) {
	t.Helper()
	s, err := ParseScript(lines)
	require.NoError(t, err)
	for _, e := range s {
		w.advance(time.Millisecond)
		w.do(e)
		w.drain()
		w.check()
	}
	require.Nil(t, w.viol, "%v\n%s", w.viol, w.log.String())
}

// sentOn lists the paths that carried what since the counts were
// cleared, and clears them.
func sentOn(h *host, what string) []uint16 {
	var ps []uint16
	for k, n := range h.sent {
		if k.what == what && n > 0 {
			ps = append(ps, k.port)
		}
	}
	slices.Sort(ps)
	return ps
}

// What each kind does that the array sees: which paths its RTPGs and
// probes go to when, and which paths carry its media I/O before and
// after the LUN moves (kinds.go's table, observed).
func TestKindsBehaviour(t *testing.T) {
	all, a, none := []uint16{1, 2, 3, 4}, []uint16{1, 2}, []uint16(nil)
	for _, tt := range []struct {
		kind string
		// RTPGs: at login, at a tick (steady), at a scan, from a move
		// through the next writes.
		login, tick, scan, moved []uint16
		// the checker's TEST UNIT READY at a tick
		tur []uint16
		// media I/O paths: on a, after the move to b, after the LUN
		// went back to a while the host's paths there were cut, when
		// one of them comes back.
		io, ioMoved, ioBack []uint16
	}{
		{kind: "auto", login: all, tick: none, scan: none, moved: all, tur: all,
			io: a, ioMoved: []uint16{3, 4}, ioBack: []uint16{1}},
		{kind: "dmmp-defaults", login: all, tick: none, scan: all, moved: all, tur: all,
			io: []uint16{2}, ioMoved: []uint16{2}, ioBack: []uint16{3}},
		{kind: "dmmp-alua", login: all, tick: all, scan: all, moved: all, tur: all,
			io: a, ioMoved: []uint16{3, 4}, ioBack: []uint16{1}},
		{kind: "dmmp-followover", login: all, tick: all, scan: all, moved: all, tur: all,
			io: a, ioMoved: a, ioBack: []uint16{1}},
		{kind: "dh-alua-nomp", login: all, tick: none, scan: all, moved: []uint16{1}, tur: none,
			io: []uint16{1}, ioMoved: []uint16{1}, ioBack: []uint16{3}}, // it stays on the device it moved to
		{kind: "nohandler", login: none, tick: none, scan: none, moved: none, tur: none,
			io: []uint16{1}, ioMoved: []uint16{1}, ioBack: []uint16{3}}, // it stays on the device it moved to
		{kind: "win-rr", login: all, tick: none, scan: all, moved: all, tur: none, // no idle probing
			io: all, ioMoved: all, ioBack: []uint16{1, 3, 4}},
		{kind: "win-rrws", login: all, tick: none, scan: all, moved: []uint16{2, 3, 4}, tur: none, // the paths its I/O met the UA on
			io: a, ioMoved: []uint16{3, 4}, ioBack: []uint16{1}},
		{kind: "vmw-mru", login: all, tick: none, scan: all, moved: []uint16{2}, tur: none, // the paths its I/O met the UA on
			io: []uint16{2}, ioMoved: []uint16{2}, ioBack: []uint16{3}},
		{kind: "vmw-rr", login: all, tick: none, scan: all, moved: []uint16{2, 3, 4}, tur: none, // the paths its I/O met the UA on
			io: a, ioMoved: []uint16{3, 4}, ioBack: []uint16{1}},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			s, err := ParseScript(fmt.Sprintf(kindTopology, tt.kind))
			require.NoError(t, err)
			w, err := newWorld(s)
			require.NoError(t, err)
			h := w.byName["h1"]
			phase := func(lines, what string, want []uint16) {
				t.Helper()
				clear(h.sent)
				stepWorld(t, w, lines)
				require.Equal(t, want, sentOn(h, what), "%s after %q\n%s", what, lines, w.log.String())
			}
			writes := "write h1 0 lba=0 n=1\nwrite h1 0 lba=1 n=1\nwrite h1 0 lba=2 n=1\nwrite h1 0 lba=3 n=1\n"
			phase("login h1\n", "rtpg", tt.login)
			phase("tick\n", "rtpg", tt.tick)
			phase("tick\n", "tur", tt.tur)
			phase("scan h1\n", "rtpg", tt.scan)
			phase(writes, "media", tt.io)
			phase("move 0 b\ntick\n"+writes, "rtpg", tt.moved)
			phase(writes, "media", tt.ioMoved)
			// The host loses its paths to a, the LUN goes back there, and
			// one path to a comes back: who returns to it?
			phase("cut h1 1\ncut h1 2\n"+writes+"move 0 a\ntick\nmend h1 1\ntick\n"+writes, "", nil)
			clear(h.sent)
			stepWorld(t, w, writes)
			require.Equal(t, tt.ioBack, sentOn(h, "media"), "after the group came back\n%s", w.log.String())
		})
	}
}
