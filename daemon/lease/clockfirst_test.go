package lease_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestUnmeasuredClockJudgesNoLease: a pod whose clock runs an hour ahead
// cannot take the first measurement of the database clock (its pool is
// busy for longer than the measurement waits), but its transaction gets a
// connection later. The reclaim and the heartbeat it then runs must still
// judge and write lease times by the database's clock, not by its own: by
// its own, A's live lease is an hour over and the row would be handed to a
// second worker, and the heartbeat would write a lease ending an hour late.
func TestUnmeasuredClockJudgesNoLease(t *testing.T) {
	ctx := context.Background()
	raw := sqltest.URL(t, sqldb.Postgres)
	full, err := sqldb.Open(ctx, raw, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = full.Close() })
	if _, err := sqldb.Migrate(ctx, full, migrations); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	qs := u.Query()
	qs.Set("pool_max_conns", "1")
	u.RawQuery = qs.Encode()
	one, err := sqldb.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = one.Close() })

	if _, err := full.Exec(`INSERT INTO work (id, status) VALUES ('w1', 'ready'), ('w2', 'ready')`); err != nil {
		t.Fatal(err)
	}
	a := &lease.Queue{DB: full, Spec: spec, Machine: machine}
	live, err := a.Claim(ctx, "A", 2, time.Minute)
	if err != nil || len(live) != 2 {
		t.Fatalf("A claim: %d %v", len(live), err)
	}

	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	for _, tc := range []struct {
		name string
		run  func(b *lease.Queue) error
	}{
		{"heartbeat", func(b *lease.Queue) error {
			c := live[1]
			if err := b.Heartbeat(ctx, &c, time.Minute); err != nil {
				return err
			}
			var exp int64
			if err := full.QueryRow(`SELECT lease_expires_at FROM work WHERE id = $1`, c.ID).Scan(&exp); err != nil {
				return err
			}
			dbNow, err := full.Clock(ctx)
			if err != nil {
				return err
			}
			if d := sqldb.FromMicros(exp).Sub(dbNow); d > time.Minute+5*time.Second {
				t.Errorf("the heartbeat wrote a lease ending %s from the database's now, want ~1m", d)
			}
			return nil
		}},
		{"reclaim", func(b *lease.Queue) error {
			n, err := b.Reclaim(ctx, 10)
			if err == nil && n != 0 {
				t.Errorf("a pod whose clock was never measured reclaimed %d live leases", n)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &lease.Queue{DB: one, Spec: spec, Machine: machine, Now: ahead}
			// The pool's one connection is busy while b measures the clock
			// (the measurement gives up after 5 s), free again by the time
			// b's transaction asks for it.
			hold, err := one.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(5500*time.Millisecond, func() { _ = hold.Close() })
			if err := tc.run(b); err != nil {
				t.Fatal(err)
			}
		})
	}
}
