package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Contexts that end at random moments inside write transactions — before
// BEGIN, between statements, during COMMIT — must never leave the writer
// connection inside a transaction (every later write failed with "cannot
// start a transaction within a transaction") nor let a transaction commit
// part of its rows: each transaction writes 20 rows, so every transaction
// number is in the table 20 times or not at all.
func TestCancelledTransactionsLeaveTheWriterWhole(t *testing.T) {
	ctx := context.Background()
	db, err := openSQLite(ctx, sqliteOptions{path: filepath.Join(t.TempDir(), "w.db"), synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, v BLOB)`); err != nil {
		t.Fatal(err)
	}
	const rows = 20
	write := func(ctx context.Context, n int) error {
		return db.Tx(ctx, func(tx *sql.Tx) error {
			for range rows {
				if _, err := tx.ExecContext(ctx, `INSERT INTO t (n, v) VALUES (?, randomblob(200))`, n); err != nil {
					return err
				}
			}
			var c int
			return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM t WHERE n = ?`, n).Scan(&c)
		})
	}
	var wg sync.WaitGroup
	committed := 0
	length := time.Millisecond // of a whole transaction, measured as the test goes
	for n := range 600 {
		cctx, cancel := context.WithCancel(ctx)
		at := time.Duration(rand.Int64N(int64(2 * length))) // before, during or after
		wg.Go(func() {
			time.Sleep(at)
			cancel()
		})
		if err := write(cctx, n); err == nil {
			committed++
		} else if !errors.Is(err, context.Canceled) && !isInterrupted(err) {
			t.Fatalf("transaction %d: %v", n, err)
		}
		cancel()
		// the writer still takes a whole transaction
		start := time.Now()
		if err := write(ctx, -1-n); err != nil {
			t.Fatalf("after transaction %d was cancelled: %v", n, err)
		}
		length = time.Since(start)
	}
	wg.Wait()
	var partial int
	if err := db.QueryRow(`SELECT COUNT(*) FROM (SELECT n FROM t GROUP BY n HAVING COUNT(*) != ?)`, rows).Scan(&partial); err != nil {
		t.Fatal(err)
	}
	if partial != 0 {
		t.Fatalf("%d transactions committed part of their rows", partial)
	}
	var whole int
	if err := db.QueryRow(`SELECT COUNT(DISTINCT n) FROM t WHERE n >= 0`).Scan(&whole); err != nil {
		t.Fatal(err)
	}
	if whole != committed {
		t.Fatalf("%d cancellable transactions reported committed, %d in the table", committed, whole)
	}
	t.Logf("%d of 600 cancellable transactions committed", committed)
}

// A transaction whose context has already ended never begins.
func TestEndedContextBeginsNoWrite(t *testing.T) {
	ctx := context.Background()
	db, err := openSQLite(ctx, sqliteOptions{path: filepath.Join(t.TempDir(), "w.db"), synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	err = db.Tx(cctx, func(*sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Tx on an ended context: err %v, fn ran %v; want context.Canceled and no run", err, ran)
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error { _, err := tx.Exec(`CREATE TABLE t (x)`); return err }); err != nil {
		t.Fatalf("the next transaction: %v", err)
	}
}

func isInterrupted(err error) bool {
	return err != nil && (errors.Is(err, context.Canceled) || containsAny(err.Error(), "interrupted", "context canceled"))
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
