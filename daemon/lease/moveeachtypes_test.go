package lease_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestMoveEachValuesFitTheirColumns: MoveEach's array statement (Postgres)
// types each array by the column its ? is written to, not by the Go type of
// the values, and both engines accept and refuse the same values: a value
// the column's type cannot hold (a string for an integer column, an integer
// for a text column, a time for a micros column) is refused with
// ErrArgType, naming the column, before anything is written. Typed by its
// values, a string array written to a bigint column failed on Postgres with
// the database's type error and was written on SQLite, and an integer array
// was written to a text column.
func TestMoveEachValuesFitTheirColumns(t *testing.T) {
	tests := []struct {
		name string
		set  string
		args [2][]any // the two steps' Args
		col  string   // the column read back
		want [2]any   // read back per step (as text, nil = NULL); ignored when refused
		bad  string   // the Go type of the refused value; "" = accepted
	}{
		{"integers for an integer column", "ready_at = ?", [2][]any{{int64(7)}, {8}}, "ready_at", [2]any{"7", "8"}, ""},
		{"small integers for an INTEGER column", "attempt_count = ?", [2][]any{{int32(3)}, {uint8(4)}}, "attempt_count", [2]any{"3", "4"}, ""},
		{"strings and NULL for a text column", "note = ?", [2][]any{{"a"}, {nil}}, "note", [2]any{"a", nil}, ""},
		{"NULL for an integer column", "lease_expires_at = ?", [2][]any{{nil}, {int64(5)}}, "lease_expires_at", [2]any{nil, "5"}, ""},
		{"bytes for a text column", "note = ?", [2][]any{{[]byte("b")}, {"c"}}, "note", [2]any{"b", "c"}, ""},
		{"nil bytes for a text column are NULL, as Move writes them", "note = ?", [2][]any{{[]byte(nil)}, {"c"}}, "note", [2]any{nil, "c"}, ""},
		{"valuers of the column's type", "note = ?, ready_at = ?", [2][]any{{sql.NullString{String: "v", Valid: true}, sql.NullInt64{Int64: 9, Valid: true}}, {sql.NullString{}, int64(1)}}, "note", [2]any{"v", nil}, ""},
		{"COALESCE of the column", "note = COALESCE(note, ?)", [2][]any{{"x"}, {"y"}}, "note", [2]any{"x", "y"}, ""},
		{"a ? in an expression is written by Move", "ready_at = ready_at + ?", [2][]any{{int64(5)}, {int32(6)}}, "ready_at", [2]any{"5", "6"}, ""},
		{"a ? in a quoted comma list is no placeholder", "note = 'a,?', ready_at = ?", [2][]any{{int64(1)}, {int64(2)}}, "note", [2]any{"a,?", "a,?"}, ""},
		{"a string for an integer column", "ready_at = ?", [2][]any{{int64(1)}, {"7"}}, "ready_at", [2]any{}, "string"},
		{"strings for an integer column", "ready_at = ?", [2][]any{{"7"}, {"8"}}, "ready_at", [2]any{}, "string"},
		{"an integer for a text column", "note = ?", [2][]any{{int64(7)}, {int64(8)}}, "note", [2]any{}, "int64"},
		{"a time for a micros column", "ready_at = ?", [2][]any{{time.Unix(1, 0)}, {int64(2)}}, "ready_at", [2]any{}, "time.Time"},
		{"a bool for an integer column", "ready_at = ?", [2][]any{{int64(1)}, {true}}, "ready_at", [2]any{}, "bool"},
		{"an integer in COALESCE of a text column", "note = COALESCE(note, ?)", [2][]any{{"x"}, {int64(1)}}, "note", [2]any{}, "int64"},
	}
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		q, clk, cs := setupClaimed(t, db, 2*len(tests))
		for i, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				claims := []*lease.Claim{&cs[2*i], &cs[2*i+1]}
				steps := []lease.Step{
					{Claim: claims[0], To: "busy", Set: tc.set, Args: tc.args[0]},
					{Claim: claims[1], To: "busy", Set: tc.set, Args: tc.args[1]},
				}
				var out []error
				err := db.Tx(ctx, func(tx *sql.Tx) error {
					var err error
					out, err = q.MoveEach(ctx, tx, steps, clk.now())
					return err
				})
				if tc.bad != "" {
					if !errors.Is(err, lease.ErrArgType) || !strings.Contains(err.Error(), tc.col) || !strings.Contains(err.Error(), tc.bad) {
						t.Fatalf("err = %v, want ErrArgType naming %s and %s", err, tc.col, tc.bad)
					}
					for _, c := range claims {
						var status string
						if err := db.QueryRow(db.Rebind(`SELECT status FROM work WHERE id = ?`), c.ID).Scan(&status); err != nil {
							t.Fatal(err)
						}
						if status != "taken" || c.Status != "taken" {
							t.Errorf("a refused batch moved %s: row %s, claim %s", c.ID, status, c.Status)
						}
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				for j, c := range claims {
					if out[j] != nil {
						t.Fatalf("step %d: %v", j, out[j])
					}
					var got sql.NullString
					if err := db.QueryRow(db.Rebind(`SELECT CAST(`+tc.col+` AS TEXT) FROM work WHERE id = ?`), c.ID).Scan(&got); err != nil {
						t.Fatal(err)
					}
					if fmt.Sprint(tc.want[j]) != fmt.Sprint(nullable(got)) {
						t.Errorf("step %d: %s = %v, want %v", j, tc.col, nullable(got), tc.want[j])
					}
				}
			})
		}
	})
}

func nullable(s sql.NullString) any {
	if !s.Valid {
		return nil
	}
	return s.String
}
