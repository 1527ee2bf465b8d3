package api

import (
	"sync"
	"time"
)

// EventLog keeps the most recent events in a ring and hands each new one
// to an optional in-process consumer.
type EventLog struct {
	mu      sync.Mutex
	ring    []Event
	next    uint64 // seq of the next event; seqs start at 1
	now     func() time.Time
	consume func(Event)
}

// NewEventLog makes a log holding the last capacity events.
func NewEventLog(capacity int, now func() time.Time, consume func(Event)) *EventLog {
	return &EventLog{ring: make([]Event, capacity), next: 1, now: now, consume: consume}
}

// Add stamps e with a sequence number and time and stores it.
func (l *EventLog) Add(e Event) {
	l.mu.Lock()
	e.Seq, e.Time = l.next, l.now()
	l.next++
	l.ring[int(e.Seq%uint64(len(l.ring)))] = e
	consume := l.consume
	l.mu.Unlock()
	if consume != nil {
		consume(e)
	}
}

// Since returns the stored events after seq, oldest first, and how many
// after seq were already overwritten (lost to a slow reader).
func (l *EventLog) Since(seq uint64) (events []Event, lost uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := uint64(1)
	if l.next > uint64(len(l.ring)) {
		first = l.next - uint64(len(l.ring))
	}
	from := seq + 1
	if from < first {
		lost = first - from
		from = first
	}
	for s := from; s < l.next; s++ {
		events = append(events, l.ring[int(s%uint64(len(l.ring)))])
	}
	return events, lost
}
