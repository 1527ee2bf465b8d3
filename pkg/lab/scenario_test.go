package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const minimal = "host h1 linux-dmmp\nworkload\nduration 10s\n"

func TestParseScenario(t *testing.T) {
	text, ok := BuiltinScenario("default")
	require.True(t, ok)
	s, err := ParseScenarioText(text)
	require.NoError(t, err)
	assert.Equal(t, "default", s.Name)
	assert.Len(t, s.Hosts, 4)
	assert.Equal(t, map[string]string{"psp": "rr"}, s.Hosts[3].Opts)
	assert.Equal(t, []LoadSpec{{BS: 4096, ReadPct: 70, QD: 1, Rate: 200}}, s.Loads)
	assert.Equal(t, []EventSpec{
		{At: 5 * time.Second, Label: "failover", Kind: "cut", Host: "h1", Node: "a"},
		{At: 15 * time.Second, Label: "failback", Kind: "restore", Host: "h1", Node: "a"},
		{At: 24 * time.Second, Label: "rebalance", Kind: "skew", Node: "a"},
		{At: 34 * time.Second, Label: "power-loss", Kind: "power-loss", Node: "a"},
		{At: 70 * time.Second, Label: "restart", Kind: "restart", Node: "a"},
	}, s.Events)
	assert.Equal(t, []string{"linux-dmmp", "windows", "vmware", "vmware"},
		[]string{s.Hosts[0].Type, s.Hosts[1].Type, s.Hosts[2].Type, s.Hosts[3].Type}, "each stack's host type")
	assert.Equal(t, "explicit-alua", s.Compare)
	assert.LessOrEqual(t, 2*s.Duration, 150*time.Second, "the default run must fit in about 3 minutes")

	s, err = ParseScenarioText(minimal + "luns 4 size=16MiB\nworkload luns=0-1,3 hosts=h1 bs=64k read=0 qd=4 rate=50\nat 1s delay node=b host=h1 ms=2.5\nat 2s clear\n")
	require.NoError(t, err)
	assert.Equal(t, []uint64{0, 1, 3}, s.Loads[1].LUNs)
	assert.Equal(t, LoadSpec{LUNs: []uint64{0, 1, 3}, Hosts: []string{"h1"}, BS: 65536, ReadPct: 0, QD: 4, Rate: 50}, s.Loads[1])
	assert.Equal(t, 2500*time.Microsecond, s.Events[0].Delay)
	assert.Equal(t, "clear", s.Events[1].Label)
}

func TestParseScenarioErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"", "no host lines"},
		{"host h1 linux-dmmp\nduration 10s\n", "no workload line"},
		{"host h1 linux-dmmp\nworkload\n", "no duration line"},
		{"hots h1 linux-dmmp\n", "line 1: unknown directive"},
		{"host h1 solaris-mpxio\n", "unknown host stack"},
		{"host h1 linux-dmmp\nhost h1 naive\n", "line 2: host h1 defined twice"},
		{"host h1 linux-dmmp colour=red\n", "unknown option"},
		{"host h1 linux-dmmp checker\n", "want option=value"},
		{"alua sideways\n", "implicit or explicit"},
		{"luns 0\n", "count from 1 to 256"},
		{"luns 4 size=10\n", "1MiB to 1GiB"},
		{"workload qd=0\n", "qd"},
		{"workload read=101\n", "percentage"},
		{"workload bs=1000\n", "512-byte units"},
		{"workload luns=3-1\n", "bad range"},
		{"workload luns=0-65535\n", "bad range"},
		{"workload luns=300\n", "not a LUN number (0 to 255)"},
		{"workload speed=9\n", "unknown option"},
		{minimal + "workload hosts=h9\n", "no host \"h9\""},
		{minimal + "workload luns=8\n", "no LUN 8"},
		{minimal + "at 1s explode node=a\n", "unknown event"},
		{minimal + "at 1s cut node=a\n", "cut needs host="},
		{minimal + "at 1s cut host=h1 node=c\n", "no node \"c\""},
		{minimal + "at 1s cut host=h9 node=a\n", "no host \"h9\""},
		{minimal + "at 1s port-down port=z9\n", "no port \"z9\""},
		{minimal + "at 1s delay node=a ms=-3\n", "from 0 to 10000"},
		{minimal + "at 5s clear\nat 1s clear\n", "time order"},
		{minimal + "at 10s clear\n", "after the end"},
		{minimal + "at soon clear\n", "not a time"},
		{minimal + "at 1s oops:\n", "must follow the label"},
		{minimal + "compare\n", "compare STACK"},
		{minimal + "duration -1s\n", "positive duration"},
		{minimal + "at 1s reboot\n", "reboot needs host="},
		{minimal + "at 1s reboot host=h1 down=2h\n", "up to 1m"},
		{minimal + "at 1s cut host=h1 node=a down=1s\n", "on a reboot"},
		{minimal + "at 1s move lun=0\n", "move needs node="},
		{minimal + "at 1s move lun=x node=a\n", "not a LUN number"},
		{minimal + "at 1s move lun=99 node=a\n", "no LUN 99"},
		{minimal + "load heavy\n", "load is light"},
		{"host h1 linux-dmmp type=solaris\n", "type \"solaris\" is not a host type"},
		{minimal + "compare explicit-alua type=hpux\n", "type \"hpux\" is not a host type"},
		{minimal + "at 1s power-loss\n", "power-loss needs node="},
		{minimal + "at 1s panic node=q\n", "no node \"q\""},
		{minimal + "at 1s cable-pull port=a7\n", "no port \"a7\""},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			_, err := ParseScenarioText(tc.text)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func FuzzParseScenario(f *testing.F) {
	text, _ := BuiltinScenario("default")
	f.Add(text)
	f.Add(minimal + "at 1s x: delay node=a ms=1e3\n")
	f.Add(minimal + "load light\nat 1s reboot host=h1 down=1s gap=100ms\nat 2s move lun=0 node=b\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseScenario(strings.NewReader(text))
		if err != nil {
			return
		}
		// A scenario that parses is one the runner can take.
		require.NotEmpty(t, s.Hosts)
		require.Positive(t, s.Duration)
		for _, e := range s.Events {
			require.Less(t, e.At, s.Duration)
			require.Contains(t, eventArgs, e.Kind)
		}
		for _, l := range s.Loads {
			require.True(t, l.QD >= 1 && l.BS >= 512 && l.BS%512 == 0)
		}
	})
}

