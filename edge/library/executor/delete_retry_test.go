package executor_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

var dueNow = lease.Backoff{Base: time.Millisecond, Cap: time.Millisecond}

// requeue runs the policy's retry pass until the job is pending again
// (the first pass gives a retryable row its retry time, a later one moves
// it once that time has come).
func requeue(t *testing.T, e *env, id int64) store.Job {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := e.p.RequeueRetryable(context.Background(), dueNow); err != nil {
			t.Fatal(err)
		}
		j, err := e.st.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Status != store.StatusRetryable || time.Now().After(deadline) {
			return j
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A delete killed while a file sat under its staging name, again and
// again until its retries were spent, is not given up: a run of the job is
// what puts such a file back or finishes it, and without one the file
// would stay hidden under a name the scan skips.
func TestDeleteStagedRecoveredAfterRetriesExhausted(t *testing.T) {
	e := newEnv(t, false) // the policy's retry pass writes too
	kept, del, fk, fd := dupPair(t, e)
	keptIno := inode(t, kept)
	crossDevice(e.x)
	j := requestPair(t, e, fk, fd, false)
	staged := stagedPath(del, j.ID, fd.ID)
	if err := os.Rename(del, staged); err != nil {
		t.Fatal(err)
	}
	// The last of its crashes: recovered as retryable with every retry spent.
	if _, err := e.st.DB.Exec(`UPDATE jobs SET status = 'retryable', retry_count = 3, retry_after = NULL,
		error_code = 'lease_expired', error_message = 'recovered' WHERE id = ?`, j.ID); err != nil {
		t.Fatal(err)
	}
	if got := requeue(t, e, j.ID); got.Status != store.StatusPending {
		t.Fatalf("a delete with its retries spent is %s, not run again", got.Status)
	}
	if got := e.runJob(); got.ID != j.ID || got.Status != store.StatusCompleted {
		t.Fatalf("re-run: job %d %s", got.ID, got.Status)
	}
	if d := decisions(t, e, j.ID)[fd.ID]; d.Decision != executor.DecisionTrashed {
		t.Fatalf("decision %+v", d)
	}
	if _, err := os.Lstat(staged); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staged name left behind: %v", err)
	}
	keptIntact(t, kept, keptIno, true)
}

// A delete stopped by an error of its own (here a decision the database
// refuses to record) is retryable, not failed: it runs again and ends
// with every file recorded.
func TestDeleteStoppedByAnErrorRunsAgain(t *testing.T) {
	e := newEnv(t, false) // the policy's retry pass writes too
	kept, del, fk, fd := dupPair(t, e)
	keptIno := inode(t, kept)
	j := requestPair(t, e, fk, fd, false)
	if _, err := e.st.DB.Exec(`CREATE TRIGGER refuse_trashed BEFORE INSERT ON delete_decisions
		WHEN NEW.decision = 'trashed' BEGIN SELECT RAISE(ABORT, 'decision not recorded'); END`); err != nil {
		t.Fatal(err)
	}
	if got := e.runJob(); got.ID != j.ID || got.Status != store.StatusRetryable {
		t.Fatalf("a delete stopped by an error is %s", got.Status)
	}
	if _, err := e.st.DB.Exec(`DROP TRIGGER refuse_trashed`); err != nil {
		t.Fatal(err)
	}
	if got := requeue(t, e, j.ID); got.Status != store.StatusPending {
		t.Fatalf("not requeued: %s", got.Status)
	}
	if got := e.runJob(); got.ID != j.ID || got.Status != store.StatusCompleted {
		t.Fatalf("re-run: job %d %s", got.ID, got.Status)
	}
	d := decisions(t, e, j.ID)[fd.ID]
	if d.Decision != executor.DecisionTrashed || d.TrashPath == nil {
		t.Fatalf("decision %+v", d)
	}
	if _, err := os.Stat(*d.TrashPath); err != nil {
		t.Fatalf("the trashed file is not where its decision says: %v", err)
	}
	if _, err := os.Lstat(del); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the duplicate is still at its path: %v", err)
	}
	keptIntact(t, kept, keptIno, true)
}
