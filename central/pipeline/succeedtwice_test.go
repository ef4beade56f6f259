package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestSucceedManyOfOneJobTwice: a worker's finisher may batch two
// successes of one job: the attempt whose lease ran out, still waiting for
// its write, and the attempt the same worker claimed after reclaiming it.
// The lease queue refuses a batch naming a row twice, so the batch is
// written job by job: the lost attempt is stale, the live one succeeds, and
// the other jobs of the batch are written too.
func TestSucceedManyOfOneJobTwice(t *testing.T) {
	for _, refs := range [][]string{{"old", "x", "new"}, {"same", "x", "same"}} {
		t.Run(refs[0], func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				clk := newClock(time.Now())
				f := newFixture(t, db, clk.Now)
				f.submit(t, "noop", "AAPL", "2026-01-02")
				first, err := f.store.Claim(ctx, "w1", 1, time.Minute)
				if err != nil || len(first) != 1 {
					t.Fatalf("claim: %v %d", err, len(first))
				}
				clk.Add(2 * time.Minute)
				f.submit(t, "noop", "AAPL", "2026-01-03")
				again, err := f.store.Claim(ctx, "w1", 2, time.Minute)
				if err != nil || len(again) != 2 {
					t.Fatalf("claim again: %v %d", err, len(again))
				}
				live, other := again[0], again[1]
				if live.ID != first[0].ID {
					live, other = other, live
				}
				if live.ID != first[0].ID || live.Version == first[0].Version {
					t.Fatalf("the expired job was not claimed again: %+v %+v", first[0].Claim, live.Claim)
				}
				errs := f.store.SucceedMany(ctx, []*Job{first[0], other, live}, refs)
				if !errors.Is(errs[0], lease.ErrStale) || errs[1] != nil || errs[2] != nil {
					t.Fatalf("errors %v", errs)
				}
				if r := f.get(t, live.ID); r.Status != StatusSucceeded || r.ResultRef != refs[2] || r.Attempts != 2 {
					t.Fatalf("job %+v", r)
				}
				if r := f.get(t, other.ID); r.Status != StatusSucceeded || r.ResultRef != refs[1] {
					t.Fatalf("other job %+v", r)
				}
				if first[0].Status != StatusRunning || live.Status != StatusSucceeded {
					t.Fatalf("claims in memory: lost %s, live %s", first[0].Status, live.Status)
				}
			})
		})
	}
}
