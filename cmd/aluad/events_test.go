package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/api"
)

// The event log as an operator reads it: the per-interval samples off by
// default, filters by kind and time, one line per event in text or JSON.
func TestEventsFilterAndText(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	lun := uint64(3)
	evs := []api.Event{
		{Seq: 1, Time: t0, Kind: api.EventLogin, Host: "db1", Initiator: "iqn.2026-11.org.example:db1", Node: "a", TargetPort: 1},
		{Seq: 2, Time: t0.Add(time.Second), Kind: api.EventIO, Host: "db1", LUN: &lun, IO: &api.IOInterval{Reads: 5, Interval: time.Second}},
		{Seq: 3, Time: t0.Add(2 * time.Second), Kind: api.EventPath, Host: "db1", Path: &api.PathInterval{Exchanges: 4, Exchange: 4 * time.Millisecond}},
		{Seq: 4, Time: t0.Add(3 * time.Second), Kind: api.EventALUA, Change: &api.ChangeInfo{LUNs: []uint64{3}, From: "a", To: "b", Cause: "failover", Stop: 2 * time.Millisecond}},
		{Seq: 5, Time: t0.Add(4 * time.Second), Kind: api.EventReport, Report: &api.ReportInfo{Condition: "host-type-incorrect", Raised: true, Host: "db1"}},
		{Seq: 6, Time: t0.Add(5 * time.Second), Kind: api.EventHost, Initiator: "control socket uid 0", Reason: "change host db1 type linux-dmmp"},
	}
	seqs := func(out string) (s []string) {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				s = append(s, f[1])
			}
		}
		return s
	}
	for _, tc := range []struct {
		name string
		f    eventFilter
		want []string
	}{
		{"default: no samples", eventFilter{}, []string{"1", "4", "5", "6"}},
		{"with samples", eventFilter{sample: true}, []string{"1", "2", "3", "4", "5", "6"}},
		{"by kind", eventFilter{kinds: []string{api.EventALUA, api.EventIO}}, []string{"2", "4"}},
		{"by time", eventFilter{after: t0.Add(3 * time.Second)}, []string{"4", "5", "6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			require.NoError(t, printEvents(&b, evs, tc.f, false))
			require.Equal(t, tc.want, seqs(b.String()), "%s", b.String())
		})
	}
	var b bytes.Buffer
	require.NoError(t, printEvents(&b, evs, eventFilter{}, false))
	out := b.String()
	for _, want := range []string{
		"2026-11-28T09:00:00Z       1  login    host db1, initiator iqn.2026-11.org.example:db1, node a, port 1",
		"alua     LUNs [3] a -> b (failover), I/O held 2ms",
		"report   host-type-incorrect raised, host db1",
		"host     change host db1 type linux-dmmp, by control socket uid 0",
	} {
		require.Contains(t, out, want)
	}
	b.Reset()
	require.NoError(t, printEvents(&b, evs, eventFilter{kinds: []string{api.EventLogin}}, true))
	var e api.Event
	require.NoError(t, json.Unmarshal(b.Bytes(), &e), "one JSON object per line")
	require.Equal(t, "db1", e.Host)
}
