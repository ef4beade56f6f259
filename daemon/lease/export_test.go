package lease

import "time"

// DueForClockResync makes q's next Time measure the database clock again.
func DueForClockResync(q *Queue) {
	q.clock.mu.Lock()
	q.clock.syncedAt = time.Now().Add(-2 * ClockResync)
	q.clock.mu.Unlock()
}

// ClockDue reports whether q's clock is still due a measurement.
func ClockDue(q *Queue) bool {
	q.clock.mu.Lock()
	defer q.clock.mu.Unlock()
	return !q.clock.synced || time.Since(q.clock.syncedAt) >= ClockResync
}

// KeepWallClock makes Keep read the wall clock from now, so a test can
// move it as a suspended machine's moves while the monotonic clock stands
// still.
func KeepWallClock(now func() time.Time) KeepOption {
	return func(o *keepOptions) { o.wall = now }
}

// ClockRoundTrip is the round trip of q's measurement in force, twice its
// error.
func ClockRoundTrip(q *Queue) time.Duration {
	q.clock.mu.Lock()
	defer q.clock.mu.Unlock()
	return q.clock.rtt
}
