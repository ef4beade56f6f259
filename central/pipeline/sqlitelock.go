package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// lockGuard keeps a submit within its context on SQLite. There, "the
// database cannot be reached" means the file is locked by another process
// (a backup, a stuck writer), and SQLite's busy wait for the write lock
// ignores cancellation: a submit would hang for the whole busy timeout.
// So the transaction runs on a goroutine the guard owns and the caller
// gets QUEUE_UNAVAILABLE when its context ends; once that happened, later
// submits first ask for the write lock with a short busy timeout and fail
// fast while it is still held. (The abandoned transaction finds its
// context done after the busy wait and rolls back.)
type lockGuard struct {
	mu      sync.Mutex
	suspect time.Time
	wg      sync.WaitGroup
}

// suspectFor is how long after a lock timeout submits probe first.
const suspectFor = 5 * time.Second

func (g *lockGuard) trip() {
	g.mu.Lock()
	g.suspect = time.Now().Add(suspectFor)
	g.mu.Unlock()
}

func (g *lockGuard) run(ctx context.Context, db *sqldb.DB, fn func() error) error {
	if db.Engine != sqldb.SQLite {
		return fn()
	}
	if _, ok := ctx.Deadline(); !ok {
		return fn()
	}
	g.mu.Lock()
	probe := time.Now().Before(g.suspect)
	g.mu.Unlock()
	if probe {
		if err := pingWrite(ctx, db, 250); err != nil {
			g.trip()
			if u := unavailable(CodeQueueUnavailable, err); u != err {
				return u
			}
			return &UnavailableError{Code: CodeQueueUnavailable, Reason: ReasonLocked, Err: err}
		}
	}
	done := make(chan error, 1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		done <- fn()
	}()
	select {
	case err := <-done:
		if Reason(err) == ReasonLocked {
			g.trip()
		}
		return err
	case <-ctx.Done():
		g.trip()
		return &UnavailableError{Code: CodeQueueUnavailable, Reason: ReasonTimeout, Err: ctx.Err()}
	}
}

// Wait waits for submits the guard abandoned to their contexts.
func (s *Store) Wait() { s.locked.wg.Wait() }

// pingWrite takes and releases the write lock on a pool connection; on
// SQLite with a busy timeout of busyMS instead of the database's.
func pingWrite(ctx context.Context, db *sqldb.DB, busyMS int) error {
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if db.Engine == sqldb.SQLite {
		if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = "+itoa(busyMS)); err != nil {
			return err
		}
		defer conn.ExecContext(context.Background(), "PRAGMA busy_timeout = 15000") //nolint:errcheck
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var n int
	err = tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT 1 FROM pipeline_jobs LIMIT 1) t").Scan(&n)
	_ = tx.Rollback()
	return err
}

func itoa(n int) string {
	const digits = "0123456789"
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{digits[n%10]}, b...)
	}
	return string(b)
}
