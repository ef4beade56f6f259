package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A fresh store's first claim, enqueue or submit (of a message made
// elsewhere, as a retried submit sends it) measures the database clock
// before its transaction takes a connection: measured inside it, on a pool
// the transaction has exhausted, the measurement waits for a connection the
// transaction itself holds (lease.Queue.Time gives up after 5 s), with the
// transaction open all along.
func TestFirstLeaseTimeDoesNotWaitForItsOwnConnection(t *testing.T) {
	ops := []struct {
		name string
		run  func(ctx context.Context, s *Store, m JobMessage) error
	}{
		{"claim", func(ctx context.Context, s *Store, _ JobMessage) error {
			jobs, err := s.Claim(ctx, "w1", 1, 30*time.Second)
			if err == nil && len(jobs) != 1 {
				t.Errorf("claimed %d jobs", len(jobs))
			}
			return err
		}},
		{"enqueue", func(ctx context.Context, s *Store, m JobMessage) error {
			_, err := s.Enqueue(ctx, m)
			return err
		}},
		{"submit", func(ctx context.Context, s *Store, m JobMessage) error {
			c, err := s.SubmitMessage(ctx, m)
			if err == nil && (!c.Created || c.JobID != m.JobID) {
				t.Errorf("submit answered %+v", c)
			}
			return err
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				seed := newFixture(t, db, nil)
				m := seed.store.Message(Request{JobType: "noop", Symbol: "AAPL", Asof: "2026-01-02", RequestedBy: "test"})
				if _, err := seed.store.CreateQueued(ctx, m); err != nil {
					t.Fatal(err)
				}
				if _, err := seed.store.Enqueue(ctx, m); err != nil && op.name == "claim" {
					t.Fatal(err)
				}
				if op.name == "claim" {
					makeDue(t, db, m.JobID)
				} else {
					m = seed.store.Message(Request{JobType: "noop", Symbol: "AAPL", Asof: "2026-01-03", RequestedBy: "test"})
				}
				if op.name == "enqueue" {
					if _, err := seed.store.CreateQueued(ctx, m); err != nil {
						t.Fatal(err)
					}
				}
				if db.Engine == sqldb.Postgres {
					// SQLite's clock is read without a connection
					// (sqldb.DB.ClockOn), and its writer connection holds a
					// slot of the pool for good.
					db.SetMaxOpenConns(1)
					t.Cleanup(func() { db.SetMaxOpenConns(0) })
				}
				s := NewStore(db, nil) // its lease clock never measured
				start := time.Now()
				err := op.run(ctx, s, m)
				// Waiting for its own connection, it gives up after 5 s.
				if took := time.Since(start); took > 4*time.Second {
					t.Fatalf("the first %s took %v", op.name, took)
				}
				if err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
