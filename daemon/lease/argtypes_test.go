package lease

import (
	"context"
	"database/sql"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestPlaceholderColumns: each ? of a Set is typed by the column whose
// whole value (or COALESCE fallback) it is; any other ? names no column,
// so its steps are written by Move.
func TestPlaceholderColumns(t *testing.T) {
	tests := []struct {
		set  string
		want []string
	}{
		{"", nil},
		{"note = ?", []string{"note"}},
		{"t.note = ?", []string{"note"}},
		{"finished_at = ?, result_ref = ?, started_at = updated_at, worker_id = NULL", []string{"finished_at", "result_ref"}},
		{"delivered_at = ?, last_status_code = ?, last_error = NULL, worker_id = NULL, lease_expires_at = NULL", []string{"delivered_at", "last_status_code"}},
		{"next_attempt_at = ?, attempt_count = attempt_count - 1, worker_id = NULL", []string{"next_attempt_at"}},
		{"started_at = COALESCE(started_at, ?), note = ?", []string{"started_at", "note"}},
		{"started_at = coalesce( started_at ,? )", []string{"started_at"}},
		{"started_at = COALESCE(finished_at, ?)", []string{""}},
		{"n = n + ?, note = ?", []string{"", "note"}},
		{"n = GREATEST(?, ?)", []string{"", ""}},
		{"note = 'a, b = ?', n = ?", []string{"n"}},
		{"note = ? -- a comment, n = ?", []string{""}},
	}
	for _, tc := range tests {
		if got := placeholderColumns(tc.set); !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
			t.Errorf("placeholderColumns(%q) = %q, want %q", tc.set, got, tc.want)
		}
	}
}

// TestColumnTypesOfAQualifiedTable: a Spec.Table qualified by its schema
// ("main.work" on SQLite, "<schema>.work" on Postgres), which every
// statement of the queue takes, has its column types read as the bare
// name's are, on both engines: SQLite's pragma_table_info takes the schema
// as an argument of its own, not in the name.
func TestColumnTypesOfAQualifiedTable(t *testing.T) {
	const table = "-- +goose Up\n" + `CREATE TABLE work (id TEXT PRIMARY KEY, ready_at BIGINT NOT NULL DEFAULT 0, note TEXT);`
	mig := sqldb.Migrations{
		Postgres: fstest.MapFS{"00001_work.sql": {Data: []byte(table)}},
		SQLite:   fstest.MapFS{"00001_work.sql": {Data: []byte(table)}},
	}
	sqltest.Each(t, []sqldb.Migrations{mig}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		schema := "main"
		if db.Engine == sqldb.Postgres {
			if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"work", schema + ".work"} {
			t.Run(name, func(t *testing.T) {
				q := &Queue{DB: db, Spec: Spec{Table: name}}
				var types map[string]string
				err := db.Tx(ctx, func(tx *sql.Tx) error {
					var err error
					types, err = q.readColumnTypes(ctx, tx)
					return err
				})
				if err != nil {
					t.Fatalf("column types of %s: %v", name, err)
				}
				if kindOf(db.Engine, types["ready_at"]) != kindInt || kindOf(db.Engine, types["note"]) != kindText {
					t.Fatalf("column types of %s: %v", name, types)
				}
			})
		}
	})
}
