package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// The scheduler owes the days by the database's clock, the lease
// protocol's one clock: a pod whose own clock is off by days enqueues
// the same asof as every other pod — never a day that has not ended (a
// pod running ahead), nor one long past (a pod running behind).
func TestSchedulerUsesTheDatabaseClock(t *testing.T) {
	for _, skew := range []time.Duration{-50 * time.Hour, -5 * time.Hour, 5 * time.Hour, 50 * time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				pod := newClock(time.Now().Add(skew))
				f := newFixture(t, db, pod.Now)
				s := &Scheduler{Store: f.store, At: 0, CatchupDays: 1, Log: f.store.Log,
					Entries: []ScheduleEntry{{JobType: "noop", Symbols: FixedSymbols([]string{"AAPL"})}}}
				yesterday := func() string {
					now, err := db.Clock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					return now.UTC().AddDate(0, 0, -1).Format(DateLayout)
				}
				before := yesterday()
				if n, err := s.RunOnce(ctx); err != nil || n != 1 {
					t.Fatalf("scheduled %d: %v", n, err)
				}
				after := yesterday()
				var asof string
				if err := db.QueryRowContext(ctx, "SELECT asof FROM pipeline_jobs").Scan(&asof); err != nil {
					t.Fatal(err)
				}
				if asof != before && asof != after {
					t.Fatalf("enqueued asof %s; by the database's clock yesterday is %s", asof, after)
				}
			})
		})
	}
}
