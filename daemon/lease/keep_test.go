package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestKeepFencesAtTheClaimsLeaseEnd: the lease in the database runs from
// the time the claim stamped, not from when the work starts under Keep. Work
// that starts late (here 60 % of the lease after its claim) and cannot
// renew must stop when the claim's lease ends, before another worker can
// reclaim the row; work that can renew must renew at once, before the row
// can be reclaimed.
func TestKeepFencesAtTheClaimsLeaseEnd(t *testing.T) {
	const ttl = 2 * time.Second
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		for _, tc := range []struct {
			name  string
			late  time.Duration // from the claim to Keep
			renew bool
		}{
			{"renewals fail", 1200 * time.Millisecond, false},
			// Half a second of the lease left: a sleep overrunning by that
			// much on a busy machine would leave Keep nothing to renew.
			{"renewals succeed", 1500 * time.Millisecond, true},
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
				// Fenced from the start of Keep instead, it stops 1.2 s late.
				if late := stopped.Sub(end); late > 300*time.Millisecond {
					t.Fatalf("work stopped %s after its claim's lease ended", late)
				}
			})
		}
	})
}

// TestKeepFencesAfterTheMachineSlept: while the machine sleeps (a
// suspended laptop or VM) the monotonic clock stands still and the wall
// clock, like the database's, does not. Woken after the lease ended, the
// work must stop within about a second, not run on for the remaining time
// the fence timer counts on the monotonic clock, while another worker can
// have reclaimed the row. A wall clock stepped back must not extend the
// lease, one a little ahead (within the lease) must not end it, and
// neither may the wall clock a lease that renewals keep.
func TestKeepFencesAfterTheMachineSlept(t *testing.T) {
	for _, tc := range []struct {
		name     string
		renews   bool
		ttl      time.Duration
		jump     time.Duration // of the wall clock, 200 ms into the work
		work     time.Duration // how long the work runs if not fenced
		fenced   bool
		min, max time.Duration // from the jump to the fence
	}{
		{"slept past the lease", false, 30 * time.Second, time.Hour, 5 * time.Second, true, 0, 1500 * time.Millisecond},
		// Due 1 s after the jump; the timer that records the jump can fire
		// late, and the wrong answers are at once and an hour later.
		{"wall clock stepped back", false, 1200 * time.Millisecond, -time.Hour, 10 * time.Second, true, 500 * time.Millisecond, 1600 * time.Millisecond},
		{"wall clock a little ahead", false, 30 * time.Second, 5 * time.Second, 2500 * time.Millisecond, false, 0, 0},
		{"renewed past its first end", true, 1500 * time.Millisecond, 0, 3500 * time.Millisecond, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var jump atomic.Int64
			wall := func() time.Time { return time.Now().Round(0).Add(time.Duration(jump.Load())) }
			jumped := make(chan time.Time, 1)
			time.AfterFunc(200*time.Millisecond, func() {
				jumped <- time.Now()
				jump.Store(int64(tc.jump))
			})
			renew := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
			if tc.renews {
				renew = func(context.Context) error { return nil }
			}
			var stopped time.Time
			err := lease.Keep(context.Background(), tc.ttl, renew, func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					stopped = time.Now()
					return ctx.Err()
				case <-time.After(tc.work):
					return nil
				}
			}, lease.KeepWallClock(wall))
			if !tc.fenced {
				if err != nil {
					t.Fatalf("Keep = %v, want the work to finish", err)
				}
				return
			}
			if !errors.Is(err, lease.ErrLeaseDeadline) {
				t.Fatalf("Keep = %v, want ErrLeaseDeadline", err)
			}
			if d := stopped.Sub(<-jumped); d < tc.min || d > tc.max {
				t.Fatalf("work stopped %s after the wall clock jumped by %s, want within [%s, %s]", d, tc.jump, tc.min, tc.max)
			}
		})
	}
}
