package ingest

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

const heldWarning = "fleet tail held back"

// gauges reads the tail's lag from reg as a scrape would.
func gauges(t *testing.T, reg *prometheus.Registry) (events, seconds float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range families {
		switch f.GetName() {
		case "euterpe_sync_tail_held_events":
			events, found = f.GetMetric()[0].GetGauge().GetValue(), found+1
		case "euterpe_sync_tail_held_seconds":
			seconds, found = f.GetMetric()[0].GetGauge().GetValue(), found+1
		}
	}
	if found != 2 {
		t.Fatalf("tail lag gauges not registered (%d of 2)", found)
	}
	return events, seconds
}

// waitFor polls ok for up to d: the tail's horizon is the whole server's,
// so another test's transaction can hold it a moment longer than ours.
func waitFor(d time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if ok() || time.Now().After(deadline) {
			return ok()
		}
	}
}

// A transaction that has written and stays open on the Postgres server
// holds every tail back. The gauges report the rows it holds and their
// age, the open tail logs one warning naming the setting that bounds such
// transactions, and once it ends the rows are sent and the gauges fall to
// 0. On SQLite nothing is ever held: the gauges stay 0.
func TestTailHeldByOpenTransactionIsReported(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		ctx := context.Background()
		db := openURL(t, url)
		s := startServer(t, db)
		s.role.API.HeldWarnAfter = 300 * time.Millisecond
		edge, _ := s.register("e")

		tailCtx, stop := context.WithCancel(ctx)
		defer stop()
		got := make(chan EventView, 10)
		// From the oldest event, so the rows arrive whenever it connects.
		go func() {
			_ = sseRead(tailCtx, s, "?last_event_id=0", "", func(_ string, e EventView) bool { got <- e; return true })
		}()

		var release func()
		if db.Engine == sqldb.Postgres {
			// Kept to a couple of seconds: the server is shared, and this
			// transaction holds every other test's tails too.
			release = holdXID(t, db)
			defer release()
		}
		evs := events(edge, "j", 1000, "queued", "running", "done")
		if _, err := s.role.Store.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: evs}); err != nil {
			t.Fatal(err)
		}

		if db.Engine == sqldb.Postgres {
			var n, age float64
			if !waitFor(5*time.Second, func() bool { n, age = gauges(t, s.metrics); return n == 3 && age > 0 }) {
				t.Fatalf("held by an open transaction: gauges %v events, %v s", n, age)
			}
			if h, err := s.role.Store.TailHeld(ctx, 2); err != nil || h.Events != 3 {
				t.Fatalf("count bounded at 2: %+v %v (want 3: more than the limit)", h, err)
			}
			if !waitFor(5*time.Second, func() bool { return strings.Contains(s.logs.String(), heldWarning) }) {
				t.Fatalf("no warning while held: %s", s.logs)
			}
			time.Sleep(3 * s.role.API.Heartbeat) // more checks, still held
			release()
			log := s.logs.String()
			if n := strings.Count(log, heldWarning); n != 1 {
				t.Fatalf("%d warnings, want 1: %s", n, log)
			}
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, heldWarning) &&
					(!strings.Contains(line, "idle_in_transaction_session_timeout") || strings.Contains(line, "held_open") || strings.Contains(line, "INSERT")) {
					t.Fatalf("warning must name the setting and no SQL: %s", line)
				}
			}
		}

		var n, age float64
		if !waitFor(15*time.Second, func() bool { n, age = gauges(t, s.metrics); return n == 0 && age == 0 }) {
			t.Fatalf("after the transaction ended: gauges %v events, %v s", n, age)
		}
		for i := range evs {
			select {
			case <-got:
			case <-time.After(15 * time.Second):
				t.Fatalf("tail sent %d of %d events", i, len(evs))
			}
		}
		if db.Engine != sqldb.Postgres {
			time.Sleep(3 * s.role.API.Heartbeat)
			if strings.Contains(s.logs.String(), heldWarning) {
				t.Fatalf("warning on SQLite: %s", s.logs)
			}
		}
	})
}

// holdXID opens a transaction on a connection of its own that writes (to
// a temporary table, so it takes an xid and touches no other data) and
// stays open until the returned func is called.
func holdXID(t *testing.T, db *sqldb.DB) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`CREATE TEMP TABLE held_open (n int) ON COMMIT DROP`, `INSERT INTO held_open VALUES (1)`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
	}
	done := false
	return func() {
		if !done {
			done = true
			if err := tx.Rollback(); err != nil && err != sql.ErrTxDone {
				t.Error(err)
			}
			_ = conn.Close()
		}
	}
}
