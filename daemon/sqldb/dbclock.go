package sqldb

import (
	"context"
	"fmt"
	"time"
)

// Clock returns the database's current time, to the microsecond as every
// stored time. On Postgres that is the server's clock (clock_timestamp(),
// not the transaction's start), shared by every pod. SQLite runs
// in-process, so its clock is this machine's, which every user of the file
// shares as well; it is read directly rather than through SQLite's 'now',
// which keeps only whole milliseconds: a lease clock measured through it
// runs up to a millisecond behind the processes' own, and a job another
// write stamped visible "now" would not be claimable for that long.
func (db *DB) Clock(ctx context.Context) (time.Time, error) {
	return db.ClockOn(ctx, db.DB)
}

// ClockOn is Clock read through ex, a transaction say: it needs no
// connection of its own, so it cannot wait for one while ex holds the last
// of the pool.
func (db *DB) ClockOn(ctx context.Context, ex Execer) (time.Time, error) {
	if db.Engine != Postgres {
		return FromMicros(time.Now().UnixMicro()), nil
	}
	q := `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	var us int64
	if err := ex.QueryRowContext(ctx, q).Scan(&us); err != nil {
		return time.Time{}, fmt.Errorf("database clock: %w", err)
	}
	return FromMicros(us), nil
}