func TestWorstAndStall(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []Sample{
		{Host: 0, LUN: 0, Start: at(0), Latency: 2 * time.Millisecond},
		{Host: 0, LUN: 0, Start: at(2), Latency: 40 * time.Millisecond}, // through the window
		{Host: 0, LUN: 0, Start: at(42), Latency: time.Millisecond},
		{Host: 1, LUN: 0, Start: at(100), Latency: 90 * time.Millisecond}, // outside it
	}
	worst, stall := worstAndStall(samples, [][2]time.Time{{at(10), at(20)}})
	assert.Equal(t, 40*time.Millisecond, worst)
	assert.Equal(t, 40*time.Millisecond, stall, "stream h0/LUN 0 completed nothing from 2 ms to 42 ms")
}

func TestMedianTable(t *testing.T) {
	mk := func(imp, exp time.Duration, thrash int) *Result {
		return &Result{Modes: []*ModeResult{
			{Mode: "implicit", Events: []EventResult{{Label: "failover", Worst: imp}}},
			{Mode: "explicit", Events: []EventResult{{Label: "failover", Worst: exp, Thrash: thrash}}},
		}}
	}
	var b strings.Builder
	MedianTable(&b, []*Result{mk(30*time.Millisecond, time.Second, 4), mk(10*time.Millisecond, 2*time.Second, 6),
		mk(20*time.Millisecond, 3*time.Second, 5)})
	out := b.String()
	assert.Contains(t, out, "worst I/O (median of 3)")
	assert.Regexp(t, `failover\s+implicit\s+20.0 ms\s+10.0 ms - 30.0 ms`, out)
	assert.Regexp(t, `failover\s+explicit\s+2000.0 ms\s+1000.0 ms - 3000.0 ms.*\s5\s`, out)
	assert.Regexp(t, `failover\s+reduction\s+99.0%`, out)
	assert.Equal(t, 99.0, Reduction(20*time.Millisecond, 2*time.Second))
	assert.Zero(t, Reduction(time.Millisecond, 0))
}

// LUN lists: ranges, repeats counted once, numbers bounded by the LUN limit.
func TestParseIDs(t *testing.T) {
	got, err := parseIDs("0-3,2-5,7,7")
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1, 2, 3, 4, 5, 7}, got)
	got, err = parseIDs(strings.Repeat("0-255,", 200) + "1")
	require.NoError(t, err)
	require.Len(t, got, maxLUNs, "a long line still yields each LUN once")
	_, err = parseIDs("256")
	require.ErrorContains(t, err, "0 to 255")
}

// TestBuiltinScenariosParse: every scenario shipped with aluad parses.
func TestBuiltinScenariosParse(t *testing.T) {
	entries, err := scenarioFS.ReadDir("scenarios")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(entries), 5)
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".txt")
		text, ok := BuiltinScenario(name)
		require.True(t, ok, name)
		s, err := ParseScenarioText(text)
		require.NoError(t, err, name)
		assert.Equal(t, name, s.Name, "a scenario's name line matches its file")
	}
}
