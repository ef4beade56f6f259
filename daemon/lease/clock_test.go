package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestLeasesKeepTheDatabaseClock: three pods share one database; B's clock
// runs an hour ahead, C's an hour behind. Every lease time is the
// database's, so B cannot reclaim A's live lease early, C reclaims an
// expired one on time, and the expiries each pod writes are the database's
// now + TTL whatever its own clock says.
func TestLeasesKeepTheDatabaseClock(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{migrations}, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		a, _ := setup(t, db, 3)
		a.Now = nil // the real clock
		pod := func(skew time.Duration) *lease.Queue {
			return &lease.Queue{DB: db, Spec: spec, Machine: machine, Now: func() time.Time { return time.Now().Add(skew) }}
		}
		b, c := pod(time.Hour), pod(-time.Hour)

		live, err := a.Claim(ctx, "A", 1, time.Minute)
		if err != nil || len(live) != 1 {
			t.Fatalf("A claim: %d %v", len(live), err)
		}
		got, err := b.Claim(ctx, "B", 3, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if g.ID == live[0].ID {
				t.Fatalf("a pod whose clock runs an hour ahead reclaimed a live lease")
			}
			dbNow, err := db.Clock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var exp int64
			if err := db.QueryRow(db.Rebind(`SELECT lease_expires_at FROM work WHERE id = ?`), g.ID).Scan(&exp); err != nil {
				t.Fatal(err)
			}
			if d := sqldb.FromMicros(exp).Sub(dbNow); d < 50*time.Second || d > time.Minute+5*time.Second {
				t.Fatalf("B wrote a lease ending %s from the database's now, want ~1m", d)
			}
		}
		// A short lease: once it is over by the database's clock, the pod
		// whose clock runs an hour behind reclaims it.
		if err := b.Heartbeat(ctx, &got[0], 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond)
		if n, err := c.Reclaim(ctx, 10); err != nil || n != 1 {
			t.Fatalf("a pod whose clock runs behind reclaimed %d expired leases (%v), want 1", n, err)
		}
	})
}
