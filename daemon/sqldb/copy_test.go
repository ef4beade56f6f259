package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestCopyFrom streams rows inside a DB.Tx transaction on Postgres, where
// a rolled-back copy leaves nothing behind; SQLite, and a Postgres
// transaction DB.Tx did not open, answer ErrNoCopy and write nothing.
func TestCopyFrom(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{set}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		rows := [][]any{{"c1", int64(1)}, {"c2", int64(2)}}
		count := func() int {
			var n int
			if err := db.QueryRow(`SELECT COUNT(*) FROM a WHERE id LIKE 'c%'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		boom := errors.New("boom")
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := db.CopyFrom(ctx, tx, "a", []string{"id", "at"}, rows); err != nil {
				return err
			}
			return boom
		})
		if db.Engine == sqldb.SQLite {
			if !errors.Is(err, sqldb.ErrNoCopy) {
				t.Fatalf("sqlite: %v, want ErrNoCopy", err)
			}
			return
		}
		if !errors.Is(err, boom) || count() != 0 {
			t.Fatalf("rolled back copy: %v, %d rows left", err, count())
		}
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			n, err := db.CopyFrom(ctx, tx, "a", []string{"id", "at"}, rows)
			if err == nil && n != 2 {
				t.Errorf("copied %d rows, want 2", n)
			}
			return err
		})
		if err != nil || count() != 2 {
			t.Fatalf("copy: %v, %d rows", err, count())
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := db.CopyFrom(ctx, tx, "a", []string{"id", "at"}, [][]any{{"c3", int64(3)}}); !errors.Is(err, sqldb.ErrNoCopy) {
			t.Fatalf("foreign tx: %v, want ErrNoCopy", err)
		}
	})
}
