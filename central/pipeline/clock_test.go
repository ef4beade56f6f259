package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A pod whose clock runs ahead of the database's still writes the times a
// claim compares (visible_at of a submit, a retry and a redrive) by the
// database's clock: its jobs are claimable at once, not δ later. The times
// it stamps (created_at, updated_at, finished_at) are the database's too.
func TestSkewedPodClockClaimsAtOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Now().Add(2 * time.Minute)) // this pod runs 2 minutes ahead
		f := newFixture(t, db, clk.Now)
		f.store.MaxAttempts = 2

		// near checks a stored time against the database's clock.
		near := func(what string, at *time.Time) {
			t.Helper()
			dbNow, err := db.Clock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if at == nil || at.Sub(dbNow) > 5*time.Second || dbNow.Sub(*at) > 30*time.Second {
				t.Fatalf("%s %v, database clock %v", what, at, dbNow)
			}
		}
		claim := func(what string) *Job {
			t.Helper()
			jobs, err := f.store.Claim(ctx, "w1", 1, 30*time.Second)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("%s: claimed %d jobs (%v), want the job at once", what, len(jobs), err)
			}
			return jobs[0]
		}

		// Submit.
		c := f.submit(t, "noop", "AAPL", "2026-01-02")
		r := f.get(t, c.JobID)
		near("submit: visible_at", r.VisibleAt)
		near("submit: created_at", &r.CreatedAt)
		near("submit: updated_at", &r.UpdatedAt)
		j := claim("submit")

		// Retry (backoff 1 ms).
		if out, err := f.store.Fail(ctx, j, Fail(CodeStorageWriteFailed, "disk")); err != nil || out != OutcomeRetry {
			t.Fatalf("fail: %s %v", out, err)
		}
		r = f.get(t, c.JobID)
		near("retry: visible_at", r.VisibleAt)
		near("retry: updated_at", &r.UpdatedAt)
		clk.Add(5 * time.Millisecond) // the backoff (the fake clock stands still otherwise)
		j = claim("retry")

		// Dead letter at max_attempts, then redrive.
		if out, err := f.store.Fail(ctx, j, Fail(CodeStorageWriteFailed, "disk")); err != nil || out != OutcomeDeadLetter {
			t.Fatalf("fail: %s %v", out, err)
		}
		r = f.get(t, c.JobID)
		near("dead letter: finished_at", r.FinishedAt)
		if r.StartedAt == nil || r.StartedAt.After(*r.FinishedAt) || r.CreatedAt.After(*r.StartedAt) {
			t.Fatalf("created %v started %v finished %v", r.CreatedAt, r.StartedAt, r.FinishedAt)
		}
		if _, err := f.store.Redrive(ctx, c.JobID); err != nil {
			t.Fatal(err)
		}
		r = f.get(t, c.JobID)
		near("redrive: visible_at", r.VisibleAt)
		j = claim("redrive")

		// Success.
		if errs := f.store.SucceedMany(ctx, []*Job{j}, []string{"s3://bucket/key"}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		r = f.get(t, c.JobID)
		near("success: finished_at", r.FinishedAt)

		// CreateQueued then Enqueue.
		m := f.store.Message(Request{JobType: "noop", Symbol: "MSFT", Asof: "2026-01-02", RequestedBy: "test"})
		if _, err := f.store.CreateQueued(ctx, m); err != nil {
			t.Fatal(err)
		}
		res, err := f.store.Enqueue(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		near("enqueue: visible_at", &res.VisibleAt)
		claim("enqueue")
	})
}

// The store's time is the database's: a fake clock (tests) is corrected to
// it once and moves it as it moves.
func TestStoreTimeIsTheDatabases(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		fake := time.Date(2026, 3, 10, 1, 0, 0, 0, time.UTC)
		clk := newClock(fake)
		f := newFixture(t, db, clk.Now)
		dbNow, err := db.Clock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if d := f.store.Now().Sub(dbNow); d < -5*time.Second || d > 5*time.Second {
			t.Fatalf("store time %v, database clock %v", f.store.Now(), dbNow)
		}
		before := f.store.Now()
		clk.Add(time.Hour)
		if d := f.store.Now().Sub(before); d != time.Hour {
			t.Fatalf("moved %v", d)
		}
	})
}
