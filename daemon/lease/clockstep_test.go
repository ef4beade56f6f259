package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestSteppedWallClockMovesNoLease: a pod measures the database clock, then
// its wall clock is stepped by an hour (NTP, a resumed VM, `date -s`) and
// no measurement follows. Lease time runs on a clock that is never
// stepped, so it does not move: stepped forward, the pod does not reclaim
// A's live lease; stepped back, its heartbeat does not write a lease that
// outlives its TTL by the database's clock.
func TestSteppedWallClockMovesNoLease(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				a, _ := setup(t, db, 2)
				a.Now = nil // the real clock
				live, err := a.Claim(ctx, "A", 2, time.Minute)
				if err != nil || len(live) != 2 {
					t.Fatalf("A claim: %d %v", len(live), err)
				}

				var wall atomic.Int64
				start := time.Now()
				b := &lease.Queue{DB: db, Spec: spec, Machine: machine,
					Now:     func() time.Time { return time.Now().Add(time.Duration(wall.Load())) },
					Elapsed: func() time.Duration { return time.Since(start) },
				}
				before := b.Time() // measured against the database
				wall.Store(int64(step))
				if d := b.Time().Sub(before); d < 0 || d > 5*time.Second {
					t.Errorf("a wall clock stepped by %s moved lease time by %s", step, d)
				}
				if n, err := b.Reclaim(ctx, 10); err != nil {
					t.Fatal(err)
				} else if n != 0 {
					t.Errorf("after a step of %s the pod reclaimed %d live leases", step, n)
				}
				c := live[1]
				if err := b.Heartbeat(ctx, &c, time.Minute); err != nil {
					t.Fatal(err)
				}
				var exp int64
				if err := db.QueryRow(db.Rebind(`SELECT lease_expires_at FROM work WHERE id = ?`), c.ID).Scan(&exp); err != nil {
					t.Fatal(err)
				}
				dbNow, err := db.Clock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if d := sqldb.FromMicros(exp).Sub(dbNow); d < 50*time.Second || d > time.Minute+5*time.Second {
					t.Fatalf("after a step of %s the heartbeat wrote a lease ending %s from the database's now, want ~1m", step, d)
				}
			})
		})
	}
}

// TestSleptMachineMeasuresAgain: while a machine sleeps (or a VM is
// paused) the monotonic clock stands still and the wall clock does not.
// Counting on the monotonic clock alone, lease time would run behind by
// the sleep until the next measurement a minute later: leases written
// ending early, expired ones judged live. When the two clocks disagree
// about the time since the last measurement, the database clock is
// measured again, and lease time catches up with it.
func TestSleptMachineMeasuresAgain(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		var frozen atomic.Bool
		var stopped, slept atomic.Int64
		start := time.Now()
		q := &lease.Queue{DB: db, Spec: spec, Machine: machine,
			Now: time.Now,
			Elapsed: func() time.Duration {
				if frozen.Load() {
					return time.Duration(stopped.Load())
				}
				return time.Since(start) - time.Duration(slept.Load())
			},
		}
		q.Time() // measured against the database
		stopped.Store(int64(time.Since(start)))
		frozen.Store(true) // asleep: the monotonic clock stops
		time.Sleep(1500 * time.Millisecond)
		slept.Store(int64(time.Since(start)) - stopped.Load())
		frozen.Store(false) // awake: it runs on from where it stopped
		deadline := time.Now().Add(5 * time.Second)
		for {
			dbNow, err := db.Clock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d := dbNow.Sub(q.Time())
			if d < 200*time.Millisecond && d > -200*time.Millisecond {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after a sleep of 1.5 s lease time still runs %s behind the database's", d)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}
