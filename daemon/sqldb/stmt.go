package sqldb

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// Execer is what statements run on inside a write transaction (a *sql.Tx).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// txStmter is the part of *sql.Tx that binds a prepared statement to it.
type txStmter interface {
	StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt
}

// maxCachedStmts bounds the statement cache; queries past it run unprepared.
const maxCachedStmts = 256

// stmtCache holds the SQLite statements prepared once per DB.
type stmtCache struct {
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

// ExecTx runs query (written with ?) in tx. On SQLite the statement is
// prepared once per DB and reused by every later transaction: the driver
// otherwise parses and plans it on every execution, which for the short
// queue statements costs as much as running them. On Postgres the query is
// rebound and run on tx; pgx already caches prepared statements per
// connection. query must come from a bounded set of texts (constants, or
// built from constants); the cache keeps each one for the life of the DB.
func (db *DB) ExecTx(ctx context.Context, tx Execer, query string, args ...any) (sql.Result, error) {
	if st := db.txStmt(ctx, tx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, db.Rebind(query), args...)
}

// QueryTx is ExecTx for statements that return rows.
func (db *DB) QueryTx(ctx context.Context, tx Execer, query string, args ...any) (*sql.Rows, error) {
	if st := db.txStmt(ctx, tx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, db.Rebind(query), args...)
}

// QueryRowTx is ExecTx for statements that return one row.
func (db *DB) QueryRowTx(ctx context.Context, tx Execer, query string, args ...any) *sql.Row {
	if st := db.txStmt(ctx, tx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, db.Rebind(query), args...)
}

// txStmt returns the cached statement for query bound to tx, or nil when
// the query should run unprepared (Postgres, a foreign Execer, a full
// cache, no pool connection free within prepareWait, or a statement SQLite
// cannot prepare — running it reports why).
func (db *DB) txStmt(ctx context.Context, tx Execer, query string) *sql.Stmt {
	if db.Engine != SQLite {
		return nil
	}
	t, ok := tx.(txStmter)
	if !ok {
		return nil
	}
	st := db.stmts.get(ctx, db.DB, query)
	if st == nil {
		return nil
	}
	return t.StmtContext(ctx, st)
}

// prepareWait bounds how long a first use waits to prepare its statement.
// It waits inside a write transaction that holds SQLite's write lock (and
// every other writer of the process behind writeMu) for a pool connection,
// which long reads, or autocommit writes waiting for that very lock, may
// all hold; past it the statement runs unprepared this once.
const prepareWait = 100 * time.Millisecond

// get returns the statement for query, preparing it on first use. It is
// prepared on the pool, then by Tx.StmtContext once more on the writer
// connection, where database/sql keeps that one for every later use.
func (c *stmtCache) get(ctx context.Context, pool *sql.DB, query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.stmts[query]; st != nil {
		return st
	}
	if len(c.stmts) >= maxCachedStmts {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, prepareWait)
	defer cancel()
	st, err := pool.PrepareContext(pctx, query)
	if err != nil {
		return nil
	}
	if c.stmts == nil {
		c.stmts = make(map[string]*sql.Stmt)
	}
	c.stmts[query] = st
	return st
}

// closeStmts releases the cached statements (Close).
func (c *stmtCache) closeStmts() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for q, st := range c.stmts {
		_ = st.Close()
		delete(c.stmts, q)
	}
}
