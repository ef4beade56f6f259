package sqldb

import (
	"context"
	"database/sql"
	"fmt"
)

// writerTx runs fn in a transaction on the SQLite writer connection.
//
// The transaction begins on a context that is never cancelled. When the
// context a transaction began on ends, database/sql rolls the transaction
// back from a goroutine of its own, and the caller's own Rollback returns at
// once without waiting for it. On a pool connection that is harmless (the
// connection goes back to the pool only after the rollback), but the writer
// is one *sql.Conn used again at once, so the next transaction could begin
// before that ROLLBACK ran. If the cancelled transaction was still open, the
// next caller's BEGIN failed ("cannot start a transaction within a
// transaction"). If SQLite had already ended it (an interrupted write rolls
// the whole transaction back), the next BEGIN succeeded and the late
// ROLLBACK ended that transaction instead: its statements committed one by
// one and its COMMIT failed, a write reported failed yet partly stored
// (TestInterruptedWriteLeavesTheNextWhole,
// TestCancelledTransactionsLeaveTheWriterWhole).
//
// Statements inside fn still run on the caller's context and stop when it
// ends; fn's error then rolls the transaction back in order. A context that
// has already ended begins nothing. One that ends while BEGIN waits for
// another process's write lock waits out that lock (SQLite's busy wait does
// not heed interrupts anyway) and then fails in fn. One that ends after fn
// returned nil no longer stops the COMMIT: the transaction commits, as
// pgTx does on Postgres.
func (db *DB) writerTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return InTx(context.WithoutCancel(ctx), db.writer, fn)
}
