package outbox

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// The Postgres wake-up LISTENs on a connection of the pool. When it stops
// (the dispatcher shutting down, the connection failing), that connection
// must not go back to the pool still listening: whoever takes it next
// would carry a listener nobody reads, and Postgres keeps every
// notification queued for a listener until it reads them.
func TestWatchLeavesNoListenerInThePool(t *testing.T) {
	db := sqltest.Open(t, sqldb.Postgres, migrationSets...)
	f := newFixture(t, db)
	d, err := New(testConfig(), Options{Store: NewStore(db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(db, f.keys)},
		Worker: "w", Log: slog.New(slog.NewJSONHandler(f.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.watch(ctx) }()

	bg := context.Background()
	var pid int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := db.QueryRowContext(bg, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&pid)
		if err == nil {
			break
		}
		if !errors.Is(err, sql.ErrNoRows) || time.Now().After(deadline) {
			t.Fatalf("the watch never listened: %v", err)
		}
	}
	cancel()
	<-done
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := db.QueryRowContext(bg, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d, which listened, outlived the watch", pid)
		}
	}
	for range 16 { // every connection of the pool (openPostgres)
		c, err := db.Conn(bg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var n int
		if err := c.QueryRowContext(bg, `SELECT count(*) FROM pg_listening_channels()`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("a pool connection listens on %d channels (%v)", n, err)
		}
	}
}
