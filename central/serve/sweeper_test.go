package serve_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestSweeperPrunesByTheStoresClock: retention is counted on the store's
// clock (the database's), as finished_at is written. The store's clock here
// runs two hours ahead of the process's; with a retention of one hour a job
// finished at the store's start is past it only by the store's clock, and
// must be pruned. A second job finished "now" by the store's clock must not.
func TestSweeperPrunesByTheStoresClock(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
		if err != nil {
			t.Fatal(err)
		}
		var ahead atomic.Int64
		clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
		s := inbox.New(db, keys, inbox.DefaultPolicy(), inbox.WithClock(clock))
		req, err := requesters.New(db, keys).Create(ctx, "sweep")
		if err != nil {
			t.Fatal(err)
		}
		finish := func() string {
			id := enqueue(t, s, req.RequesterID, "")
			jobs, err := s.Claim(ctx, "w", 1, time.Minute)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claim: %v (%d jobs)", err, len(jobs))
			}
			if st, err := s.Fail(ctx, jobs[0], inbox.JobError{Class: inbox.Permanent, Code: "bad_input", Message: "x"}); err != nil || st != "failed" {
				t.Fatalf("fail: %q %v", st, err)
			}
			return id
		}
		old := finish()
		ahead.Store(int64(2 * time.Hour))
		recent := finish()

		sw := &serve.Sweeper{Deps: &serve.Deps{DB: db, Inbox: s, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
			Keys: idempotency.New(db, time.Hour, s.Now), Interval: 10 * time.Millisecond, Retention: time.Hour}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- sw.Run(runCtx) }()
		defer func() { stop(); <-done }()

		pruned := func(id string) bool {
			var n int
			if err := db.QueryRow(db.Rebind(`SELECT count(*) FROM inbox_jobs WHERE id = ? AND pruned_at IS NOT NULL`), id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		deadline := time.Now().Add(5 * time.Second)
		for !pruned(old) {
			if time.Now().After(deadline) {
				t.Fatal("a job finished two hours ago by the store's clock was not pruned with a retention of one hour")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if pruned(recent) {
			t.Fatal("a job finished now by the store's clock was pruned")
		}
	})
}
