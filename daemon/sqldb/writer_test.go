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
// BEGIN, between statements, during COMMIT — must never fail the next,
// uncancelled transaction (it failed with "cannot start a transaction within
// a transaction" while the late rollback was pending) nor let a transaction
// commit part of its rows: each transaction writes 20 rows, so every
// transaction number is in the table 20 times or not at all.
func TestCancelledTransactionsLeaveTheWriterWhole(t *testing.T) {
	ctx := context.Background()
	db := openWriterTestDB(t)
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
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, seed))
	var wg sync.WaitGroup
	committed := 0
	length := time.Millisecond // of a whole transaction, measured as the test goes
	for n := range 600 {
		cctx, cancel := context.WithCancel(ctx)
		at := time.Duration(rnd.Int64N(int64(2*length) + 1)) // before, during or after
		wg.Go(func() {
			time.Sleep(at)
			cancel()
		})
		if err := write(cctx, n); err == nil {
			committed++
		} else if !isInterrupted(err) {
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

// A long write interrupted by its context makes SQLite roll its transaction
// back at once; the next transaction, on a context that never ends, must
// then commit all its rows and report success. With the rollback left to
// database/sql's own goroutine it landed inside that next transaction,
// whose rows then committed one by one while its COMMIT failed.
func TestInterruptedWriteLeavesTheNextWhole(t *testing.T) {
	ctx := context.Background()
	db := openWriterTestDB(t)
	if _, err := db.Exec(`CREATE TABLE t (n INTEGER NOT NULL, v INTEGER)`); err != nil {
		t.Fatal(err)
	}
	const rows = 20
	for n := range 50 {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Millisecond)
		err := db.Tx(cctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(cctx, `INSERT INTO t (n, v)
				WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 5000000)
				SELECT -1, i FROM s`)
			return err
		})
		cancel()
		if err == nil {
			t.Fatalf("round %d: a five-million-row insert finished inside 3 ms", n)
		}
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			for range rows {
				if _, err := tx.ExecContext(ctx, `INSERT INTO t (n) VALUES (?)`, n); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: the transaction after an interrupted one: %v", n, err)
		}
	}
	var long, short int
	if err := db.QueryRow(`SELECT COUNT(*) FILTER (WHERE n = -1), COUNT(*) FILTER (WHERE n >= 0) FROM t`).Scan(&long, &short); err != nil {
		t.Fatal(err)
	}
	if long != 0 || short != 50*rows {
		t.Fatalf("%d rows of interrupted inserts and %d of %d whole transactions' rows stored", long, short, 50*rows)
	}
}

// A transaction whose context has already ended never begins.
func TestEndedContextBeginsNoWrite(t *testing.T) {
	ctx := context.Background()
	db := openWriterTestDB(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	err := db.Tx(cctx, func(*sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Tx on an ended context: err %v, fn ran %v; want context.Canceled and no run", err, ran)
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error { _, err := tx.Exec(`CREATE TABLE t (x)`); return err }); err != nil {
		t.Fatalf("the next transaction: %v", err)
	}
}

// openWriterTestDB opens a SQLite database of the test's own, closed at
// its end.
func openWriterTestDB(t *testing.T) *DB {
	t.Helper()
	db, err := openSQLite(context.Background(), sqliteOptions{path: filepath.Join(t.TempDir(), "w.db"), synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
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

// A transaction body that panics (and is recovered above, as net/http does
// for a handler) must not leave its transaction open: on SQLite the one
// writer connection would stay inside it, holding the file's write lock,
// and every later write would wait for it for good.
func TestPanickingTransactionIsRolledBack(t *testing.T) {
	ctx := context.Background()
	// Closed only when the test passes: a writer left inside a transaction
	// would hold Close as well.
	db, err := openSQLite(ctx, sqliteOptions{path: filepath.Join(t.TempDir(), "w.db"), synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not reach the caller")
			}
		}()
		_ = db.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES (1)`); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	done := make(chan error, 1)
	go func() {
		done <- db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES (2)`)
			return err
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the write after a panicking one: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write after a panicking one still waits: the panicking transaction was left open")
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows (%v), want 1: the panicking transaction's row must not be stored", n, err)
	}
	_ = db.Close()
}
