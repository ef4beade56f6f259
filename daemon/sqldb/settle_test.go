package sqldb_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// A statement cut off by its context while it waits for a lock is over on
// the server too when Settled returns: it does not commit once the lock is
// let go. One whose write committed before the cut stays committed, and a
// caller reading afterwards sees it. Either way the outcome is settled (no
// ErrUnsettled).
//
// The second case commits and then sleeps in one simple-protocol query,
// rather than letting a held lock go in the window between the cut and the
// end of the backend: pgx sends the server a cancel request of its own when
// it gives up on a connection, at a moment no test controls, and a cancel
// landing first stops a waiting insert from ever committing.
func TestSettledEndsCutOffStatement(t *testing.T) {
	cases := []struct {
		name    string
		blocked bool   // a blocker's uncommitted row of the same key holds the statement until after the answer
		stmt    string // run with no arguments, so pgx sends it with the simple protocol
		want    int
	}{
		{"lock let go after the answer", true, `INSERT INTO settle VALUES ('x') ON CONFLICT DO NOTHING`, 0},
		{"committed before the cut", false, `INSERT INTO settle VALUES ('x'); COMMIT; SELECT pg_sleep(30)`, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := sqltest.Open(t, sqldb.Postgres)
			ctx := context.Background()
			if _, err := db.ExecContext(ctx, `CREATE TABLE settle (k text PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			release := func() {}
			if c.blocked {
				blocker, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := blocker.ExecContext(ctx, `INSERT INTO settle VALUES ('x')`); err != nil {
					t.Fatal(err)
				}
				release = func() { _ = blocker.Rollback() }
				defer release()
			}
			count := func() int {
				var n int
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM settle`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			err := db.Settled(sctx, func(ctx context.Context, ex sqldb.Execer) error {
				_, err := ex.ExecContext(ctx, c.stmt)
				return err
			})
			if err == nil || errors.Is(err, sqldb.ErrUnsettled) {
				t.Fatalf("Settled: %v; want the cut-off statement's error, settled", err)
			}
			release()
			time.Sleep(300 * time.Millisecond) // time for a surviving insert to commit
			if n := count(); n != c.want {
				t.Fatalf("%d rows after the answer, want %d", n, c.want)
			}
			// The pool is still usable.
			if err := db.Settled(ctx, func(ctx context.Context, ex sqldb.Execer) error {
				_, err := ex.ExecContext(ctx, `INSERT INTO settle VALUES ('y')`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
