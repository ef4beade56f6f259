package sqldb_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// An ALTER TABLE queued behind a transaction that holds the table queued
// every later statement on it (claims, heartbeats) behind itself for as
// long as that transaction lasted. A migration now gives up on a lock after
// lock_timeout, so the queue behind it drains, and tries again; when the
// table never comes free it fails saying so.
func TestMigrateGivesWayToTableLocks(t *testing.T) {
	// Ten tries: the lock is released once the first has given up, and
	// a busy machine may take a few more before the release lands.
	const timeout, tries, pause = 200 * time.Millisecond, 10, 50 * time.Millisecond
	sqldb.SetMigrateLocks(t, timeout, tries, pause)
	alter := sqldb.Migrations{Postgres: fstest.MapFS{
		"00001_hot.sql": {Data: []byte("-- +goose Up\nALTER TABLE hot ADD COLUMN x INT;\n")},
	}}
	tests := []struct {
		name    string
		release bool // after the first try; otherwise past every try
		wantErr bool
	}{
		{"released after a try", true, false},
		{"never released", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			testsvc.KeepDefaultLog(t)
			var logged bytes.Buffer
			slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			db := sqltest.Open(t, sqldb.Postgres)
			if _, err := db.ExecContext(ctx, `CREATE TABLE hot (id INT)`); err != nil {
				t.Fatal(err)
			}
			holder, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback() //nolint:errcheck
			if _, err := holder.ExecContext(ctx, `LOCK TABLE hot IN ACCESS SHARE MODE`); err != nil {
				t.Fatal(err)
			}
			if tc.release {
				releaseAfterATry(ctx, t, db, holder, timeout)
			}
			start := time.Now()
			applied, err := sqldb.Migrate(ctx, db, alter)
			took := time.Since(start)
			if tc.wantErr {
				var pe *pgconn.PgError
				if err == nil || !errors.As(err, &pe) || pe.Code != "55P03" || !strings.Contains(err.Error(), "lock_timeout") {
					t.Fatalf("after %v: %v, want a lock_timeout failure naming it", took, err)
				}
				if took > tries*(timeout+pause)+2*time.Second {
					t.Fatalf("gave up after %v", took)
				}
			} else if err != nil || len(applied) != 1 {
				t.Fatalf("after %v: applied %v, %v", took, applied, err)
			}
			if n := strings.Count(logged.String(), "trying again"); n == 0 || n > tries-1 {
				t.Fatalf("%d retries logged, want 1 to %d:\n%s", n, tries-1, logged.String())
			}
			_ = holder.Rollback()
			everyPoolConnHasNoLockTimeout(ctx, t, db)
		})
	}
}

// A migration outside a transaction (goose NO TRANSACTION) that gave up on
// a table lock may have run some of its statements: run again, they would
// run twice. It fails at once, naming the migration, and leaves the rest
// to the operator.
func TestMigrateDoesNotRepeatAMigrationOutsideATransaction(t *testing.T) {
	const timeout = 200 * time.Millisecond
	sqldb.SetMigrateLocks(t, timeout, 5, 50*time.Millisecond)
	testsvc.KeepDefaultLog(t)
	slog.SetDefault(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db := sqltest.Open(t, sqldb.Postgres)
	if _, err := db.ExecContext(ctx, `CREATE TABLE hot (id INT); CREATE TABLE ran (n INT)`); err != nil {
		t.Fatal(err)
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback() //nolint:errcheck
	if _, err := holder.ExecContext(ctx, `LOCK TABLE hot IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	// Released after the first try: a retry would then succeed, and the
	// INSERT would have run twice.
	releaseAfterATry(ctx, t, db, holder, timeout)
	outside := sqldb.Migrations{Postgres: fstest.MapFS{
		"00001_outside.sql": {Data: []byte("-- +goose NO TRANSACTION\n-- +goose Up\nINSERT INTO ran VALUES (1);\nALTER TABLE hot ADD COLUMN x INT;\n")},
	}}
	_, err = sqldb.Migrate(ctx, db, outside)
	if err == nil || !strings.Contains(err.Error(), "00001_outside.sql") || !strings.Contains(err.Error(), "outside a transaction") {
		t.Fatalf("Migrate: %v, want a failure naming the migration run outside a transaction", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM ran`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the migration's first statement ran %d times (%v), want once", n, err)
	}
}

// releaseAfterATry rolls holder back once a statement has waited for a
// lock of db's and, lock_timeout later, given up. Released at a fixed time
// instead, a slow start of Migrate met the lock free at its first try, and
// a busy machine's late release met none.
func releaseAfterATry(ctx context.Context, t *testing.T, db *sqldb.DB, holder *sql.Tx, timeout time.Duration) {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		defer holder.Rollback() //nolint:errcheck
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
			if err != nil {
				t.Error(err)
				return
			}
			if n > 0 {
				// The server ends the wait lock_timeout after it began.
				time.Sleep(timeout + 50*time.Millisecond)
				return
			}
		}
		t.Error("no statement ever waited for the held lock")
	}()
}
