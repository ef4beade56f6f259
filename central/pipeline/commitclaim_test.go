package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// faultOnCommit makes every COMMIT of a transaction that updated a
// pipeline job to a row matching when (SQL on NEW) fail, until off.
func faultOnCommit(t *testing.T, db *sqldb.DB, when string) (off func()) {
	t.Helper()
	var on, drop []string
	if db.Engine == sqldb.Postgres {
		on = []string{
			`CREATE FUNCTION claim_fault() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected commit fault'; RETURN NULL; END $$`,
			`CREATE CONSTRAINT TRIGGER claim_fault AFTER UPDATE ON pipeline_jobs DEFERRABLE INITIALLY DEFERRED
				FOR EACH ROW WHEN (` + when + `) EXECUTE FUNCTION claim_fault()`,
		}
		drop = []string{`DROP TRIGGER claim_fault ON pipeline_jobs`, `DROP FUNCTION claim_fault()`}
	} else {
		on = []string{
			`CREATE TABLE claim_fault_parent (id INTEGER PRIMARY KEY)`,
			`CREATE TABLE claim_fault_child (parent INTEGER REFERENCES claim_fault_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
			`CREATE TRIGGER claim_fault AFTER UPDATE ON pipeline_jobs WHEN ` + when + ` BEGIN INSERT INTO claim_fault_child VALUES (1); END`,
		}
		drop = []string{`DROP TRIGGER claim_fault`, `DROP TABLE claim_fault_child`, `DROP TABLE claim_fault_parent`}
	}
	exec := func(qs []string) {
		for _, q := range qs {
			require.NoError(t, func() error { _, err := db.ExecContext(context.Background(), q); return err }(), q)
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

// A status write of the repo whose commit fails leaves the caller's claim
// as the row still has it, so the caller's retry of the same write
// succeeds — instead of being refused as a transition from the status that
// was never committed.
func TestFailedCommitKeepsTheRepoClaim(t *testing.T) {
	cases := []struct {
		name string
		when string
		// before moves the claim to where the write starts from.
		before func(ctx context.Context, s *Store, j *Job) error
		write  func(ctx context.Context, s *Store, j *Job) error
		status string // the status the claim keeps after the failed commit
		want   string // the status after the retried write
	}{
		{"set_succeeded", "NEW.result_ref IS NOT NULL", nil,
			func(ctx context.Context, s *Store, j *Job) error {
				return s.SetSucceeded(ctx, j, time.Now(), "s3://b/k")
			},
			StatusRunning, StatusSucceeded},
		{"set_failed", "NEW.error_code IS NOT NULL", nil,
			func(ctx context.Context, s *Store, j *Job) error {
				return s.SetFailed(ctx, j, time.Now(), Fail(CodeQualityFailed, "bad"), j.Attempt)
			},
			StatusRunning, StatusFailed},
		{"set_dead_letter", "NEW.status = 'dead_letter'",
			func(ctx context.Context, s *Store, j *Job) error {
				return s.SetFailed(ctx, j, time.Now(), Fail(CodeStorageWriteFailed, "disk full"), j.Attempt)
			},
			func(ctx context.Context, s *Store, j *Job) error {
				return s.SetDeadLetter(ctx, j, time.Now(), Fail(CodeStorageWriteFailed, "disk full"), j.Attempt)
			},
			StatusFailed, StatusDeadLetter},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				f := newFixture(t, db, nil)
				c := f.submit(t, "noop", "SYM", "2026-01-02")
				jobs, err := f.store.Claim(ctx, "w1", 1, time.Minute)
				require.NoError(t, err)
				require.Len(t, jobs, 1)
				j := jobs[0]
				if tc.before != nil {
					require.NoError(t, tc.before(ctx, f.store, j))
				}
				kept := j.Claim
				off := faultOnCommit(t, db, tc.when)
				require.Error(t, tc.write(ctx, f.store, j))
				require.Equal(t, kept, j.Claim, "the claim moved on a write that did not commit")
				require.Equal(t, tc.status, f.get(t, c.JobID).Status)
				off()
				require.NoError(t, tc.write(ctx, f.store, j), "the retried write")
				require.Equal(t, tc.want, f.get(t, c.JobID).Status)
				require.Equal(t, tc.want, j.Status)
			})
		})
	}
}
