package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestExpiredLeaseRequeueBacksOff: a job whose worker vanished is requeued
// under the retry policy, not claimable at once: no sooner than the
// backoff base (even when the jitter draws 0), plus the retryable class's
// jitter. A poison job that kills its workers cannot cycle through the
// fleet at the speed of the lease TTL.
func TestExpiredLeaseRequeueBacksOff(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock()
		pol := inbox.DefaultPolicy()
		pol.Backoff = lease.Backoff{Base: 10 * time.Second, Cap: time.Minute, Rand: func() float64 { return 0 }}
		s := inbox.New(db, testKeys(t), pol, inbox.WithClock(clk.Now))
		id := enqueue(t, s, addRequester(t, db), 1)[0]
		if js, err := s.Claim(ctx, "gone", 1, time.Second); err != nil || len(js) != 1 {
			t.Fatalf("claim: %d %v", len(js), err)
		}
		clk.Add(2 * time.Second) // the lease ran out
		if js, err := s.Claim(ctx, "w", 1, time.Second); err != nil || len(js) != 0 {
			t.Fatalf("an expired job was claimed again at once (%d, %v)", len(js), err)
		}
		v, err := s.Get(ctx, id)
		if err != nil || v.Status != "queued" || v.NextAttemptAt == nil || v.LastError == nil || v.LastError.Code != "lease_expired" {
			t.Fatalf("after expiry: %+v %v", v, err)
		}
		if d := v.NextAttemptAt.Sub(s.Now()); d < 9*time.Second || d > 10*time.Second {
			t.Fatalf("requeued %s ahead, want the 10s base", d)
		}
		clk.Add(10 * time.Second)
		if js, err := s.Claim(ctx, "w", 1, time.Second); err != nil || len(js) != 1 || js[0].Attempt != 2 {
			t.Fatalf("claim after the backoff: %d %v", len(js), err)
		}
	})
}
