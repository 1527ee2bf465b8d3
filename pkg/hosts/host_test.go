package hosts

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aluad/aluad/pkg/alua"
)

var (
	aAO = map[uint16]alua.AccessState{1: alua.ActiveOptimized, 2: alua.ActiveNonOptimized}
	bAO = map[uint16]alua.AccessState{1: alua.ActiveNonOptimized, 2: alua.ActiveOptimized}
)

func attach(t *testing.T, ft *fakeTarget, name string, p Personality) *Host {
	t.Helper()
	h, err := New(context.Background(), name, p, ft.paths(name), []uint64{0})
	require.NoError(t, err)
	t.Cleanup(h.Close)
	return h
}

// io runs one read and returns the port that served it.
func io(t *testing.T, ft *fakeTarget, h *Host) uint16 {
	t.Helper()
	_, err := h.Read(context.Background(), 0, 0, 8)
	require.NoError(t, err)
	cs := ft.cmds()
	for i := len(cs) - 1; i >= 0; i-- {
		if cs[i].Host == h.Name && cs[i].OK && (cs[i].Op == "read" || cs[i].Op == "write") {
			return cs[i].Port
		}
	}
	t.Fatal("no I/O logged")
	return 0
}

func isOp(op string) func(fakeCmd) bool { return func(c fakeCmd) bool { return c.Op == op } }

// switchTime returns when h first moved LUN 0's I/O to node.
func switchTime(h *Host, node string) time.Time {
	for _, e := range h.Events() {
		if e.Kind == "switch" && e.Detail[len(e.Detail)-1:] == node {
			return e.Time
		}
	}
	return time.Time{}
}

