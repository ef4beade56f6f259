package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A failure is counted and logged once, and only when the transaction that
// recorded it committed: not when its commit failed (nothing was written),
// and once when DB.Tx ran the transaction again after a serialization
// failure. Every way a failure is recorded is checked: a worker's Fail, and
// an expired lease found by a claim or by a reclaim.
func TestFailureReportedOnceCommitted(t *testing.T) {
	const (
		byFail    = "fail"
		byClaim   = "claim"
		byReclaim = "reclaim"
	)
	cases := []struct {
		name    string
		by      string
		retried bool // the first commit is a serialization failure DB.Tx retries; otherwise commits fail until the fault is removed
	}{
		{"fail, commit fails", byFail, false},
		{"fail, commit retried", byFail, true},
		{"expired lease claimed, commit fails", byClaim, false},
		{"expired lease claimed, commit retried", byClaim, true},
		{"expired lease reclaimed, commit fails", byReclaim, false},
		{"expired lease reclaimed, commit retried", byReclaim, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				if c.retried && db.Engine != sqldb.Postgres {
					t.Skip("DB.Tx retries serialization failures on Postgres only")
				}
				ctx := context.Background()
				clk := newClock(time.Now())
				f := newFixture(t, db, clk.Now)
				f.store.Metrics = NewMetrics(prometheus.NewRegistry(), f.store)
				created := f.submit(t, "noop", "AAPL", "2026-03-01")
				jobs, err := f.store.Claim(ctx, "w1", 1, 30*time.Second)
				if err != nil || len(jobs) != 1 {
					t.Fatalf("claim: %v %d", err, len(jobs))
				}
				code := CodeStorageWriteFailed
				if c.by != byFail {
					code = CodeVisibilityTimeout
					clk.Add(31 * time.Second)
				}
				record := func() error {
					switch c.by {
					case byClaim:
						_, err := f.store.Claim(ctx, "w2", 1, 30*time.Second)
						return err
					case byReclaim:
						n, err := f.store.Reclaim(ctx, 10)
						if err == nil && n != 1 {
							err = fmt.Errorf("reclaimed %d", n)
						}
						return err
					}
					_, err := f.store.Fail(ctx, jobs[0], Fail(code, "disk full"))
					return err
				}
				reported := func() (float64, int) {
					return counterValue(t, f.store.Metrics.Failures.WithLabelValues("noop", code)),
						strings.Count(f.logs.String(), `"msg":"pipeline job failed`)
				}

				off := commitFault(t, db, c.retried)
				if !c.retried {
					if err := record(); err == nil {
						t.Fatal("the commit did not fail")
					}
					if n, lines := reported(); n != 0 || lines != 0 {
						t.Fatalf("a failure whose commit failed: counted %v, logged %d times", n, lines)
					}
					if r := f.get(t, created.JobID); r.Status != StatusRunning || r.LastError != nil {
						t.Fatalf("the failed commit wrote: %s %+v", r.Status, r.LastError)
					}
					off()
				}
				if err := record(); err != nil {
					t.Fatal(err)
				}
				if n, lines := reported(); n != 1 || lines != 1 {
					t.Fatalf("counted %v, logged %d times; want once\n%s", n, lines, f.logs.String())
				}
				if r := f.get(t, created.JobID); r.LastError == nil || r.LastError.ErrorCode != code {
					t.Fatalf("not recorded: %s %+v", r.Status, r.LastError)
				}
			})
		})
	}
}

// commitFault makes the commit of a transaction that records a job failure
// fail: with a serialization failure the first time only when once is set
// (Postgres), otherwise with a constraint error every time until off. The
// fault is a deferred constraint, checked at COMMIT after every statement
// of the transaction succeeded.
func commitFault(t *testing.T, db *sqldb.DB, once bool) (off func()) {
	t.Helper()
	var on, drop []string
	if db.Engine == sqldb.Postgres {
		raise := `RAISE EXCEPTION 'injected commit fault'`
		if once {
			raise = `IF nextval('commit_fault_seq') = 1 THEN RAISE EXCEPTION 'injected commit fault' USING ERRCODE = '40001'; END IF`
		}
		on = []string{
			`CREATE SEQUENCE commit_fault_seq`,
			`CREATE FUNCTION commit_fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ` + raise + `; RETURN NULL; END $$`,
			`CREATE CONSTRAINT TRIGGER commit_fault AFTER UPDATE ON pipeline_jobs DEFERRABLE INITIALLY DEFERRED
				FOR EACH ROW WHEN (NEW.error_code IS NOT NULL) EXECUTE FUNCTION commit_fault()`,
		}
		drop = []string{`DROP TRIGGER commit_fault ON pipeline_jobs`, `DROP FUNCTION commit_fault()`, `DROP SEQUENCE commit_fault_seq`}
	} else {
		// A row that breaks a deferred foreign key: SQLite refuses the COMMIT.
		on = []string{
			`CREATE TABLE commit_fault_parent (id INTEGER PRIMARY KEY)`,
			`CREATE TABLE commit_fault_child (parent INTEGER REFERENCES commit_fault_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
			`CREATE TRIGGER commit_fault AFTER UPDATE ON pipeline_jobs WHEN NEW.error_code IS NOT NULL
				BEGIN INSERT INTO commit_fault_child VALUES (1); END`,
		}
		drop = []string{`DROP TRIGGER commit_fault`, `DROP TABLE commit_fault_child`, `DROP TABLE commit_fault_parent`}
	}
	exec := func(qs []string) {
		for _, q := range qs {
			if _, err := db.ExecContext(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec(on)
	done := false
	off = func() {
		if !done {
			done = true
			exec(drop)
		}
	}
	t.Cleanup(off)
	return off
}

// The lease queue used directly would recover expired leases with nothing
// to report their failures: it refuses, and the job stays as it was.
func TestLeaseQueueLeavesExpiredLeasesToTheStore(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Now())
		f := newFixture(t, db, clk.Now)
		created := f.submit(t, "noop", "AAPL", "2026-03-01")
		if jobs, err := f.store.Claim(ctx, "w1", 1, 30*time.Second); err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %d", err, len(jobs))
		}
		clk.Add(31 * time.Second)
		if _, err := f.store.LeaseQueue().Claim(ctx, "w2", 1, 30*time.Second); !errors.Is(err, errNoLostLeases) {
			t.Fatalf("lease queue claim: %v", err)
		}
		if r := f.get(t, created.JobID); r.Status != StatusRunning || r.LastError != nil {
			t.Fatalf("recovered without the store: %s %+v", r.Status, r.LastError)
		}
		if n, err := f.store.Reclaim(ctx, 10); err != nil || n != 1 {
			t.Fatalf("reclaim: %d %v", n, err)
		}
	})
}
