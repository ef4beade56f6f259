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
// let go. One that committed before its backend was ended stays committed,
// and a caller reading afterwards sees it. Either way the outcome is
// settled (no ErrUnsettled).
func TestSettledEndsCutOffStatement(t *testing.T) {
	cases := []struct {
		name      string
		commitsIn bool // the lock is let go (and the insert commits) before the backend is ended
		want      int
	}{
		{"lock let go after the answer", false, 0},
		{"commit before the backend is ended", true, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := sqltest.Open(t, sqldb.Postgres)
			ctx := context.Background()
			if _, err := db.ExecContext(ctx, `CREATE TABLE settle (k text PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			// The blocker's uncommitted row of the same key makes the
			// insert wait until it commits or rolls back.
			blocker, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := blocker.ExecContext(ctx, `INSERT INTO settle VALUES ('x')`); err != nil {
				t.Fatal(err)
			}
			count := func() int {
				var n int
				if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM settle`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if c.commitsIn {
				db.SetSettleHold(func() {
					_ = blocker.Rollback()
					for deadline := time.Now().Add(5 * time.Second); count() == 0; {
						if time.Now().After(deadline) {
							t.Error("the waiting insert never committed")
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
			sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			err = db.Settled(sctx, func(ctx context.Context, ex sqldb.Execer) error {
				_, err := ex.ExecContext(ctx, `INSERT INTO settle VALUES ('x') ON CONFLICT DO NOTHING`)
				return err
			})
			if err == nil || errors.Is(err, sqldb.ErrUnsettled) {
				t.Fatalf("Settled: %v; want the cut-off statement's error, settled", err)
			}
			_ = blocker.Rollback()
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
