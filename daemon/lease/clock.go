package lease

import (
	"context"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// ClockResync is how often a Queue measures the database clock again. The
// offset between the database clock and this process's clock drifts by
// little more than NTP corrections in that time.
const ClockResync = time.Minute

// clockRetry is how long after a failed measurement of the database clock
// the next is tried. Meanwhile Time keeps the last offset: each call
// measuring again would make every caller wait, one after another under
// the clock's lock, for a database that is not answering.
const clockRetry = 5 * time.Second

// dbClock keeps the offset from this process's clock to the database's.
type dbClock struct {
	mu        sync.Mutex
	offset    time.Duration
	synced    bool
	syncedAt  time.Time // wall time with its monotonic reading, of the last measurement
	retryAt   time.Time // no measurement before this, after one failed
	measuring bool      // a resync runs in the background
}

// Time is the current time by the database's clock: this process's clock
// (Queue.Now, or time.Now) corrected by the offset to the database clock,
// measured on first use and every ClockResync (once only with a fake Now). Every lease time the queue
// writes (lease_expires_at, heartbeat_at, the ready time a claim compares)
// and every expiry it judges come from it, so pods whose clocks disagree
// still agree on when a lease ends: a pod whose clock runs ahead cannot
// reclaim a live job early, and one whose clock runs behind does not keep
// an expired one. The error of the estimate is half a round trip to the
// database. If the database cannot be read, the last offset is kept and
// the measurement is retried clockRetry later. Before any measurement
// succeeded there is no offset, and Time is this process's clock alone:
// the lease statements (claim, reclaim, heartbeat) then measure on their
// own transaction instead (timeOn).
//
// A measurement takes a connection of its own, and Time is mostly called
// inside transactions, each holding one: when they hold the whole pool, a
// caller waiting for the measurement would wait for a connection it holds
// itself. So only the first measurement is waited for (Claim and Reclaim
// make it before their transaction begins); later ones run in the
// background while callers keep the last offset, which drifts by little in
// the time one takes.
func (q *Queue) Time() time.Time {
	local := q.local()
	c := &q.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Now().Before(c.retryAt) || c.measuring {
		return local.Add(c.offset)
	}
	switch {
	case !c.synced:
		offset, after, err := q.measure()
		if err != nil {
			c.retryAt = time.Now().Add(clockRetry)
			break
		}
		c.offset, c.synced, c.syncedAt = offset, true, time.Now()
		local = after
	// A fake Now (tests) is measured once: re-measuring would undo the time
	// the test moved it forward.
	case q.Now == nil && time.Since(c.syncedAt) >= ClockResync:
		c.measuring = true
		// Not owned by a caller: it ends by itself within measure's 5 s.
		go q.resync()
	}
	return local.Add(c.offset)
}

// timeOn is Time for the lease statements that follow in tx. Until the
// database clock has been measured once, Time is only this process's
// clock, which says nothing about the leases other pods wrote: a pod whose
// clock runs ahead would reclaim them live, one running behind would write
// leases that are already over. The first measurement can fail while the
// database answers (it waits a bounded time for a connection of its own,
// and the pool may be busy that long), so here it is taken on tx's
// connection instead, and its failure fails the statement. fresh reports
// that the clock was measured here.
func (q *Queue) timeOn(ctx context.Context, tx sqldb.Execer) (now time.Time, fresh bool, err error) {
	c := &q.clock
	c.mu.Lock()
	synced := c.synced
	c.mu.Unlock()
	if synced {
		return q.Time(), false, nil
	}
	offset, _, err := q.measureOn(ctx, tx)
	if err != nil {
		return time.Time{}, false, err
	}
	c.mu.Lock()
	if !c.synced {
		c.offset, c.synced, c.syncedAt, c.retryAt = offset, true, time.Now(), time.Time{}
	}
	c.mu.Unlock()
	return q.Time(), true, nil
}

// resync measures the database clock again for Time, in the background.
func (q *Queue) resync() {
	offset, _, err := q.measure()
	c := &q.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	c.measuring = false
	if err != nil {
		c.retryAt = time.Now().Add(clockRetry)
		return
	}
	c.offset, c.syncedAt = offset, time.Now()
}

// measure reads the database clock and returns its offset from this
// process's clock, and this process's clock when the answer came.
func (q *Queue) measure() (time.Duration, time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return q.measureOn(ctx, q.DB.DB)
}

// measureOn is measure through ex.
func (q *Queue) measureOn(ctx context.Context, ex sqldb.Execer) (time.Duration, time.Time, error) {
	before := q.local()
	db, err := q.DB.ClockOn(ctx, ex)
	after := q.local()
	if err != nil {
		return 0, after, err
	}
	return db.Sub(before.Add(after.Sub(before) / 2)), after, nil
}

// local is this process's clock: Queue.Now, or time.Now.
func (q *Queue) local() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}
