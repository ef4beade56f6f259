package sqldb_test

import (
	"context"
	"database/sql"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3/lock"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// cancelAfterLock takes goose's advisory lock and then ends the context
// Migrate runs on, leaving the session as a SET lock_timeout leaves it
// when it reaches the server just as its context ends: the timeout in
// effect, and the caller told the SET failed.
type cancelAfterLock struct {
	lock.SessionLocker
	cancel context.CancelFunc
}

func (c cancelAfterLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if err := c.SessionLocker.SessionLock(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "SET lock_timeout = 4321"); err != nil {
		return err
	}
	c.cancel()
	return nil
}

// waitLockFree fails unless, within a few seconds (a closed connection's
// backend ends shortly after), no session holds an advisory lock in db's
// database, which is the test's own: goose's lock is the only one taken
// there. (Taking the lock to see is no test: a session that holds an
// advisory lock gets it again.)
func waitLockFree(ctx context.Context, t *testing.T, db *sqldb.DB) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d advisory locks still held (goose's migration lock)", n)
		}
	}
}

// everyPoolConnHasNoLockTimeout takes all of the pool's connections at
// once (idle ones wait in pgx's pool, database/sql keeps none) and fails
// if any of them still has a lock_timeout.
func everyPoolConnHasNoLockTimeout(ctx context.Context, t *testing.T, db *sqldb.DB) {
	t.Helper()
	for range 16 { // openPostgres's pool size
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var v string
		if err := c.QueryRowContext(ctx, `SHOW lock_timeout`).Scan(&v); err != nil || v != "0" {
			t.Fatalf("a pool connection has lock_timeout %q (%v)", v, err)
		}
	}
}

// Migrate's session holds goose's advisory lock and a lock_timeout. When
// Migrate fails part-way — its context ending just after the lock was
// taken, or during a migration — neither may outlive it: a lock left on a
// pooled connection makes every later migration (of any pod) wait for a
// lock nobody releases, and a timeout left there runs the queues'
// statements under it. pgx reports a statement not sent because its
// context had ended as a bad connection, and database/sql then hands the
// connection back to the pool without closing it; on db's own pool the
// first case left both behind. (In the second pgx cancels the statement
// and closes the connection itself: that case guards the retry and the
// handle's closing.)
func TestMigrateLeavesNoSessionStateBehind(t *testing.T) {
	slow := sqldb.Migrations{Postgres: fstest.MapFS{
		"00001_slow.sql": {Data: []byte("-- +goose Up\nSELECT pg_sleep(30);\n")},
	}}
	quick := sqldb.Migrations{Postgres: fstest.MapFS{
		"00002_quick.sql": {Data: []byte("-- +goose Up\nCREATE TABLE quick (id INT);\n")},
	}}
	tests := []struct {
		name string
		// start makes Migrate's context end at the moment the case
		// names, given its cancel function.
		start func(t *testing.T, cancel context.CancelFunc)
		set   sqldb.Migrations
	}{
		{"context ends after the lock is taken", func(t *testing.T, cancel context.CancelFunc) {
			sqldb.WrapMigrateLocker(t, func(l lock.SessionLocker) lock.SessionLocker { return cancelAfterLock{l, cancel} })
		}, quick},
		{"context ends during a migration", func(t *testing.T, cancel context.CancelFunc) {
			time.AfterFunc(300*time.Millisecond, cancel)
		}, slow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, stop := context.WithTimeout(context.Background(), 20*time.Second)
			defer stop()
			db := sqltest.Open(t, sqldb.Postgres)
			mctx, cancel := context.WithCancel(ctx)
			defer cancel()
			tc.start(t, cancel)
			if applied, err := sqldb.Migrate(mctx, db, tc.set); err == nil {
				t.Fatalf("Migrate on a context that ended: applied %v, no error", applied)
			}
			waitLockFree(ctx, t, db)
			everyPoolConnHasNoLockTimeout(ctx, t, db)
			sqldb.WrapMigrateLocker(t, nil)
			if applied, err := sqldb.Migrate(ctx, db, quick); err != nil || len(applied) != 1 {
				t.Fatalf("the next Migrate: applied %v, %v", applied, err)
			}
		})
	}
}
