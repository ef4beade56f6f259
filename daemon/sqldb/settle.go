package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// ErrUnsettled means Settled could not make sure the server stopped a
// statement whose caller gave up on it: the statement may still commit.
var ErrUnsettled = errors.New("sqldb: the outcome of a cut-off statement is unknown")

// settleTimeout bounds how long Settled waits for the server to end a
// cut-off statement's backend. A server that answers ends one in
// milliseconds; one that does not must not hold the caller's answer much
// past the budget it already spent.
const settleTimeout = 2 * time.Second

// Settled runs fn, autocommit statements, on a connection of its own.
//
// When ctx ends while a statement is on a Postgres server, pgx gives up on
// the connection, but the server carries on: a statement waiting for a
// lock, say, commits once it has it, after its caller was told it failed.
// A connection broken on the way does the same. So when fn fails that way,
// Settled ends the server process of that connection (pg_terminate_backend)
// and waits until it has gone. On return,
// whatever fn wrote is committed or never will be, and the caller can read
// the database to learn which. If that cannot be confirmed (the server
// does not answer), the error also wraps ErrUnsettled.
//
// On SQLite a statement runs in this process and is over when it returns,
// so fn runs on the pool as is.
func (db *DB) Settled(ctx context.Context, fn func(ctx context.Context, ex Execer) error) error {
	if db.Engine != Postgres {
		return fn(ctx, db.DB)
	}
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		return err // nothing was sent
	}
	defer conn.Close()
	var pid uint32
	if err := conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("sqldb: settle: driver connection %T is not pgx's", dc)
		}
		pid = c.Conn().PgConn().PID()
		return nil
	}); err != nil {
		return err
	}
	err = fn(ctx, conn)
	if !outcomeUnknown(err) {
		return err
	}
	if db.settleHold != nil {
		db.settleHold()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if serr := db.endBackend(sctx, pid); serr != nil {
		return fmt.Errorf("%w (%w: %w)", err, ErrUnsettled, serr)
	}
	return err
}

// WasCut reports whether err, from Settled, is a statement cut off and then
// settled: what it wrote is final now, and the caller may read the
// database to learn whether it committed.
func WasCut(err error) bool {
	return !errors.Is(err, ErrUnsettled) && outcomeUnknown(err)
}

// outcomeUnknown reports whether a statement that returned err may still
// be running on the server: it did not fail there (a server error rolled
// it back, sql.ErrNoRows is an answer), and it was sent (pgx knows when
// nothing was, a failed connect say), but its context ended or its
// connection broke before the answer came.
func outcomeUnknown(err error) bool {
	var pe *pgconn.PgError
	return err != nil && !errors.As(err, &pe) && !errors.Is(err, sql.ErrNoRows) && !pgconn.SafeToRetry(err)
}

// endBackend ends the server process pid and returns once it is gone.
// pg_terminate_backend only signals the process; it is gone when
// pg_stat_activity no longer lists it. A role may end its own backends.
func (db *DB) endBackend(ctx context.Context, pid uint32) error {
	if _, err := db.ExecContext(ctx, `SELECT pg_terminate_backend($1)`, int64(pid)); err != nil {
		return fmt.Errorf("terminate backend %d: %w", pid, err)
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var alive bool
		if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, int64(pid)).Scan(&alive); err != nil {
			return fmt.Errorf("wait for backend %d to end: %w", pid, err)
		}
		if !alive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for backend %d to end: %w", pid, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// SetSettleHold makes Settled call hold after a statement was cut off and
// before its backend is ended: tests use it to let the statement commit in
// that window. Not for use while the DB is in use.
func (db *DB) SetSettleHold(hold func()) { db.settleHold = hold }
