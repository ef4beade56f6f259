package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestCachedStatements runs the same statements through ExecTx/QueryTx in
// several transactions, one rolled back and one failing, and checks each
// saw its own arguments and the rolled-back write is gone.
func TestCachedStatements(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{set}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		ins := `INSERT INTO a (id, at) VALUES (?, ?)`
		sel := `SELECT id, at FROM a WHERE at >= ? ORDER BY at`
		boom := errors.New("boom")
		tests := []struct {
			id      string
			at      int64
			fail    error
			wantErr bool
		}{
			{"x", 1, nil, false},
			{"y", 2, boom, true}, // rolled back
			{"x", 3, nil, true},  // duplicate key: the statement fails, the next use must still work
			{"z", 4, nil, false},
		}
		for _, tc := range tests {
			err := db.Tx(ctx, func(tx *sql.Tx) error {
				if _, err := db.ExecTx(ctx, tx, ins, tc.id, tc.at); err != nil {
					return err
				}
				var n int
				if err := db.QueryRowTx(ctx, tx, `SELECT COUNT(*) FROM a WHERE id = ?`, tc.id).Scan(&n); err != nil || n != 1 {
					t.Errorf("%s: count %d %v", tc.id, n, err)
				}
				return tc.fail
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("%s: %v", tc.id, err)
			}
		}
		var got []string
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			rows, err := db.QueryTx(ctx, tx, sel, 0)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id string
				var at int64
				if err := rows.Scan(&id, &at); err != nil {
					return err
				}
				got = append(got, id)
			}
			return rows.Err()
		})
		if err != nil || len(got) != 2 || got[0] != "x" || got[1] != "z" {
			t.Fatalf("rows %v, %v", got, err)
		}
	})
}

// A statement's first use inside a write transaction prepares it on the
// pool. With every pool connection taken (long reads, or autocommit writes
// waiting for the write lock this transaction holds) it waited for one while
// holding SQLite's write lock and every writer of the process behind it,
// until its context ended. It must run unprepared instead and commit.
func TestFirstUseCommitsWithThePoolTaken(t *testing.T) {
	db := sqltest.Open(t, sqldb.SQLite, set)
	ctx := context.Background()
	// The writer holds one of the pool's connections for good.
	for range db.Stats().MaxOpenConnections - 1 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := db.Conn(cctx)
		cancel()
		if err != nil {
			t.Fatalf("taking the pool: %v", err)
		}
		defer c.Close()
	}
	tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	err := db.Tx(tctx, func(tx *sql.Tx) error {
		if _, err := db.ExecTx(tctx, tx, `INSERT INTO a (id, at) VALUES (?, ?)`, "first", 1); err != nil {
			return err
		}
		var n int
		return db.QueryRowTx(tctx, tx, `SELECT COUNT(*) FROM a WHERE id = ?`, "first").Scan(&n)
	})
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the transaction took %v waiting for the pool", took)
	}
}
