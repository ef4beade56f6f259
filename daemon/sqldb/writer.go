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
// is one *sql.Conn used again at once: the late ROLLBACK could end the next
// transaction's BEGIN instead, leaving its statements to commit one by one,
// or leave a transaction open so that every later BEGIN failed with "cannot
// start a transaction within a transaction"
// (TestCancelledTransactionsLeaveTheWriterWhole). Statements inside fn still
// run on the caller's context and stop when it ends; fn's error then rolls
// the transaction back in order. A context that has already ended begins
// nothing; one that ends while BEGIN waits for another process's write lock
// waits out that lock (at most the busy timeout) and then fails in fn.
func (db *DB) writerTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	return InTx(context.WithoutCancel(ctx), db.writer, fn)
}
