package lease_test

import (
	"context"
	"database/sql"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
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

// A database that stops answering costs one measurement of its clock, not
// one per caller: the callers that come while it fails keep the last
// offset instead of waiting, one after another, for a measurement each.
func TestClockOfAnUnansweringDatabaseIsNotMeasuredByEveryCaller(t *testing.T) {
	ctx := context.Background()
	direct := sqltest.Open(t, sqldb.Postgres)
	var name string
	if err := direct.QueryRowContext(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testsvc.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	hole := newBlackhole(t, u.Host)
	u.Host, u.Path = hole.addr, "/"+name
	qs := u.Query()
	qs.Set("connect_timeout", "1") // a measurement fails after a second
	u.RawQuery = qs.Encode()
	db, err := sqldb.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	t.Cleanup(hole.shut) // first: pgx's close would dial the hole and wait
	q := &lease.Queue{DB: db, Spec: spec, Machine: machine}
	q.Time() // measured while the database answers
	hole.swallow()
	lease.DueForClockResync(q)

	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); q.Time() }()
	}
	wg.Wait()
	if took := time.Since(start); took > 2500*time.Millisecond {
		t.Fatalf("four callers took %v: each measured the clock of a database that does not answer", took)
	}
}

// blackhole forwards TCP to a server until swallow; from then on every
// connection is accepted and never answered (a network that drops
// packets), and the forwarded ones are cut.
type blackhole struct {
	addr   string
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{addr: ln.Addr().String(), ln: ln}
	t.Cleanup(b.shut)
	wg := &b.wg
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			swallowed := b.closed
			b.mu.Unlock()
			if swallowed {
				continue // held open, never answered
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, up)
			b.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return b
}

// shut closes the listener and every connection, and waits for the copies.
func (b *blackhole) shut() {
	_ = b.ln.Close()
	b.mu.Lock()
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}

// swallow cuts the forwarded connections; new ones go unanswered.
func (b *blackhole) swallow() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
}

// poolOfOne opens the test's Postgres database with a pool of one
// connection: a transaction then holds every connection there is.
func poolOfOne(t *testing.T) *sqldb.DB {
	t.Helper()
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
	if _, err := sqldb.Migrate(ctx, db, migrations); err != nil {
		t.Fatal(err)
	}
	return db
}

// Measuring the database clock takes a connection of its own. A claim
// measures it before its transaction holds one, and a due resync does not
// make the callers inside transactions wait for a connection they hold
// themselves: with every connection of the pool in a transaction, each
// would wait out the measurement's timeout, and the measurement fail.
func TestClockMeasurementDoesNotWaitForTheTransactionsConnection(t *testing.T) {
	ctx := context.Background()
	db := poolOfOne(t)
	q, _ := setup(t, db, 2)
	q.Now = nil // the real clock, measured again every ClockResync

	start := time.Now()
	if _, err := q.Claim(ctx, "w", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the first claim took %v: it measured the clock inside its transaction", took)
	}
	lease.DueForClockResync(q)
	start = time.Now()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := q.ClaimTx(ctx, tx, "w", 1, time.Minute, q.Time())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a claim inside a transaction took %v when the clock was due a measurement", took)
	}
	// The measurement still happens, once a connection is free.
	deadline := time.Now().Add(5 * time.Second)
	for lease.ClockDue(q) {
		if time.Now().After(deadline) {
			t.Fatal("the due measurement of the database clock never happened")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClockMeasuredOnABusyPoolIsNotAhead: a measurement of the database
// clock that waits for a connection of a busy pool must not count the wait
// in its round trip. The database reads its clock when the query runs, at
// the end of the wait, not halfway through it: the estimate ran ahead of
// the database clock by half the wait, for a minute, and the pod reclaimed
// live leases that early. The pool is held once, or kept busy by other
// work for every reading the measurement takes. Postgres only: SQLite's
// clock is read without a connection.
func TestClockMeasuredOnABusyPoolIsNotAhead(t *testing.T) {
	const wait = 400 * time.Millisecond
	for _, tc := range []struct {
		name string
		busy func(t *testing.T, db *sqldb.DB) (stop func())
	}{
		{"held, then released", func(t *testing.T, db *sqldb.DB) func() {
			hold, err := db.Conn(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(wait, func() { _ = hold.Close() })
			return func() {}
		}},
		{"kept busy", func(t *testing.T, db *sqldb.DB) func() {
			done := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-done:
							return
						default:
						}
						c, err := db.Conn(context.Background())
						if err != nil {
							t.Error(err)
							return
						}
						time.Sleep(wait / 4)
						_ = c.Close()
					}
				}()
			}
			time.Sleep(wait / 8) // every worker holds or waits for the connection
			return func() { close(done); wg.Wait() }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one := poolOfOne(t)
			idle := &lease.Queue{DB: one, Spec: spec, Machine: machine}
			idle.Time() // measured on an idle pool
			stop := tc.busy(t, one)
			busy := &lease.Queue{DB: one, Spec: spec, Machine: machine}
			start := time.Now()
			busy.Time() // measured once the pool has a connection free
			took := time.Since(start)
			stop()
			if took < wait/8 {
				t.Fatalf("measured in %s: the pool was not busy", took)
			}
			// The round trip, twice the error, is the query's alone: with
			// the wait for a connection counted in it, it is a good part
			// of wait (the best of the readings, each of which waited),
			// and the estimate half of it ahead.
			rtt := lease.ClockRoundTrip(busy)
			if rtt >= wait/8 {
				t.Fatalf("measured after waiting %s for a connection, with a round trip of %s: the wait was counted", took, rtt)
			}
			// Both count on the monotonic clock from their measurement, so
			// they differ by as much as their estimates of the database
			// clock do: each by up to half its round trip, which a busy
			// machine stretches for either.
			bound := (rtt+lease.ClockRoundTrip(idle))/2 + 10*time.Millisecond
			if d := busy.Time().Sub(idle.Time()); d > bound || d < -bound {
				t.Fatalf("measured after waiting %s for a connection, lease time is %s off the one measured on an idle pool (allowed %s)", took, d, bound)
			}
		})
	}
}
