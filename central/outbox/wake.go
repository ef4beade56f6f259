package outbox

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// sqliteWatchEvery is how often the SQLite wake-up looks for commits it
// is not told of: other processes' (`euterpe-central outbox redrive`, a
// second central on the file) and the console's redrive. This process's
// inbox commits that write events wake the dispatcher directly (serve
// wires Inbox.OnEvents to Wake), so the watch only has to beat the poll's
// 500–1500 ms by enough for a redrive. At 10 ms it was most of an idle
// pod's CPU: a tenth of that took an idle central on SQLite from 1.5 % to
// 0.7 % of a core.
const sqliteWatchEvery = 100 * time.Millisecond

// watch wakes the claim loop when new events commit: LISTEN on Postgres
// (the insert trigger notifies), PRAGMA data_version on SQLite (it changes
// whenever another connection of any process commits, and costs no I/O).
// When it cannot watch it logs and retries; the jittered poll still runs.
func (d *Dispatcher) watch(ctx context.Context) {
	for ctx.Err() == nil {
		var err error
		if d.store.DB.Engine == sqldb.Postgres {
			err = d.listen(ctx)
		} else {
			err = d.watchDataVersion(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("outbox wake-up lost; polling only until it reconnects", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (d *Dispatcher) listen(ctx context.Context) error {
	conn, err := d.store.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errors.New("postgres connection is not pgx")
		}
		pc := sc.Conn()
		// The connection may listen from here on, and must never go back
		// to the pool listening: a listener nobody reads keeps Postgres
		// queueing notifications for it. Returning driver.ErrBadConn is
		// not enough: a wait cut short by ctx leaves pgx's connection
		// open, and database/sql then hands it back to pgx's pool as it
		// is. Closed, the pool drops it.
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = pc.Close(cctx)
		}()
		if _, err := pc.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
			return errors.Join(driver.ErrBadConn, err)
		}
		d.Wake() // events may have committed before LISTEN took effect
		for {
			if _, err := pc.WaitForNotification(ctx); err != nil {
				return errors.Join(driver.ErrBadConn, err)
			}
			d.Wake()
		}
	})
}

func (d *Dispatcher) watchDataVersion(ctx context.Context) error {
	conn, err := d.store.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var last int64 = -1
	t := time.NewTicker(sqliteWatchEvery)
	defer t.Stop()
	for {
		var v int64
		if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			return err
		}
		if v != last {
			last = v
			if due, err := d.store.Due(ctx); err == nil && due {
				d.Wake()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
