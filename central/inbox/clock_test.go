package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestStoreOnTheRealClockFollowsTheDatabaseClock: a store without
// WithClock must leave its lease queue on the real clock (Queue.Now nil),
// the only case in which the queue measures its offset to the database
// clock again every lease.ClockResync; a non-nil Now is taken for a test
// clock and measured once, so a pod whose clock was stepped after its first
// write would judge leases and backoff by the stale offset for good.
func TestStoreOnTheRealClockFollowsTheDatabaseClock(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		if s.Queue().Now != nil {
			t.Fatal("the inbox's lease queue has a fixed process clock: its database clock offset is never measured again")
		}
		clk := newClock()
		if inbox.New(db, testKeys(t), inbox.DefaultPolicy(), inbox.WithClock(clk.Now)).Queue().Now == nil {
			t.Fatal("WithClock did not reach the lease queue")
		}
	})
}

// The first measurement of the database clock takes a connection of its
// own: made inside a transaction that holds the last one (a pool of one
// here, or a pool every caller holds a transaction of), it would wait out
// its timeout with the transaction open, and leave the store on this
// process's clock. Every path of a fresh store that writes a time is
// measured so, on both engines (SQLite reads its clock without a
// connection: there the test guards the paths against a later change).
func TestFirstClockMeasurementDoesNotWaitForTheTransactionsConnection(t *testing.T) {
	creds := newJob("", false).Credentials
	steps := []struct {
		name    string
		rotated bool // the store seals under a new key: Rewrap has work
		run     func(ctx context.Context, s *inbox.Store, db *sqldb.DB, req string, j *inbox.Job) error
	}{
		{"enqueue", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, req string, _ *inbox.Job) error {
			return s.Enqueue(ctx, newJob(req, false))
		}},
		{"insert in the caller's transaction", false, func(ctx context.Context, s *inbox.Store, db *sqldb.DB, req string, _ *inbox.Job) error {
			return db.Tx(ctx, func(tx *sql.Tx) error { return s.Insert(ctx, tx, newJob(req, false)) })
		}},
		{"claim", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, _ *inbox.Job) error {
			_, err := s.Claim(ctx, "w", 1, time.Minute)
			return err
		}},
		{"advance", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, j *inbox.Job) error {
			return s.Advance(ctx, j, schema.StatusFetching)
		}},
		{"progress", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, j *inbox.Job) error {
			return s.Progress(ctx, j, 50)
		}},
		{"fail", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, j *inbox.Job) error {
			_, err := s.Fail(ctx, j, inbox.JobError{Class: inbox.Retryable, Code: "x", Message: "y"})
			return err
		}},
		{"release", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, j *inbox.Job) error {
			return s.Release(ctx, j)
		}},
		{"succeed many", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, j *inbox.Job) error {
			stale, err := s.SucceedMany(ctx, []*inbox.Job{j}, nil)
			if err == nil && len(stale) != 0 {
				t.Errorf("succeed many: %d stale", len(stale))
			}
			return err
		}},
		{"update credentials", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, req string, j *inbox.Job) error {
			_, err := s.UpdateCredentials(ctx, j.ID, req, creds)
			return err
		}},
		{"rewrap", true, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, _ *inbox.Job) error {
			n, err := s.Rewrap(ctx)
			if err == nil && n == 0 {
				t.Error("rewrap moved no credentials to the new key")
			}
			return err
		}},
		{"prune", false, func(ctx context.Context, s *inbox.Store, _ *sqldb.DB, _ string, _ *inbox.Job) error {
			_, err := s.Prune(ctx, time.Now())
			return err
		}},
	}
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		spec := "k1:" + credentials.NewKey()
		keys, err := credentials.ParseKeyring(spec, "")
		if err != nil {
			t.Fatal(err)
		}
		rotated, err := credentials.ParseKeyring("k2:"+credentials.NewKey()+","+spec, "k2")
		if err != nil {
			t.Fatal(err)
		}
		req := addRequester(t, db)
		seed := inbox.New(db, keys, inbox.DefaultPolicy())
		for _, step := range steps {
			t.Run(step.name, func(t *testing.T) {
				enqueue(t, seed, req, 1)
				jobs, err := seed.Claim(ctx, "w", 1, time.Minute)
				if err != nil || len(jobs) != 1 {
					t.Fatalf("claim: %d %v", len(jobs), err)
				}
				if db.Engine == sqldb.Postgres {
					db.SetMaxOpenConns(1)
					defer db.SetMaxOpenConns(0)
				}
				k := keys
				if step.rotated {
					k = rotated
				}
				s := inbox.New(db, k, inbox.DefaultPolicy()) // its clock never measured
				start := time.Now()
				err = step.run(ctx, s, db, req, jobs[0])
				// Waiting for its own connection, it gives up after 5 s.
				if took := time.Since(start); took > 4*time.Second {
					t.Fatalf("the first %s of a store took %v: it measured the clock inside its transaction", step.name, took)
				}
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}