func TestLinuxDM(t *testing.T) {
	t.Run("attach reads RTPG on every path and uses the AO group", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "h1", LinuxDM())
			assert.Equal(t, 4, ft.count(isOp("rtpg")))
			for i := 0; i < 20; i++ {
				assert.Contains(t, []uint16{1, 2}, io(t, ft, h))
			}
		})
	})
	t.Run("implicit move: UA read at once, group switched at the next prio check", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "h1", LinuxDM())
			time.Sleep(time.Second)
			moved := time.Now()
			ft.move(bAO, nil)
			rtpgs := ft.count(isOp("rtpg"))
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h), "the UA'd command is retried on the same, now ANO, group")
			assert.Equal(t, rtpgs+1, ft.count(isOp("rtpg")), "scsi_dh_alua reads RTPG on 2A/06")
			time.Sleep(2 * time.Second)
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h), "dm stays on the old group until multipathd re-reads the priorities")
			time.Sleep(3 * time.Second)
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			sw := switchTime(h, "b").Sub(moved)
			assert.True(t, sw >= 3900*time.Millisecond && sw <= 5*time.Second, "switched %v after the move; the first check is 5 s after attach", sw)
			assert.EqualValues(t, 4, h.Stats().UAs, "one per nexus: met by I/O or by the checker's TUR")
		})
	})
	t.Run("a PREF group that is not optimized outranks AO (prio alua +80)", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// As multipath-tools does, and as the QEMU lab saw with real
			// dm-multipath while aluad kept PREF on the home node: the
			// host never follows a move away from the PREF group.
			ft := newFakeTarget()
			ft.pref = 1
			h := attach(t, ft, "h1", LinuxDM())
			ft.move(bAO, nil)
			time.Sleep(30 * time.Second)
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h), "PREF+ANO (90) beats AO (50)")
			// With PREF on the owner's group, the same move is followed.
			ft.mu.Lock()
			ft.pref = 2
			ft.mu.Unlock()
			time.Sleep(25 * time.Second)
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
		})
	})
	t.Run("04/0A retried every second until the transition ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "h1", LinuxDM())
			ft.move(map[uint16]alua.AccessState{1: alua.Transitioning}, nil)
			go func() {
				time.Sleep(3500 * time.Millisecond)
				ft.move(aAO, nil)
			}()
			start := time.Now()
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h))
			assert.Equal(t, 4*time.Second, time.Since(start).Round(100*time.Millisecond))
			assert.EqualValues(t, 4, h.Stats().Transitioning, "one 04/0A at 0, 1, 2 and 3 s")
		})
	})
	t.Run("transition timeout from RTPG byte 5 fails the path", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			ft.tt = 2
			h := attach(t, ft, "h1", LinuxDM())
			ft.move(map[uint16]alua.AccessState{1: alua.Transitioning}, nil)
			start := time.Now()
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h), "after the timeout I/O goes to the other group")
			took := time.Since(start)
			assert.True(t, took >= 2*time.Second && took <= 3*time.Second, "took %v", took)
		})
	})
	t.Run("path loss fails over at once; the checker reinstates and fails back", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "h1", LinuxDM())
			ft.setCut("h1", 1, true)
			ft.setCut("h1", 2, true)
			for i := 0; i < 10; i++ {
				assert.Contains(t, []uint16{3, 4}, io(t, ft, h), "ANO group carries I/O with no error")
			}
			ft.setCut("h1", 1, false)
			ft.setCut("h1", 2, false)
			time.Sleep(5100 * time.Millisecond)
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h), "failback immediate once the checker reinstated the paths")
			assert.EqualValues(t, 0, h.Stats().IOErrors)
			assert.EqualValues(t, 2, h.Stats().Relogins)
		})
	})
	t.Run("fast_io_fail holds I/O on a lost path before failing over", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p, err := Lookup("linux-dmmp", map[string]string{"fast_io_fail": "5s"})
			require.NoError(t, err)
			ft := newFakeTarget()
			h := attach(t, ft, "h1", p)
			ft.setCut("h1", 1, true)
			ft.setCut("h1", 2, true)
			start := time.Now()
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			took := time.Since(start)
			// The command is held 5 s on the path it met the loss on; if it
			// then meets the other lost path before the checker has failed
			// it, 5 s more (the real stack, whose sessions time out in
			// parallel, took 5.1-5.8 s).
			assert.True(t, took >= 5*time.Second && took <= 10*time.Second, "took %v", took)
			start = time.Now()
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			assert.Less(t, time.Since(start), time.Second, "once failed, the paths are not tried again")
			assert.EqualValues(t, 0, h.Stats().IOErrors)
		})
	})
	t.Run("queue_if_no_path holds I/O until a path returns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "h1", LinuxDM())
			for p := uint16(1); p <= 4; p++ {
				ft.setCut("h1", p, true)
			}
			go func() {
				time.Sleep(7 * time.Second)
				ft.setCut("h1", 3, false)
			}()
			start := time.Now()
			io(t, ft, h)
			took := time.Since(start)
			assert.True(t, took >= 7*time.Second && took <= 10100*time.Millisecond, "queued %v", took)
		})
	})
	t.Run("no_path_retry fails I/O after N checker intervals", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			p, err := Lookup("linux-dmmp", map[string]string{"no_path_retry": "2"})
			require.NoError(t, err)
			h := attach(t, ft, "h1", p)
			for port := uint16(1); port <= 4; port++ {
				ft.setCut("h1", port, true)
			}
			start := time.Now()
			_, err = h.Read(context.Background(), 0, 0, 8)
			assert.ErrorIs(t, err, ErrNoPath)
			assert.Equal(t, 10*time.Second, time.Since(start).Round(100*time.Millisecond))
		})
	})
	t.Run("a standby group is activated when the group in use is lost", func(t *testing.T) {
		// The linux-dmmp host type: the non-owner group is STANDBY. The
		// host loses its paths to the owner; the array moves the LUN a
		// moment later. dm-multipath switches path group and scsi_dh_alua
		// activates it (RTPG): I/O goes on within RetryEvery of the
		// move, not at the path checker's next run (20 s by then).
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			ft.mu.Lock()
			ft.state = map[uint16]alua.AccessState{1: alua.ActiveOptimized, 2: alua.Standby}
			ft.mu.Unlock()
			h := attach(t, ft, "h1", LinuxDM())
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h))
			time.Sleep(time.Minute) // the checker's interval grows to 20 s
			ft.setCut("h1", 1, true)
			ft.setCut("h1", 2, true)
			go func() {
				time.Sleep(300 * time.Millisecond)
				ft.move(map[uint16]alua.AccessState{1: alua.Standby, 2: alua.ActiveOptimized}, nil)
			}()
			start := time.Now()
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			assert.Less(t, time.Since(start), 300*time.Millisecond+h.P.RetryEvery+100*time.Millisecond,
				"on the new owner within RetryEvery of the move")
		})
	})
	t.Run("on an explicit array the activation sends STPG", func(t *testing.T) {
		// An array that allows explicit ALUA never moves the LUN itself
		// here: scsi_dh_alua's activation of the standby group asks for
		// it with SET TARGET PORT GROUPS. An implicit-only array is never
		// sent one.
		for _, explicit := range []bool{true, false} {
			synctest.Test(t, func(t *testing.T) {
				ft := newFakeTarget()
				ft.explicit = explicit
				ft.mu.Lock()
				ft.state = map[uint16]alua.AccessState{1: alua.ActiveOptimized, 2: alua.Standby}
				ft.mu.Unlock()
				h := attach(t, ft, "h1", LinuxDM())
				assert.Contains(t, []uint16{1, 2}, io(t, ft, h))
				ft.setCut("h1", 1, true)
				ft.setCut("h1", 2, true)
				if explicit {
					assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
					assert.EqualValues(t, 1, h.Stats().STPGs)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				_, err := h.Read(ctx, 0, 0, 8)
				assert.ErrorIs(t, err, context.DeadlineExceeded, "queued: the array has not moved the LUN")
				assert.Zero(t, ft.count(isOp("stpg")), "no STPG to an implicit-only array")
			})
		}
	})
	t.Run("04/0B fails the path for the LUN and I/O moves on", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "h1", LinuxDM())
			ft.mu.Lock()
			ft.state = map[uint16]alua.AccessState{1: alua.Standby, 2: alua.ActiveOptimized}
			ft.mu.Unlock()
			start := time.Now()
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			assert.Less(t, time.Since(start), 100*time.Millisecond)
		})
	})
}

