package lab

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/aluad/aluad/pkg/api"
	"github.com/aluad/aluad/pkg/array"
)

// CrashOptions shape the crash check.
type CrashOptions struct {
	Iterations int
	Mirror     bool
	// Fault is how the node fails: power-loss (the default), panic or
	// crash (api.FaultPowerLoss, FaultPanic, FaultCrash).
	Fault   string
	Seed    uint64
	LUNs    int
	QD      int // writers per LUN
	Out     io.Writer
	Verbose bool
}

// CrashResult is what the crash check found.
type CrashResult struct {
	Iterations int
	Crashes    map[string]int
	Acked      int // acknowledged writes, each verified
	Lost       int // acknowledged writes that read back wrong
	// ReportedLostBlocks is what the array itself reported lost at the
	// crashes (mirroring off).
	ReportedLostBlocks int64
	Replayed           int // mirrored pages replayed by takeovers
	Failbacks          int // iterations whose restart failed back
}

const blk4k = 4096

// Tagged is a 4 KiB block filled with an 8-byte tag: what a verified
// write writes and its read-back compares.
func Tagged(tag uint64) []byte {
	b := make([]byte, blk4k)
	tagBlock(b, tag)
	return b
}

// tagBlock fills a 4 KiB block with an 8-byte tag.
func tagBlock(b []byte, tag uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], tag)
	}
}

// RunCrash writes unique patterns from every host at QD per LUN, crashes a
// node at a random point of each iteration, lets the array fail over,
// then reads back every acknowledged write through the survivor; it
// restarts the node and waits for the failback before the next round.
func RunCrash(ctx context.Context, o CrashOptions) (CrashResult, error) {
	if err := CheckNodeFault(o.Fault); err != nil {
		return CrashResult{}, err
	}
	if o.Iterations <= 0 || o.LUNs <= 0 || o.QD <= 0 {
		return CrashResult{}, fmt.Errorf("crash: iterations, LUNs and QD must be positive")
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	env, err := Start(ctx, EnvConfig{LUNs: o.LUNs, LUNSize: 16 << 20, Hosts: 2, Mirror: o.Mirror,
		Tick: 20 * time.Millisecond, FailbackWindow: 100 * time.Millisecond, Cooldown: 200 * time.Millisecond,
		PlanInterval: time.Hour, Penalty: 50 * time.Microsecond,
		// Each crash is injected on purpose and the node restarted: no
		// crash-loop hold, every round fails back.
		NoCrashHold: true})
	if err != nil {
		return CrashResult{}, err
	}
	defer env.Close()
	rng := rand.New(rand.NewPCG(o.Seed, 0x5eed))
	res := CrashResult{Crashes: map[string]int{}}
	seen := uint64(0)
	for it := 0; it < o.Iterations; it++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		acked, victim, err := crashRound(ctx, env, o, rng, it, &res)
		if err != nil {
			return res, fmt.Errorf("iteration %d: %w", it+1, err)
		}
		lost, err := verify(ctx, env, acked) // through the survivor
		if err != nil {
			return res, fmt.Errorf("iteration %d: verify: %w", it+1, err)
		}
		res.Lost += lost
		if err := restart(env, victim); err != nil {
			return res, fmt.Errorf("iteration %d: %w", it+1, err)
		}
		for _, a := range acked {
			res.Acked += len(a.tags)
		}
		// The owners are read from the array, and the move's event reaches
		// the feed just after: wait for the failback's event a little.
		failedBack := false
		for deadline := time.Now().Add(5 * time.Second); ; {
			evs, _ := env.D.Events.Since(seen)
			for _, e := range evs {
				seen = e.Seq
				if e.Kind == api.EventALUA && e.Change != nil {
					res.Replayed += e.Change.Replayed
					failedBack = failedBack || e.Change.Cause == "failback"
				}
			}
			if failedBack || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if failedBack {
			res.Failbacks++
		}
		res.Iterations++
		if o.Verbose {
			fmt.Fprintf(out, "iteration %d: acked %d, lost %d so far\n", it+1, res.Acked, res.Lost)
		}
	}
	return res, nil
}

// slotWrites is one writer's acknowledged writes: block -> tag of the
// last acknowledged, and the tags of writes to it sent after that but
// never acknowledged (they may or may not have landed).
type slotWrites struct {
	lun   uint64
	tags  map[uint64]uint64
	maybe map[uint64][]uint64
}

// crashRound runs writers, crashes a node mid-way, and once the failover
// is done stops the writers; it returns their acknowledged writes and the
// crashed node.
func crashRound(ctx context.Context, env *Env, o CrashOptions, rng *rand.Rand, it int, res *CrashResult) ([]*slotWrites, string, error) {
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var all []*slotWrites
	blocks := uint64(16<<20) / blk4k
	for li, lun := range env.LUNs {
		h := env.Hosts[li%len(env.Hosts)]
		for slot := 0; slot < o.QD; slot++ {
			sw := &slotWrites{lun: lun, tags: map[uint64]uint64{}, maybe: map[uint64][]uint64{}}
			all = append(all, sw)
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(slot)))
				buf := make([]byte, blk4k)
				for seq := uint64(1); wctx.Err() == nil; seq++ {
					b := uint64(slot) + uint64(o.QD)*r.Uint64N(blocks/uint64(o.QD))
					tag := uint64(it+1)<<40 | lun<<32 | uint64(slot)<<24 | seq
					tagBlock(buf, tag)
					err := h.Write(wctx, lun, b*8, buf, false)
					if err == nil {
						sw.tags[b] = tag
						delete(sw.maybe, b)
					} else {
						sw.maybe[b] = append(sw.maybe[b], tag)
					}
				}
			}()
		}
	}
	time.Sleep(time.Duration(20+rng.IntN(200)) * time.Millisecond)
	victim := env.D.Array.Nodes[rng.IntN(len(env.D.Array.Nodes))].Name
	r, err := env.D.Inject(api.Fault{Kind: NodeFault(o.Fault), Node: victim})
	if err != nil {
		stop()
		wg.Wait()
		return nil, "", err
	}
	res.Crashes[victim]++
	for _, l := range r.Change.Lost {
		res.ReportedLostBlocks += l.Blocks
	}
	// Writers go on through the failover for a while.
	env.WaitOwners(5*time.Second, func(l *array.LUN) bool { return l.Owner().Up() && !l.Moving() })
	time.Sleep(50 * time.Millisecond)
	stop()
	wg.Wait()
	return all, victim, nil
}

