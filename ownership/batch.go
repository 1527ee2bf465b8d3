package ownership

import (
	"sort"

	"github.com/aluad/aluad/pkg/alua"
)

// The batcher (reference 002 "I/O Latency Spikes"): the moves of one
// decision are grouped by destination and LUN class (media type and drive
// group), so that a batch's stop time is close to the normal response time
// of that class, and split so that no batch's expected stop exceeds the
// stop budget. Failovers go first.

var causeOrder = map[alua.Cause]int{alua.CauseFailover: 0, alua.CauseFailback: 1, alua.CauseShipping: 2, alua.CauseBalance: 3}

// emit records the moves as decided (the core's view of owners changes
// at once) and appends them to Ready as batches.
func (c *Core) emit(moves []move) {
	if len(moves) == 0 || c.cfg.Passive {
		return
	}
	type key struct {
		cause     alua.Cause
		to, class string
	}
	groups := map[key][]*lun{}
	var keys []key
	for _, m := range moves {
		if m.l.owner == m.to {
			continue
		}
		if c.now < m.l.retryAt && c.nodes[m.l.owner].up {
			continue // backing off after a rollback (a takeover off a down owner never waits)
		}
		if m.l.failures > 0 && c.now-m.l.retryAt > 2*maxRetryTicks {
			m.l.failures = 0 // long enough without a rollback
		}
		c.setOwner(m.l, m.to, m.cause)
		k := key{m.cause, m.to, m.l.class()}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], m.l)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if causeOrder[a.cause] != causeOrder[b.cause] {
			return causeOrder[a.cause] < causeOrder[b.cause]
		}
		if a.class != b.class {
			return a.class < b.class
		}
		return a.to < b.to
	})
	for _, k := range keys {
		ls := groups[k]
		sort.Slice(ls, func(i, j int) bool { return ls[i].id < ls[j].id })
		var b *Batch
		for _, l := range ls {
			stop := c.cfg.stopMicros(l.media)
			if b == nil || (b.Stop+stop > c.cfg.StopBudget && len(b.LUNs) > 0) {
				c.ready.Batches = append(c.ready.Batches, Batch{To: k.to, Cause: k.cause, Class: k.class})
				b = &c.ready.Batches[len(c.ready.Batches)-1]
			}
			b.LUNs = append(b.LUNs, l.id)
			b.Stop += stop
		}
	}
}
