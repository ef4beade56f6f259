package pipeline

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestDataOnItsWayWaitsLonger: a job whose data is still on its way
// (UPSTREAM_INCOMPLETE: an edge that has not delivered its day) is retried
// after UpstreamWait, jittered in [UpstreamWait/2, UpstreamWait), not after
// the minutes of Backoff, so an edge whose uplink is down for hours does not
// see its day's job dead-lettered before the data arrives. Other retried
// failures keep Backoff.
func TestDataOnItsWayWaitsLonger(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		for i, tc := range []struct {
			name     string
			code     string
			wait     time.Duration
			draw     float64
			min, max time.Duration
		}{
			{"data on its way, least draw", CodeUpstreamIncomplete, time.Hour, 0, 30 * time.Minute, 30 * time.Minute},
			{"data on its way, greatest draw", CodeUpstreamIncomplete, time.Hour, 0.999, 59 * time.Minute, time.Hour},
			{"data on its way, wait unset", CodeUpstreamIncomplete, 0, 0.999, 0, 10 * time.Second},
			{"a fault", CodeStageUnavailable, time.Hour, 0.999, 0, 10 * time.Second},
		} {
			sym := "S" + strconv.Itoa(i)
			t.Run(tc.name, func(t *testing.T) {
				f := newFixture(t, db, nil)
				f.store.Backoff = lease.Backoff{Base: 10 * time.Second, Cap: time.Minute, Rand: func() float64 { return tc.draw }}
				f.store.UpstreamWait = tc.wait
				c := f.submit(t, "noop", sym, "2026-01-02")
				jobs, err := f.store.Claim(ctx, "w1", 1, 30*time.Second)
				if err != nil || len(jobs) != 1 {
					t.Fatalf("claimed %d jobs: %v", len(jobs), err)
				}
				if out, err := f.store.Fail(ctx, jobs[0], Fail(tc.code, "not yet")); err != nil || out != OutcomeRetry {
					t.Fatalf("fail: %s %v, want %s", out, err, OutcomeRetry)
				}
				r := f.get(t, c.JobID)
				if r.Status != StatusQueued || r.VisibleAt == nil {
					t.Fatalf("after the failure: %s visible_at %v", r.Status, r.VisibleAt)
				}
				if wait := r.VisibleAt.Sub(r.UpdatedAt); wait < tc.min || wait > tc.max {
					t.Fatalf("%s retried after %s, want within [%s, %s]", tc.code, wait, tc.min, tc.max)
				}
			})
		}
	})
}
