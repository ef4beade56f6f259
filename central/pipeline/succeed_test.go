package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestWorkerSuccessRecordsAttempt: a success written by the worker's
// batched finisher closes the attempt as SetSucceeded does: started_at from
// the claim, finished_at, the result reference, the lease released.
func TestWorkerSuccessRecordsAttempt(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		var ids []string
		for _, asof := range []string{"2026-01-02", "2026-01-05", "2026-01-06"} {
			ids = append(ids, f.submit(t, "noop", "AAPL", asof).JobID)
		}
		f.runUntil(t, time.Minute, "all succeeded", func() bool {
			for _, id := range ids {
				if f.get(t, id).Status != StatusSucceeded {
					return false
				}
			}
			return true
		})
		for _, id := range ids {
			r := f.get(t, id)
			if r.StartedAt == nil || r.FinishedAt == nil || r.StartedAt.After(*r.FinishedAt) || r.ResultRef != "noop" || r.Attempts != 1 {
				t.Fatalf("record %+v", r)
			}
			var worker *string
			if err := db.QueryRowContext(context.Background(), db.Rebind("SELECT worker_id FROM pipeline_jobs WHERE job_id = ?"), id).Scan(&worker); err != nil || worker != nil {
				t.Fatalf("lease not released: %v %v", worker, err)
			}
		}
	})
}

// TestSucceedManyFencing: in one batch of mixed result references a job
// whose claim went stale (reclaimed by another worker) is reported stale
// and left alone; the others are written.
func TestSucceedManyFencing(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		for _, asof := range []string{"2026-01-02", "2026-01-05", "2026-01-06", "2026-01-07"} {
			f.submit(t, "noop", "AAPL", asof)
		}
		jobs, err := f.store.Claim(ctx, "w1", 4, time.Minute)
		if err != nil || len(jobs) != 4 {
			t.Fatalf("claim: %v %d", err, len(jobs))
		}
		// Another holder fences out jobs[1]: its claim version moves on.
		if _, err := db.ExecContext(ctx, db.Rebind("UPDATE pipeline_jobs SET claim_version = claim_version + 1 WHERE job_id = ?"), jobs[1].ID); err != nil {
			t.Fatal(err)
		}
		refs := []string{"a", "a", "", "b"}
		errs := f.store.SucceedMany(ctx, jobs, refs)
		for i, err := range errs {
			if (i == 1) != errors.Is(err, lease.ErrStale) || (i != 1 && err != nil) {
				t.Fatalf("job %d: %v", i, err)
			}
		}
		for i, j := range jobs {
			r := f.get(t, j.ID)
			switch {
			case i == 1 && r.Status != StatusRunning:
				t.Fatalf("stale job written: %+v", r)
			case i != 1 && (r.Status != StatusSucceeded || r.ResultRef != refs[i] || r.StartedAt == nil || j.Status != StatusSucceeded):
				t.Fatalf("job %d: %+v", i, r)
			}
		}
		if jobs[1].Status != StatusRunning {
			t.Fatalf("stale claim changed in memory: %s", jobs[1].Status)
		}
	})
}
