package lease

import "time"

// DueForClockResync makes q's next Time measure the database clock again.
func DueForClockResync(q *Queue) {
	q.clock.mu.Lock()
	q.clock.syncedAt = time.Now().Add(-2 * ClockResync)
	q.clock.mu.Unlock()
}
