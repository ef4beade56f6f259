package lease

import (
	"context"
	"fmt"
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

// epoch is the origin of the default Elapsed clock. time.Since(epoch)
// reads Go's monotonic clock, which a step of the wall clock does not move.
var epoch = time.Now()

// dbClock keeps the last measurement of the database clock.
type dbClock struct {
	mu        sync.Mutex
	offset    time.Duration // from Now to the database clock, for a queue that counts on Now
	base      time.Time     // the database clock at the last measurement...
	mark      time.Duration // ...and the Elapsed clock at the same moment
	at        time.Time     // ...and this process's wall clock
	rtt       time.Duration // ...and its round trip, twice its error
	synced    bool
	syncedAt  time.Time // wall time with its monotonic reading, of the last measurement
	retryAt   time.Time // no measurement before this, after one failed
	measuring bool      // a resync runs in the background
}

// Time is the current time by the database's clock: the database clock
// read at the last measurement plus the time elapsed since on a clock that
// is never stepped (Queue.Elapsed, or Go's monotonic clock). Counted on
// the wall clock instead, a step of it (NTP, a resumed VM, `date -s`)
// moved lease time until the next measurement: stepped forward by more
// than a lease's remaining time, a pod reclaimed live leases; stepped
// back, it wrote leases that were already over. A queue given only a
// fake Now (tests of skewed pods) keeps counting on it: Now corrected by
// its offset to the database clock. The database clock is measured on
// first use and every ClockResync (once only with a fake clock). Every lease time the queue
// writes (lease_expires_at, heartbeat_at, the ready time a claim compares)
// and every expiry it judges come from it, so pods whose clocks disagree
// still agree on when a lease ends: a pod whose clock runs ahead cannot
// reclaim a live job early, and one whose clock runs behind does not keep
// an expired one. The error of the estimate is half a round trip to the
// database, so a measurement times only its query, on a connection taken
// beforehand, and a resync whose round trip makes it worse than the last
// (better) keeps the last offset, measuring again once a reading as slow
// would be taken (ClockResync at most). If the database cannot be read,
// the last offset is kept and the measurement is retried clockRetry
// later.
// Before any measurement succeeded there is no offset, and Time is this
// process's clock alone: the lease statements (claim, reclaim, heartbeat)
// then measure on their own transaction instead (timeOn).
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
	q.checkClocks(local)
	if time.Now().Before(c.retryAt) || c.measuring {
		return q.timeAt(local)
	}
	switch {
	case !c.synced && !c.base.IsZero():
		// Measured before, dropped (checkClocks) and its background
		// measurement failed: measured in the background again. Waited for
		// here, inside a transaction holding the pool, it would wait for
		// the caller's own connection, with every caller of Time behind
		// the lock.
		c.measuring = true
		// Not owned by a caller: it ends by itself within measure's 5 s.
		go q.resync()
	case !c.synced:
		r, err := q.measure()
		if err != nil {
			c.retryAt = time.Now().Add(clockRetry)
			break
		}
		c.set(r)
		local = r.after
	// A fake clock (tests) is measured once: re-measuring would undo the
	// time the test moved it forward.
	case q.Now == nil && q.Elapsed == nil && time.Since(c.syncedAt) >= ClockResync:
		c.measuring = true
		// Not owned by a caller: it ends by itself within measure's 5 s.
		go q.resync()
	}
	return q.timeAt(local)
}

// timeAt is Time from the last measurement, local being this process's
// clock now; the caller holds q.clock.mu. Before any measurement it is
// local alone. A measurement dropped because the clocks disagree
// (checkClocks) still counts on the elapsed clock until the next lands:
// that clock never jumps.
func (q *Queue) timeAt(local time.Time) time.Time {
	c := &q.clock
	if c.base.IsZero() || q.countsOnNow() {
		return local.Add(c.offset)
	}
	return c.base.Add(q.elapsed() - c.mark)
}

// countsOnNow reports whether lease time runs on Now between measurements:
// only Now is injected, so a test moving it moves lease time.
func (q *Queue) countsOnNow() bool { return q.Now != nil && q.Elapsed == nil }

// elapsed is the clock that is never stepped: Queue.Elapsed, or Go's
// monotonic clock.
func (q *Queue) elapsed() time.Duration {
	if q.Elapsed != nil {
		return q.Elapsed()
	}
	return time.Since(epoch)
}

// reading is one measurement of the database clock.
type reading struct {
	offset time.Duration // from this process's clock to the database's
	after  time.Time     // this process's clock when the answer came
	base   time.Time     // the database clock then
	mark   time.Duration // the Elapsed clock then
	rtt    time.Duration // the round trip on the Elapsed clock
}

// clockRoundTrip is the round trip under which a reading of the database
// clock is taken without comparing it with the last: off by at most 25 ms,
// a fortieth of the clockDisagreement the clock lets pass unmeasured.
const clockRoundTrip = 50 * time.Millisecond

// clockTries is how many readings a measurement takes at most looking for
// one within clockRoundTrip before it settles for the best of them: a
// single slow answer (a busy server, a lost packet) should not cost the
// first measurement, which has nothing better to fall back on.
const clockTries = 3

// clockDriftRate is how fast the error of a kept reading grows: NTP slews
// either clock by up to 500 ppm, the two perhaps in opposite directions,
// so a millisecond a second.
const clockDriftRate = 1000

// better reports whether r is to replace the last measurement: there is
// none in force, or r is within clockRoundTrip, or its error (half its
// round trip) is no worse than the last one's has grown to since. A
// reading that waited on a busy server or network is off by half the wait,
// ahead of the database clock, and kept for a minute: a pod then judged
// live leases expired. The caller holds c.mu.
func (c *dbClock) better(r reading) bool {
	if !c.synced || r.rtt <= clockRoundTrip {
		return true
	}
	return r.rtt/2 <= c.rtt/2+(r.mark-c.mark)/clockDriftRate
}

