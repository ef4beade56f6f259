package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// ErrNoCopy is CopyFrom's answer when tx cannot stream rows: SQLite, or a
// transaction that DB.Tx did not open. The caller inserts another way.
var ErrNoCopy = errors.New("sqldb: COPY needs a Postgres transaction opened by DB.Tx")

// CopyFrom streams rows into table's columns with COPY FROM STDIN (binary)
// inside tx, a transaction of DB.Tx on Postgres, and returns the number of
// rows written. COPY inserts a batch at a fraction of the cost of
// INSERT … SELECT FROM unnest(…): Postgres fills heap pages with many rows
// per WAL record, and the rows need no array parameters on either side.
// Values are what pgx encodes for the column types (strings, int64, nil for
// NULL). Any other tx, and SQLite, get ErrNoCopy with nothing written.
func (db *DB) CopyFrom(ctx context.Context, tx Execer, table string, columns []string, rows [][]any) (int64, error) {
	t, ok := tx.(*sql.Tx)
	if !ok || db.Engine != Postgres {
		return 0, ErrNoCopy
	}
	v, ok := db.txConns.Load(t)
	if !ok {
		return 0, ErrNoCopy
	}
	var n int64
	err := v.(*sql.Conn).Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return ErrNoCopy
		}
		var err error
		n, err = c.Conn().CopyFrom(ctx, pgx.Identifier{table}, columns, pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("copy into %s: %w", table, err)
	}
	return n, nil
}
