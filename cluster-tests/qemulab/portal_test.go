package qemulab

import (
	"testing"
	"time"
)

func TestLongestGap(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ts := []time.Time{at(-50), at(10), at(20), at(900), at(910)}
	gap, last := LongestGap(ts, at(0), at(1000))
	if gap != 880*time.Millisecond || !last.Equal(at(910)) {
		t.Fatalf("gap %v last %v", gap, last)
	}
	// Nothing after 20 ms: the gap runs to the end.
	gap, last = LongestGap(ts[:3], at(0), at(1000))
	if gap != 980*time.Millisecond || !last.Equal(at(20)) {
		t.Fatalf("gap %v last %v", gap, last)
	}
	gap, last = LongestGap(nil, at(0), at(1000))
	if gap != time.Second || !last.IsZero() {
		t.Fatalf("gap %v last %v", gap, last)
	}
}

func TestPace(t *testing.T) {
	if d := scaleDur(40*time.Second, 0.5); d != 40*time.Second {
		t.Fatalf("a fast machine shortens no wait: %v", d)
	}
	if d := scaleDur(40*time.Second, 2.5); d != 100*time.Second {
		t.Fatalf("2.5x: %v", d)
	}
	if d := scaleDur(40*time.Second, 10); d != 160*time.Second {
		t.Fatalf("capped at 4x: %v", d)
	}
	if nominalUp(1) != 35*time.Second || nominalUp(3) != 75*time.Second || nominalBoot(5) != 25*time.Second {
		t.Fatal("nominal figures")
	}
}

func TestMediaSince(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := &Watcher{steps: map[pathKey][]mediaStep{
		{"i", "a", 0}: {{t0, 10}, {t0.Add(time.Second), 15}, {t0.Add(2 * time.Second), 3}, {t0.Add(3 * time.Second), 7}},
		{"i", "b", 0}: {{t0, 50}, {t0.Add(2 * time.Second), 60}},
	}}
	// After t0+500ms: +5, a fall (the session's counters restart), +4.
	if n := w.media("i", "a", t0.Add(500*time.Millisecond)); n != 9 {
		t.Fatalf("media %d, want 9", n)
	}
}
