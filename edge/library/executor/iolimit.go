package executor

import (
	"context"
	"database/sql"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// ThumbnailIOBucket is the global I/O bucket of §7.4.
const ThumbnailIOBucket = "thumbnail_io_global"

// sqlIOReserve books ?2 ms from the later of the booked end and now (?1).
// The bucket is kept in wall-clock milliseconds, and a clock stepped back
// (NTP correcting a clock that ran ahead, an RTC wrong at boot) would leave
// the booked end in the future by the size of the step: every reservation
// would wait that long, for hours, while heartbeats keep the leases alive.
// updated_at is the clock of the last booking, so a now before it measures
// the step, and the booked end is moved back by as much: the backlog still
// ahead is kept (the wait never exceeds what was booked), the step is not.
// (SQLite evaluates every SET expression on the row as it was.)
var sqlIOReserve = mustUpdate("io_rate_limits", "reserve", []Set{
	{"next_available_at_ms", "max(next_available_at_ms - max(updated_at - ?1, 0), ?1) + ?2"},
	{"updated_at", "?1"},
}, "bucket_key = ?3 RETURNING next_available_at_ms - ?2")

// ReserveIO books cost bytes in the shared bucket and waits until the
// booked slot starts. Every worker of every process sharing library.db
// paces through the same row, so the rate is global.
func (x *Executor) ReserveIO(ctx context.Context, bucket string, cost int64) error {
	wait, err := x.reserveIO(ctx, bucket, cost)
	if err != nil || wait <= 0 {
		return err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// reserveIO books cost bytes (bootstrapping the bucket row when absent) and
// returns how long, on the store clock, until the booked slot starts.
func (x *Executor) reserveIO(ctx context.Context, bucket string, cost int64) (time.Duration, error) {
	if x.IOBytesPerSec <= 0 || cost <= 0 {
		return 0, nil
	}
	interval := cost * 1000 / x.IOBytesPerSec
	var start, now int64
	path := store.WritePath{Table: sqlIOReserve.Table, Path: sqlIOReserve.Path}
	err := x.Store.TxOnPath(ctx, []store.WritePath{path}, func(tx *sql.Tx) error {
		now = x.now()
		// bootstrap path: insert the bucket row when absent
		if _, err := tx.ExecContext(ctx, `INSERT INTO io_rate_limits(bucket_key, next_available_at_ms, updated_at)
VALUES (?, 0, ?) ON CONFLICT(bucket_key) DO NOTHING`, bucket, now); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, sqlIOReserve.SQL, now, interval, bucket).Scan(&start)
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(start-now) * time.Millisecond, nil
}
