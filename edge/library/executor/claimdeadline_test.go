package executor_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// slowClaimDelay is how long a claim statement takes once slowClaims has
// installed its trigger: longer than the lease the tests below claim.
const slowClaimDelay = 700 * time.Millisecond

func init() {
	sqlite.MustRegisterScalarFunction("euterpe_test_sleep_ms", 1, func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
		ms, _ := args[0].(int64)
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return nil, nil
	})
}

// slowClaims makes every claim of table (pending to running) take
// slowClaimDelay inside its statement, after the claim stamped its lease:
// what a claim waiting behind another writer for SQLite's lock looks like.
func slowClaims(t *testing.T, st *store.Store, table string) {
	t.Helper()
	q := fmt.Sprintf(`CREATE TRIGGER slow_claim_%[1]s AFTER UPDATE OF status ON %[1]s
		WHEN OLD.status = 'pending' AND NEW.status = 'running'
		BEGIN SELECT euterpe_test_sleep_ms(%[2]d); END`, table, slowClaimDelay.Milliseconds())
	if _, err := st.DB.Exec(q); err != nil {
		t.Fatal(err)
	}
}

// TestClaimOutlastingItsLeaseRunsNoWork: the lease a claim writes runs from
// the time it stamped, before its statement waited. When the statement
// returns after the lease is over, another executor may already have
// recovered the row, so the work must not start; counting a whole TTL from
// when the work begins would run it unfenced.
func TestClaimOutlastingItsLeaseRunsNoWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		table   string
		enqueue func(*env) error
		run     func(*env, context.Context) (bool, error)
	}{
		{"scan job", "jobs",
			func(e *env) error { _, err := e.p.EnqueueScan(context.Background()); return err },
			func(e *env, ctx context.Context) (bool, error) { return e.x.RunJobOnce(ctx) }},
		{"wal maintenance", "wal_maintenance_jobs",
			func(e *env) error { _, err := e.p.EnqueueWAL(context.Background(), store.ModePassive); return err },
			func(e *env, ctx context.Context) (bool, error) { return e.x.RunWALOnce(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, false)
			e.write("a.txt", "a")
			e.x.LeaseTTL = 400 * time.Millisecond
			if err := tc.enqueue(e); err != nil {
				t.Fatal(err)
			}
			slowClaims(t, e.st, tc.table)
			did, err := tc.run(e, context.Background())
			if !did || err != nil {
				t.Fatalf("did=%v err=%v", did, err)
			}
			var status string
			if err := e.st.DB.QueryRow(`SELECT status FROM ` + tc.table).Scan(&status); err != nil {
				t.Fatal(err)
			}
			if status != store.StatusRunning {
				t.Fatalf("status %q: the work ran after its lease had ended", status)
			}
			if tc.table == "jobs" {
				var files int
				_ = e.st.DB.QueryRow(`SELECT count(*) FROM files`).Scan(&files)
				if files != 0 {
					t.Fatalf("the scan catalogued %d files after its lease had ended", files)
				}
			}
		})
	}
}
