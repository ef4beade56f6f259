package webhook

import (
	"sync"
	"time"
)

// SeenEvents helps a receiver act once per event_id: delivery is at least
// once, and a retry after a lost response, a redrive or a dispatcher crash
// carries the same x-euterpe-event-id. It is an in-memory, bounded LRU with a
// time-to-live; a receiver with a database should rather insert event_id
// into a table with a unique key in the same transaction as its effect.
type SeenEvents struct {
	mu       sync.Mutex
	ttl      time.Duration
	capacity int
	at       map[string]time.Time
	order    []seenEntry // ring buffer, arrival order
	head, n  int
}

// NewSeenEvents remembers up to capacity event ids for ttl each. The oldest
// id is forgotten first when capacity is reached.
func NewSeenEvents(capacity int, ttl time.Duration) *SeenEvents {
	if capacity < 1 {
		capacity = 1
	}
	return &SeenEvents{ttl: ttl, capacity: capacity, at: make(map[string]time.Time), order: make([]seenEntry, capacity)}
}

type seenEntry struct {
	id string
	at time.Time
}

// First records eventID at now and reports whether this is its first
// sighting within the ttl. Call it after Verify succeeded and, ideally, after
// the event's effect is durable (otherwise a crash loses the event).
func (s *SeenEvents) First(eventID string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Look the id up before making room: a duplicate adds nothing, so it
	// must not evict anything (when the store is full and the duplicate is
	// the oldest id, evicting first would report it as first).
	if t, ok := s.at[eventID]; ok && now.Sub(t) < s.ttl {
		return false
	}
	for s.n > 0 {
		e := s.order[s.head]
		if now.Sub(e.at) < s.ttl && s.n < s.capacity {
			break
		}
		if t, ok := s.at[e.id]; ok && t.Equal(e.at) {
			delete(s.at, e.id)
		}
		s.order[s.head] = seenEntry{}
		s.head = (s.head + 1) % s.capacity
		s.n--
	}
	s.at[eventID] = now
	s.order[(s.head+s.n)%s.capacity] = seenEntry{id: eventID, at: now}
	s.n++
	return true
}
