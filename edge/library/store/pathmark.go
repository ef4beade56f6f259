package store

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
)

// Write-path marks let guard triggers check each UPDATE against the columns
// of the one write path it belongs to (claim, heartbeat, finish, …) rather
// than against everything any path of the table may write. Marking is off in
// production. When a test turns it on (MarkPaths) and has created
// PathMarkTable, every executor and catalog write runs in one IMMEDIATE
// transaction that first records (table, path) rows in executor_path and
// deletes them again before commit. SQLite has one writer at a time, so a
// mark is only ever visible to the transaction that wrote it; triggers read
// it with a plain SELECT.

// PathMarkTable is the name of the mark table guard triggers read.
const PathMarkTable = "executor_path"

// PathMarkDDL creates PathMarkTable (tests only; production never marks).
const PathMarkDDL = `CREATE TABLE IF NOT EXISTS executor_path (tbl TEXT NOT NULL, path TEXT NOT NULL)`

// WritePath names one write path of one table, e.g. {"jobs", "claim"}.
type WritePath struct{ Table, Path string }

// Querier is what a statement runs on: the database or a transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// marks is per Store; a pointer so Store stays copyable by value in tests.
type marks struct{ on atomic.Bool }

// MarkPaths turns write-path marking on. The database must hold
// PathMarkTable. Tests that install guard triggers call it.
func (s *Store) MarkPaths() {
	if s.marks == nil {
		s.marks = &marks{}
	}
	s.marks.on.Store(true)
}

func (s *Store) marking() bool { return s.marks != nil && s.marks.on.Load() }

// OnPath runs fn, one write of path, on the database; with marking on it
// runs in a transaction that carries the mark.
func (s *Store) OnPath(ctx context.Context, p WritePath, fn func(Querier) error) error {
	if !s.marking() {
		return fn(s.DB)
	}
	return s.TxOnPath(ctx, []WritePath{p}, func(tx *sql.Tx) error { return fn(tx) })
}

// TxOnPath runs fn in one transaction whose writes belong to paths (one per
// table it updates); with marking on, the marks are written first and
// removed before commit.
func (s *Store) TxOnPath(ctx context.Context, paths []WritePath, fn func(*sql.Tx) error) error {
	return s.Tx(ctx, func(tx *sql.Tx) error {
		if !s.marking() {
			return fn(tx)
		}
		for _, p := range paths {
			if _, err := tx.ExecContext(ctx, `INSERT INTO executor_path(tbl, path) VALUES (?, ?)`, p.Table, p.Path); err != nil {
				return fmt.Errorf("mark write path %s.%s: %w", p.Table, p.Path, err)
			}
		}
		if err := fn(tx); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM executor_path`)
		return err
	})
}
