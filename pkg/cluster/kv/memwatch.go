package kv

import (
	"context"
	"strings"
)

// memWatcher is one watch on Mem: the responses not yet taken, sent in
// order by its own goroutine so a slow receiver holds up no writer.
type memWatcher struct {
	req    WatchRequest
	from   int64
	queue  []WatchResponse
	notify chan struct{} // a response was queued
}

func (w *memWatcher) match(k string) bool {
	return k == w.req.Key || (w.req.Prefix && strings.HasPrefix(k, w.req.Key))
}

// offer queues the events of one revision that the watch covers (Mem's
// lock held).
func (w *memWatcher) offer(evs []Event) {
	var mine []Event
	for _, ev := range evs {
		if ev.KV.ModRev < w.from || !w.match(ev.KV.Key) {
			continue
		}
		if !w.req.PrevKV {
			ev.Prev = nil
		}
		mine = append(mine, ev)
	}
	if len(mine) == 0 {
		return
	}
	w.queue = append(w.queue, WatchResponse{Events: mine})
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Watch implements Backend: the events from w.FromRev (replayed from the
// history) and then every new one, until ctx ends.
func (m *Mem) Watch(ctx context.Context, req WatchRequest) <-chan WatchResponse {
	out := make(chan WatchResponse)
	m.mu.Lock()
	m.expireLocked()
	if req.FromRev > 0 && req.FromRev < m.compacted {
		compacted := m.compacted
		m.mu.Unlock()
		go func() {
			defer close(out)
			select {
			case out <- WatchResponse{CompactRev: compacted, Canceled: true}:
			case <-ctx.Done():
			}
		}()
		return out
	}
	w := &memWatcher{req: req, from: req.FromRev, notify: make(chan struct{}, 1)}
	if w.from <= 0 {
		w.from = m.rev + 1
	}
	// Replay, one response per revision.
	for i := 0; i < len(m.log); {
		j := i
		for j < len(m.log) && m.log[j].KV.ModRev == m.log[i].KV.ModRev {
			j++
		}
		w.offer(m.log[i:j])
		i = j
	}
	m.watchers[w] = struct{}{}
	m.mu.Unlock()

	go func() {
		defer close(out)
		defer func() {
			m.mu.Lock()
			delete(m.watchers, w)
			m.mu.Unlock()
		}()
		for {
			m.mu.Lock()
			var next *WatchResponse
			if len(w.queue) > 0 {
				next = &w.queue[0]
			}
			m.mu.Unlock()
			if next == nil {
				select {
				case <-w.notify:
					continue
				case <-ctx.Done():
					return
				}
			}
			select {
			case out <- *next:
				m.mu.Lock()
				w.queue = w.queue[1:]
				m.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
