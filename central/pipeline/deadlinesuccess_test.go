package pipeline

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A success handed to the finisher is written fenced on the claim, even
// when the lease deadline passes while it waits (the database stalled the
// heartbeats and the write alike): the job is then succeeded, and the
// worker says so — not "lease lost" for a run whose success it recorded.
func TestSuccessAtTheLeaseDeadlineIsLoggedAsSuccess(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		c := f.submit(t, "noop", "AAPL", "2026-01-02")
		const vis = 600 * time.Millisecond
		jobs, err := f.store.Claim(ctx, "w1", 1, vis)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %d", err, len(jobs))
		}
		// Another connection locks the row (Postgres) or the database
		// (SQLite): the heartbeat and the success write both wait.
		h, err := sqldb.Open(ctx, dbURL(t, db), "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		conn, err := h.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		lock, unlock := "BEGIN IMMEDIATE", "COMMIT"
		if db.Engine == sqldb.Postgres {
			lock = "BEGIN"
		}
		if _, err := conn.ExecContext(ctx, lock); err != nil {
			t.Fatal(err)
		}
		if db.Engine == sqldb.Postgres {
			if _, err := conn.ExecContext(ctx, "SELECT 1 FROM pipeline_jobs WHERE job_id = $1 FOR UPDATE", c.JobID); err != nil {
				t.Fatal(err)
			}
		}
		released := false
		release := func() {
			if !released {
				released = true
				if _, err := conn.ExecContext(ctx, unlock); err != nil && err != sql.ErrTxDone {
					t.Error(err)
				}
			}
		}
		defer release()

		w := NewWorker(f.store, f.types, WorkerConfig{ID: "w1", Visibility: vis, Concurrency: 1, Poll: time.Second})
		finCtx, stopFin := context.WithCancel(ctx)
		finDone := make(chan struct{})
		go func() { defer close(finDone); w.finisher(finCtx) }()
		defer func() { stopFin(); <-finDone }()
		ran := make(chan struct{})
		go func() { defer close(ran); w.RunJob(ctx, jobs[0]) }()

		time.Sleep(vis + 400*time.Millisecond) // past the lease deadline
		release()
		select {
		case <-ran:
		case <-time.After(20 * time.Second):
			t.Fatal("RunJob did not return")
		}
		waitFor(t, 20*time.Second, "the success written", func() bool { return f.get(t, c.JobID).Status == StatusSucceeded })
		logs := f.logs.String()
		if !strings.Contains(logs, `"msg":"pipeline job succeeded"`) || strings.Contains(logs, "lease lost") {
			t.Fatalf("the job succeeded; logs:\n%s", logs)
		}
	})
}
