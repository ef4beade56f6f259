package sqldb_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

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