func TestWindowsMSDSM(t *testing.T) {
	t.Run("follows a UA at once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "w1", WindowsMSDSM())
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h))
			ft.move(bAO, nil)
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
		})
	})
	t.Run("one RTPG in flight per LUN", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			ft.rtpgTime = 50 * time.Millisecond
			h := attach(t, ft, "w1", WindowsMSDSM())
			for i := 0; i < 4; i++ {
				io(t, ft, h) // both AO paths in use
			}
			before := ft.count(isOp("rtpg"))
			ft.move(bAO, nil)
			var wg sync.WaitGroup
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := h.Read(context.Background(), 0, 0, 8)
					assert.NoError(t, err)
				}()
			}
			wg.Wait()
			// 2A/06 waits on all four nexuses: the two AO paths meet it at
			// once and share one RTPG; after the switch the two b paths meet
			// theirs together and share another.
			assert.EqualValues(t, 4, h.Stats().UAs)
			assert.Equal(t, before+2, ft.count(isOp("rtpg")), "a UA meeting an RTPG in flight waits for it")
		})
	})
	t.Run("04/0A retried on the other group after the retry interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "w1", WindowsMSDSM())
			ft.mu.Lock()
			ft.state[1] = alua.Transitioning
			ft.mu.Unlock()
			start := time.Now()
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			assert.Equal(t, time.Second, time.Since(start).Round(100*time.Millisecond))
		})
	})
	t.Run("04/0C retried on the other group", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "w1", WindowsMSDSM())
			ft.mu.Lock()
			ft.state[1] = alua.Unavailable
			ft.mu.Unlock()
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			assert.EqualValues(t, 1, h.Stats().NotAvail)
		})
	})
}

func TestVMwareNMP(t *testing.T) {
	t.Run("MRU stays on one path and follows over on a state change", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			p, err := Lookup("vmware", map[string]string{"psp": "mru"})
			require.NoError(t, err)
			h := attach(t, ft, "e1", p)
			first := io(t, ft, h)
			for i := 0; i < 10; i++ {
				assert.Equal(t, first, io(t, ft, h))
			}
			ft.move(bAO, nil)
			now := io(t, ft, h)
			assert.Contains(t, []uint16{3, 4}, now)
			ft.move(aAO, nil)
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h), "follow-over: the AO path, not the most recent one")
		})
	})
	t.Run("RR switches every 1000 commands", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			p, err := Lookup("vmware", map[string]string{"psp": "rr"})
			require.NoError(t, err)
			h := attach(t, ft, "e1", p)
			for i := 0; i < 2500; i++ {
				_, err := h.Read(context.Background(), 0, 0, 8)
				require.NoError(t, err)
			}
			var ios []uint64
			for _, p := range h.Paths() {
				ios = append(ios, p.Counters().IOs[0])
			}
			assert.Equal(t, []uint64{1500, 1000, 0, 0}, ios)
		})
	})
}