// restart brings the crashed node back and waits for the failback.
func restart(env *Env, victim string) error {
	if _, err := env.D.Inject(api.Fault{Kind: api.FaultRestart, Node: victim}); err != nil {
		return err
	}
	if !env.WaitOwners(10*time.Second, AtPreferred) {
		return fmt.Errorf("LUNs did not fail back to their preferred owners within 10s of node %s's restart", victim)
	}
	return nil
}

// verify reads back every acknowledged write and counts mismatches.
func verify(ctx context.Context, env *Env, acked []*slotWrites) (int, error) {
	lost := 0
	h := env.Hosts[0]
	want := make([]byte, blk4k)
	for _, sw := range acked {
		for b, tag := range sw.tags {
			got, err := h.Read(ctx, sw.lun, b*8, 8)
			if err != nil {
				return lost, err
			}
			if !holdsOneOf(got, want, tag, sw.maybe[b]) {
				lost++
			}
		}
	}
	return lost, nil
}

// holdsOneOf: the block holds the acknowledged tag, or a later write that
// was sent but never acknowledged.
func holdsOneOf(got, scratch []byte, acked uint64, maybe []uint64) bool {
	for _, t := range append([]uint64{acked}, maybe...) {
		tagBlock(scratch, t)
		if bytes.Equal(got, scratch) {
			return true
		}
	}
	return false
}

// NodeFault is the node failure a run injects: kind, or a power loss.
func NodeFault(kind string) string {
	if kind == "" {
		return api.FaultPowerLoss
	}
	return kind
}

// CheckNodeFault refuses a kind that is not a node failure.
func CheckNodeFault(kind string) error {
	switch NodeFault(kind) {
	case api.FaultPowerLoss, api.FaultPanic, api.FaultCrash:
		return nil
	}
	return fmt.Errorf("--fault must be power-loss, panic or crash, not %q", kind)
}
