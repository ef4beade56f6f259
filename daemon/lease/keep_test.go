package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestKeepFencesAtTheClaimsLeaseEnd: the lease in the database runs from
// the time the claim stamped, not from when the work starts under Keep. Work
// that starts late (here two thirds of the lease after its claim) and cannot
// renew must stop when the claim's lease ends, before another worker can
// reclaim the row; work that can renew must renew at once, before the row
// can be reclaimed.
func TestKeepFencesAtTheClaimsLeaseEnd(t *testing.T) {
	const ttl = 900 * time.Millisecond
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		for _, tc := range []struct {
			name  string
			late  time.Duration // from the claim to Keep
			renew bool
		}{
			{"renewals fail", 600 * time.Millisecond, false},
			{"renewals succeed", 750 * time.Millisecond, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				q, _ := setup(t, db, 1)
				q.Now = nil // the real clock
				t.Cleanup(func() {
					if _, err := db.Exec(`DELETE FROM work`); err != nil {
						t.Error(err)
					}
				})
				cs, err := q.Claim(ctx, "A", 1, ttl)
				if err != nil || len(cs) != 1 {
					t.Fatalf("claim: %d %v", len(cs), err)
				}
				c := cs[0]
				end := time.Now().Add(c.LeaseExpiresAt.Sub(q.Time()))
				// Both are estimates of the database clock, to its microsecond.
				if c.Deadline.After(end.Add(time.Millisecond)) {
					t.Fatalf("claim's deadline %s after the lease's end by the database's clock", c.Deadline.Sub(end))
				}
				time.Sleep(tc.late)
				renew := func(context.Context) error { return errors.New("dial tcp: connection refused") }
				if tc.renew {
					renew = func(ctx context.Context) error { return q.Heartbeat(ctx, &c, ttl) }
				}
				var stopped time.Time
				err = lease.Keep(ctx, ttl, renew, func(ctx context.Context) error {
					select {
					case <-ctx.Done():
						stopped = time.Now()
						return ctx.Err()
					case <-time.After(time.Until(end) + 75*time.Millisecond):
					}
					// Another worker, once the claim's lease is over by the
					// database's clock.
					b := &lease.Queue{DB: db, Spec: spec, Machine: machine}
					got, err := b.Claim(context.WithoutCancel(ctx), "B", 1, ttl)
					if err != nil {
						return err
					}
					if len(got) != 0 {
						return errors.New("B reclaimed the row while A's work still ran")
					}
					return nil
				}, lease.Until(c.Deadline))
				if tc.renew {
					if err != nil {
						t.Fatalf("work with a renewable lease: %v", err)
					}
					return
				}
				if !errors.Is(err, lease.ErrLeaseDeadline) {
					t.Fatalf("Keep = %v, want ErrLeaseDeadline", err)
				}
				if late := stopped.Sub(end); late > 50*time.Millisecond {
					t.Fatalf("work stopped %s after its claim's lease ended", late)
				}
			})
		}
	})
}
