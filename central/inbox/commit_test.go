package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// failCommits makes every commit that inserted an outbox event fail while
// the returned switch is on: a deferred constraint checked at COMMIT, so
// every statement of the transaction succeeds and only the commit fails
// (a lost connection or a disk error at commit time looks the same to the
// store).
func failCommits(t *testing.T, db *sqldb.DB) func(on bool) {
	t.Helper()
	var ddl []string
	if db.Engine == sqldb.Postgres {
		ddl = []string{
			`CREATE TABLE commit_fault (fail BOOLEAN NOT NULL)`,
			`INSERT INTO commit_fault VALUES (false)`,
			`CREATE FUNCTION commit_fault() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF (SELECT fail FROM commit_fault) THEN RAISE EXCEPTION 'injected commit failure'; END IF; RETURN NULL; END $$`,
			`CREATE CONSTRAINT TRIGGER commit_fault AFTER INSERT ON job_outbox_events
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION commit_fault()`,
		}
	} else {
		// A deferred foreign key to a row that never exists: SQLite checks
		// it at COMMIT.
		ddl = []string{
			`CREATE TABLE commit_fault (fail INTEGER NOT NULL)`,
			`INSERT INTO commit_fault VALUES (0)`,
			`CREATE TABLE commit_fault_parent (id TEXT PRIMARY KEY)`,
			`CREATE TABLE commit_fault_child (ref TEXT REFERENCES commit_fault_parent(id) DEFERRABLE INITIALLY DEFERRED)`,
			`CREATE TRIGGER commit_fault AFTER INSERT ON job_outbox_events WHEN (SELECT fail FROM commit_fault) = 1
			BEGIN INSERT INTO commit_fault_child VALUES ('missing'); END`,
		}
	}
	for _, q := range ddl {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return func(on bool) {
		v := any(on)
		if db.Engine == sqldb.SQLite {
			v = 0
			if on {
				v = 1
			}
		}
		if _, err := db.Exec(db.Rebind(`UPDATE commit_fault SET fail = ?`), v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailedCommitKeepsClaim: a write whose commit fails leaves the job's
// in-memory claim as it was, so the executor's retry of the same write
// succeeds instead of being told its claim is stale (and abandoning the
// job). Every write path of the inbox is checked.
func TestFailedCommitKeepsClaim(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy(), inbox.WithClock(clk.Now))
		req := addRequester(t, db)
		enqueue(t, s, req, 4)
		fault := failCommits(t, db)
		jobs, err := s.Claim(ctx, "w1", 4, time.Minute)
		if err != nil || len(jobs) != 4 {
			t.Fatalf("claim: %d %v", len(jobs), err)
		}
		writes := []struct {
			name  string
			job   *inbox.Job
			write func(j *inbox.Job) error
			want  string
		}{
			{"advance", jobs[0], func(j *inbox.Job) error { return s.Advance(ctx, j, schema.StatusFetching) }, schema.StatusFetching},
			{"fail", jobs[1], func(j *inbox.Job) error {
				_, err := s.Fail(ctx, j, inbox.JobError{Class: inbox.Retryable, Code: "x", Message: "y"})
				return err
			}, schema.StatusQueued},
			{"release", jobs[2], func(j *inbox.Job) error { return s.Release(ctx, j) }, schema.StatusQueued},
			{"progress", jobs[3], func(j *inbox.Job) error { return s.Progress(ctx, j, 50) }, schema.StatusClaimed},
		}
		for _, w := range writes {
			before := w.job.Snapshot()
			fault(true)
			if err := w.write(w.job); err == nil {
				t.Fatalf("%s: commit did not fail", w.name)
			}
			if after := w.job.Snapshot(); after.Status != before.Status || after.Seq != before.Seq || after.Version != before.Version {
				t.Fatalf("%s: failed commit changed the claim: %+v -> %+v", w.name, before, after)
			}
			fault(false)
			if err := w.write(w.job); err != nil {
				t.Fatalf("%s: retry after a failed commit: %v", w.name, err)
			}
			if got := statusOf(t, s, w.job.ID); got != w.want {
				t.Fatalf("%s: status %s, want %s", w.name, got, w.want)
			}
		}
		// The batch path too.
		more, err := s.Claim(ctx, "w1", 1, time.Minute)
		if err != nil || len(more) != 1 {
			t.Fatalf("claim: %d %v", len(more), err)
		}
		fault(true)
		if _, err := s.SucceedMany(ctx, more, nil); err == nil {
			t.Fatal("SucceedMany: commit did not fail")
		}
		fault(false)
		if stale, err := s.SucceedMany(ctx, more, nil); err != nil || len(stale) != 0 {
			t.Fatalf("SucceedMany retry: stale %d, %v", len(stale), err)
		}
	})
}
