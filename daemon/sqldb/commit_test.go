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

// TestContextEndingDuringCommitLeavesNoDoubt: a context that ends while a
// Postgres COMMIT is on its way must not make Tx report a failure for a
// transaction the server then commits. pgx gives up on the connection and
// sends the server a cancel request, but a cancel that comes too late (the
// commit past the point where it can be stopped, or the request lost on
// the network) stops nothing; the trigger here plays that by outlasting
// the cancel. As on SQLite, a transaction whose body returned nil commits
// whatever its context does afterwards, and Tx's answer says it did; a
// context that ended before the body returned still rolls it back.
func TestContextEndingDuringCommitLeavesNoDoubt(t *testing.T) {
	ctx := context.Background()
	db := sqltest.Open(t, sqldb.Postgres)
	for _, q := range []string{
		`CREATE TABLE slow (id TEXT PRIMARY KEY)`,
		// A deferred constraint trigger runs inside COMMIT: this one makes
		// every COMMIT that inserted into slow take 400 ms, cancelled or not.
		`CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN
		   BEGIN PERFORM pg_sleep(0.4); EXCEPTION WHEN query_canceled THEN PERFORM pg_sleep(0.4); END;
		   RETURN NULL;
		 END $$`,
		`CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	count := func(id string) int {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM slow WHERE id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := db.Tx(cctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(cctx, `INSERT INTO slow (id) VALUES ('during')`); err != nil {
			return err
		}
		time.AfterFunc(100*time.Millisecond, cancel) // during the COMMIT
		return nil
	})
	time.Sleep(time.Second) // whatever the server was doing, it is over
	if n := count("during"); err != nil || n != 1 {
		t.Fatalf("context ended during COMMIT: Tx answered %v, and %d rows were committed; want nil and 1", err, n)
	}

	cctx, cancel = context.WithCancel(ctx)
	err = db.Tx(cctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(cctx, `INSERT INTO slow (id) VALUES ('before')`); err != nil {
			return err
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	if n := count("before"); !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("context ended before the body returned: Tx answered %v, and %d rows were committed; want context.Canceled and 0", err, n)
	}
}
