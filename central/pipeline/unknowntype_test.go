package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Pods need not know the same job types (a rolling deploy adds one, or
// EUTERPE_PIPELINE_TYPES differs): a job its submitting pod accepted, claimed
// by a pod that does not know its type, is not the message's fault. It goes
// back to the queue (a retryable failure) for a pod that knows the type,
// instead of failing for good as an invalid message.
func TestUnknownTypeOnThisPodIsRetried(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		newPod := newFixture(t, db, nil)
		newPod.register(t, "newtype", stage("storage", "s3://bucket/new", nil, nil))
		oldPod := newFixture(t, db, nil) // knows only noop

		c := newPod.submit(t, "newtype", "AAPL", "2026-01-02")
		makeDue(t, db, c.JobID)
		jobs, err := oldPod.store.Claim(ctx, "old", 1, 30*time.Second)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %d %v", len(jobs), err)
		}
		NewWorker(oldPod.store, oldPod.types, WorkerConfig{ID: "old", Visibility: 30 * time.Second, Concurrency: 1}).RunJob(ctx, jobs[0])
		r := newPod.get(t, c.JobID)
		if r.Status != StatusQueued || r.LastError == nil || r.LastError.ErrorCode != CodeStageUnavailable || r.LastError.Attempt != 1 {
			t.Fatalf("after the old pod: %s %+v; want queued again after %s", r.Status, r.LastError, CodeStageUnavailable)
		}
		newPod.runUntil(t, 30*time.Second, "the new pod to run the job", func() bool {
			return newPod.get(t, c.JobID).Status == StatusSucceeded
		})
		if r := newPod.get(t, c.JobID); r.ResultRef != "s3://bucket/new" || r.Attempts != 2 {
			t.Fatalf("%+v", r)
		}
	})
}

// A pod whose claims are restricted to the types it runs (as the pipeline
// role restricts them) leaves another type's job for a pod that runs it:
// however often the old pod polls, the job spends no attempt there, so a
// rolling deploy cannot dead-letter it.
func TestClaimOnlyTheTypesThisPodRuns(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		newPod := newFixture(t, db, nil)
		newPod.register(t, "newtype", stage("storage", "s3://bucket/new", nil, nil))
		if err := newPod.store.ClaimOnly(newPod.types.Names()); err != nil {
			t.Fatal(err)
		}
		oldPod := newFixture(t, db, nil)
		if err := oldPod.store.ClaimOnly(oldPod.types.Names()); err != nil {
			t.Fatal(err)
		}
		c := newPod.submit(t, "newtype", "AAPL", "2026-01-02")
		makeDue(t, db, c.JobID) // due by the old pod's clock too
		for i := 0; i < 10; i++ {
			if jobs, err := oldPod.store.Claim(ctx, "old", 5, 30*time.Second); err != nil || len(jobs) != 0 {
				t.Fatalf("the old pod claimed %d jobs (%v): it does not run newtype", len(jobs), err)
			}
		}
		if r := newPod.get(t, c.JobID); r.Status != StatusQueued || r.Attempts != 0 {
			t.Fatalf("after the old pod's polls: %s, %d attempts", r.Status, r.Attempts)
		}
		noop := oldPod.submit(t, "noop", "MSFT", "2026-01-02")
		jobs, err := oldPod.store.Claim(ctx, "old", 5, 30*time.Second)
		if err != nil || len(jobs) != 1 || jobs[0].Msg.JobID != noop.JobID {
			t.Fatalf("the old pod's claim of its own type: %d jobs, %v", len(jobs), err)
		}
		jobs, err = newPod.store.Claim(ctx, "new", 5, 30*time.Second)
		if err != nil || len(jobs) != 1 || jobs[0].Msg.JobID != c.JobID || jobs[0].Attempt != 1 {
			t.Fatalf("the new pod's claim: %+v, %v", jobs, err)
		}
	})
}

func TestClaimOnlyRefusesAnInvalidName(t *testing.T) {
	f := newFixture(t, nil, nil)
	for _, name := range []string{"x'); DROP TABLE pipeline_jobs; --", "", "Upper"} {
		if err := f.store.ClaimOnly([]string{"noop", name}); err == nil {
			t.Errorf("ClaimOnly accepted %q", name)
		}
	}
}