// untilBetter is how long after r a reading of its round trip would be
// better than the one in force, whose error grows with its age.
func (c *dbClock) untilBetter(r reading) time.Duration {
	return (r.rtt/2-c.rtt/2)*clockDriftRate - (r.mark - c.mark)
}

// checkClocks drops the last measurement when the wall clock and the
// elapsed clock disagree about the time since it was taken: the wall
// clock was stepped, or the machine slept (the monotonic clock stands
// still while it does), and only the database can say which one counted
// right. It is measured again in the background, as a resync is; until
// that lands, the lease statements measure on their own transaction
// (timeOn). The caller holds q.clock.mu.
func (q *Queue) checkClocks(local time.Time) {
	c := &q.clock
	if !c.synced || q.countsOnNow() || !c.disagree(local, q.elapsed()) {
		return
	}
	c.synced = false
	if !c.measuring {
		c.measuring = true
		// Not owned by a caller: it ends by itself within measure's 5 s.
		go q.resync()
	}
}

// clockDisagreement is how far the wall clock and the monotonic clock may
// disagree about the time since the last measurement before Time measures
// again: more than an NTP client's slewing (500 ppm) adds in a ClockResync,
// less than a lease's worth of error.
const clockDisagreement = time.Second

// disagree reports whether the wall clock (local) and the elapsed clock
// counted time since the last measurement differently by more than
// clockDisagreement; the caller holds c.mu.
func (c *dbClock) disagree(local time.Time, elapsed time.Duration) bool {
	d := local.Round(0).Sub(c.at.Round(0)) - (elapsed - c.mark)
	return d > clockDisagreement || d < -clockDisagreement
}

// set makes r the last measurement; the caller holds c.mu.
func (c *dbClock) set(r reading) {
	c.offset, c.base, c.mark, c.at, c.rtt = r.offset, r.base, r.mark, r.after, r.rtt
	c.synced, c.syncedAt, c.retryAt = true, time.Now(), time.Time{}
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
	local := q.local()
	c.mu.Lock()
	q.checkClocks(local)
	synced := c.synced
	c.mu.Unlock()
	if synced {
		return q.Time(), false, nil
	}
	r, err := q.measureOn(ctx, tx)
	if err != nil {
		return time.Time{}, false, err
	}
	c.mu.Lock()
	if !c.synced {
		c.set(r)
	}
	c.mu.Unlock()
	return q.Time(), true, nil
}

// TimeTx is Time for a caller about to write in tx, a transaction it holds
// and Time's first measurement would have to wait for: on a pool of one,
// or one every caller holds a transaction of, a measurement on a connection
// of its own waits for the caller's until it gives up (5 s), the
// transaction open all along. So while the database clock has never been
// measured (or its last measurement was dropped) it is measured on tx, as
// the lease statements do; later it is Time. A failed measurement fails
// the caller's statement, as theirs does.
func (q *Queue) TimeTx(ctx context.Context, tx sqldb.Execer) (time.Time, error) {
	now, _, err := q.timeOn(ctx, tx)
	return now, err
}

// resync measures the database clock again for Time, in the background.
func (q *Queue) resync() {
	r, err := q.measure()
	c := &q.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	c.measuring = false
	switch {
	case err != nil:
		c.retryAt = time.Now().Add(clockRetry)
		return
	case !c.better(r):
		// The database answers slowly now. Measured again every
		// clockRetry, it would get a few more queries from each pod every
		// 5 s for as long as the kept reading stays the better one: the
		// next is tried once a reading as slow would be taken.
		c.retryAt = time.Now().Add(min(ClockResync, max(clockRetry, c.untilBetter(r))))
		return
	}
	c.set(r)
}

// measure reads the database clock. Its estimate of the database clock at
// the answer is off by at most half the round trip. The connection is
// taken before the round trip is timed: read through the pool, a busy
// pool's wait for a connection counted in it, and the database read its
// clock at the end of that wait, not halfway, so the estimate ran ahead by
// half the wait. SQLite's clock is read without a connection.
func (q *Queue) measure() (reading, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if q.DB.Engine != sqldb.Postgres {
		return q.measureOn(ctx, q.DB.DB)
	}
	conn, err := q.DB.DB.Conn(ctx)
	if err != nil {
		return reading{}, fmt.Errorf("database clock: %w", err)
	}
	defer func() { _ = conn.Close() }()
	return q.measureOn(ctx, conn)
}

// measureOn is measure through ex: the reading with the shortest round
// trip of up to clockTries.
func (q *Queue) measureOn(ctx context.Context, ex sqldb.Execer) (reading, error) {
	var best reading
	for i := range clockTries {
		r, err := q.readOn(ctx, ex)
		if err != nil {
			return reading{}, err
		}
		if i == 0 || r.rtt < best.rtt {
			best = r
		}
		if best.rtt <= clockRoundTrip {
			break
		}
	}
	return best, nil
}

// readOn reads the database clock through ex once.
func (q *Queue) readOn(ctx context.Context, ex sqldb.Execer) (reading, error) {
	before, sent := q.local(), q.elapsed()
	db, err := q.DB.ClockOn(ctx, ex)
	after, came := q.local(), q.elapsed()
	if err != nil {
		return reading{}, err
	}
	return reading{
		offset: db.Sub(before.Add(after.Sub(before) / 2)),
		after:  after,
		base:   db.Add((came - sent) / 2),
		mark:   came,
		rtt:    came - sent,
	}, nil
}

// local is this process's clock: Queue.Now, or time.Now.
func (q *Queue) local() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}