func TestExplicitALUA(t *testing.T) {
	t.Run("activates the group it reaches and fails back by STPG", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			ft.explicit = true
			h := attach(t, ft, "x1", ExplicitALUA())
			ft.setCut("x1", 1, true)
			ft.setCut("x1", 2, true)
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			assert.EqualValues(t, 1, h.Stats().STPGs)
			ft.mu.Lock()
			assert.Equal(t, alua.ActiveOptimized, ft.state[2])
			ft.mu.Unlock()
			ft.setCut("x1", 1, false)
			ft.setCut("x1", 2, false)
			time.Sleep(5100 * time.Millisecond)
			assert.Contains(t, []uint16{1, 2}, io(t, ft, h), "the host moved the LUN back to its preferred group")
			assert.EqualValues(t, 2, h.Stats().STPGs)
		})
	})
	t.Run("two explicit hosts thrash under a partial fault", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			ft.explicit = true
			h1 := attach(t, ft, "x1", ExplicitALUA())
			h2 := attach(t, ft, "x2", ExplicitALUA())
			ft.setCut("x1", 1, true)
			ft.setCut("x1", 2, true)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for _, h := range []*Host{h1, h2} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						h.Read(ctx, 0, 0, 8)
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			assert.GreaterOrEqual(t, h1.Stats().STPGs, uint64(4), "x1 takes the LUN to b each time x2 took it back")
			assert.GreaterOrEqual(t, h2.Stats().STPGs, uint64(4), "x2 fails back to a at every check")
			assert.GreaterOrEqual(t, ft.count(isOp("stpg")), 8, "the LUN changes owner at every STPG")
		})
	})
	t.Run("an implicit-only target refuses STPG; the host uses the ANO path", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ft := newFakeTarget()
			h := attach(t, ft, "x1", ExplicitALUA())
			ft.setCut("x1", 1, true)
			ft.setCut("x1", 2, true)
			assert.Contains(t, []uint16{3, 4}, io(t, ft, h))
			assert.EqualValues(t, 1, h.Stats().STPGErrors)
		})
	})
}

func TestNaive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFakeTarget()
		h := attach(t, ft, "n1", Naive())
		seen := map[uint16]int{}
		for i := 0; i < 8; i++ {
			seen[io(t, ft, h)]++
		}
		assert.Equal(t, map[uint16]int{1: 2, 2: 2, 3: 2, 4: 2}, seen, "round robin over every path, AO or not")
		ft.move(bAO, nil)
		io(t, ft, h)
		assert.Zero(t, ft.count(isOp("rtpg")), "never reads RTPG, not even on 2A/06")
	})
}

// A stack the array has a host type for carries that type's name, and is
// declared with it; the others are declared default. The earlier names
// are refused with the new one.
func TestStackNamesAreHostTypes(t *testing.T) {
	for _, name := range Names {
		p, err := Lookup(name, nil)
		require.NoError(t, err)
		require.Contains(t, alua.HostTypes, p.HostType, name)
		if _, isType := alua.HostTypes[name]; isType {
			require.Equal(t, name, p.HostType)
		} else {
			require.Equal(t, alua.HostDefault, p.HostType, name)
		}
	}
	for old, now := range map[string]string{"linux-dm": "linux-dmmp", "windows-msdsm": "windows", "vmware-nmp": "vmware"} {
		_, err := Lookup(old, nil)
		require.ErrorContains(t, err, `is now named "`+now+`"`)
	}
}

// A write that outlives the command timeout is ended at the target
// before it is retried on another path: else, parked there, it lands
// after the retry and after a newer write acknowledged meanwhile.
func TestTimedOutWrite(t *testing.T) {
	tests := []struct {
		name     string
		tmfFails bool
		// want is LUN 0 block 0 after the parked write is let go; 0: the
		// late write may land (the target never confirmed its end).
		want         byte
		aborts       uint64
		abortsFailed uint64
	}{
		{name: "ABORT TASK answered: the late write never lands", want: 'B', aborts: 1},
		{name: "no task management answered: the nexus is dropped first", tmfFails: true, aborts: 1, abortsFailed: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ft := newFakeTarget()
				ft.tmfFails = tc.tmfFails
				h := attach(t, ft, "h1", LinuxDM())
				ft.mu.Lock()
				ft.holdWrites = 1
				ft.mu.Unlock()
				ctx := context.Background()
				require.NoError(t, h.Write(ctx, 0, 0, []byte{'A'}, false), "acknowledged through another path")
				require.NoError(t, h.Write(ctx, 0, 0, []byte{'B'}, false))
				ft.release()
				if tc.want != 0 {
					assert.Equal(t, tc.want, ft.block(0), "the newest acknowledged write reads back")
				}
				st := h.Stats()
				assert.Equal(t, tc.aborts, st.Aborts)
				assert.Equal(t, tc.abortsFailed, st.AbortsFailed)
				// The timed-out write's nexus was aborted on, or dropped,
				// before the write went out again.
				cs := ft.cmds()
				var held, abort, retry int = -1, -1, -1
				for i, c := range cs {
					switch {
					case c.Op == "write" && held < 0:
						held = i
					case c.Op == "abort" && held >= 0 && abort < 0:
						abort = i
					case c.Op == "write" && held >= 0 && retry < 0:
						retry = i
					}
				}
				require.True(t, held >= 0 && abort > held && retry > abort, "write, abort, retry in that order: %v", cs)
				assert.Equal(t, cs[held].Port, cs[abort].Port, "the abort goes to the timed-out command's nexus")
			})
		})
	}
}
