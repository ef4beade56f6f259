package pipeline

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
// fast while it is still held.
//
// The answer must say what the transaction did: a submit answered
// QUEUE_UNAVAILABLE whose transaction committed anyway would leave a job
// its client believes was never created (the retry then finds it as
// someone else's, created: false). So the transaction and the caller
// settle one state before the COMMIT (see run): an abandoned transaction
// rolls back, and a caller whose context ends once the COMMIT is under way
// waits for it. That wait is short: the transaction already holds the
// write lock (BEGIN IMMEDIATE), and a WAL commit then waits for no one.
type lockGuard struct {
	mu      sync.Mutex
	suspect time.Time
	wg      sync.WaitGroup
	// hold, when set (tests), runs at each holdPoint of a guarded submit,
	// so a test can end the context at that point.
	hold func(holdPoint)
}

// holdPoint is a point of a guarded submit where lockGuard.hold runs.
type holdPoint int

const (
	holdBeforeCommit holdPoint = iota // the writes are done, the commit not yet settled
	holdCommitting                    // settled to commit, COMMIT not yet run
	holdAwaitCommit                   // the context ended; the caller waits for the COMMIT
)

func (g *lockGuard) at(p holdPoint) {
	if g.hold != nil {
		g.hold(p)
	}
}

// The states a guarded submit settles once, before its COMMIT.
const (
	submitOpen       int32 = iota
	submitAbandoned        // the caller was answered: the transaction rolls back
	submitCommitting       // the transaction commits: the caller gets its outcome
)

// errAbandoned rolls back a transaction whose caller was answered first.
var errAbandoned = errors.New("pipeline: submit abandoned: its caller was answered before it committed")

// suspectFor is how long after a lock timeout submits probe first.
const suspectFor = 5 * time.Second

func (g *lockGuard) trip() {
	g.mu.Lock()
	g.suspect = time.Now().Add(suspectFor)
	g.mu.Unlock()
}

// run runs fn, a transaction, within ctx. fn must call commit as the last
// step of its transaction, after its writes: an error from commit means
// the caller has been answered, and fn must return it so the transaction
// rolls back.
func (g *lockGuard) run(ctx context.Context, db *sqldb.DB, fn func(commit func() error) error) error {
	free := func() error { return nil }
	if db.Engine != sqldb.SQLite {
		return fn(free)
	}
	if _, ok := ctx.Deadline(); !ok {
		return fn(free)
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
			return &UnavailableError{Code: CodeQueueUnavailable, Reason: sqldb.ReasonLocked, Err: err}
		}
	}
	var state atomic.Int32
	commit := func() error {
		g.at(holdBeforeCommit)
		// A transaction run again (DB.Tx retries) finds the state it settled.
		if !state.CompareAndSwap(submitOpen, submitCommitting) && state.Load() != submitCommitting {
			return errAbandoned
		}
		g.at(holdCommitting)
		return nil
	}
	done := make(chan error, 1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		done <- fn(commit)
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		if state.CompareAndSwap(submitOpen, submitAbandoned) {
			g.trip()
			return &UnavailableError{Code: CodeQueueUnavailable, Reason: sqldb.ReasonTimeout, Err: ctx.Err()}
		}
		g.at(holdAwaitCommit)
		err = <-done
	}
	if sqldb.OutageReason(err) == sqldb.ReasonLocked {
		g.trip()
	}
	return err
}

// Wait waits for submits the guard abandoned to their contexts.
func (s *Store) Wait() { s.locked.wg.Wait() }

// pingWrite takes and releases the write lock on a pool connection; on
// SQLite with a busy timeout of busyMS instead of the connection's, which
// it restores after.
func pingWrite(ctx context.Context, db *sqldb.DB, busyMS int) error {
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if db.Engine == sqldb.SQLite {
		var prev int
		if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&prev); err != nil {
			return fmt.Errorf("read busy_timeout: %w", err)
		}
		if _, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.Itoa(busyMS)); err != nil {
			return fmt.Errorf("set busy_timeout: %w", err)
		}
		defer func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA busy_timeout = "+strconv.Itoa(prev)); err != nil {
				// Back in the pool with the short timeout, the connection
				// would fail the reads of a busy moment: close it instead.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
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
