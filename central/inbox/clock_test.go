package inbox_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
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
// own: made inside a transaction that holds the last one, it would wait
// out its timeout and leave the store on this process's clock.
func TestFirstClockMeasurementDoesNotWaitForTheTransactionsConnection(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(sqltest.URL(t, sqldb.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	qs := u.Query()
	qs.Set("pool_max_conns", "1")
	u.RawQuery = qs.Encode()
	db, err := sqldb.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := sqldb.Migrate(ctx, db, schema.Migrations()); err != nil {
		t.Fatal(err)
	}
	req := addRequester(t, db)
	for _, step := range []struct {
		name string
		run  func(s *inbox.Store) error
	}{
		{"enqueue", func(s *inbox.Store) error { return s.Enqueue(ctx, newJob(req, false)) }},
		{"claim", func(s *inbox.Store) error { _, err := s.Claim(ctx, "w", 1, time.Minute); return err }},
	} {
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		start := time.Now()
		if err := step.run(s); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("the first %s of a store took %v: it measured the clock inside its transaction", step.name, took)
		}
	}
}
