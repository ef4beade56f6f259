package sqldb

import (
	"context"
	"fmt"
	"time"
)

// Clock returns the database's current time. On Postgres that is the
// server's clock (clock_timestamp(), not the transaction's start), shared
// by every pod; SQLite runs in-process, so it is this machine's clock,
// which every user of the file shares as well.
func (db *DB) Clock(ctx context.Context) (time.Time, error) {
	q := `SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)`
	if db.Engine == Postgres {
		q = `SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`
	}
	var us int64
	if err := db.QueryRowContext(ctx, q).Scan(&us); err != nil {
		return time.Time{}, fmt.Errorf("database clock: %w", err)
	}
	return FromMicros(us), nil
}
