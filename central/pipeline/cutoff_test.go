package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A submit the database holds back until its context ends answers what the
// database did: QUEUE_UNAVAILABLE with nothing stored, even though the
// database lets the insert through just after the answer; or, where the
// insert committed before it could be stopped (Postgres: between the cut
// and the end of its backend), the job, created. On SQLite the second
// order is TestSubmitAnswerMatchesCommit's.
//
// On Postgres the cut connection also sends the server a cancel request of
// its own, at a moment no test controls: when it lands before the held
// insert is let through, the insert is cancelled rather than committed, and
// the answer must then be QUEUE_UNAVAILABLE. The second case is tried until
// the insert commits in the window (rarely more than once), and every try,
// either way, must answer what was stored.
func TestSubmitCutOffAnswersWhatWasStored(t *testing.T) {
	cases := []struct {
		name      string
		commitsIn bool // Postgres only: the insert commits before its backend is ended
	}{
		{"let through after the answer", false},
		{"committed before the backend is ended", true},
	}
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if c.commitsIn && db.Engine != sqldb.Postgres {
					t.Skip("SQLite settles before its COMMIT: TestSubmitAnswerMatchesCommit")
				}
				const tries = 8
				for try := 0; try < tries; try++ {
					committed := cutSubmit(t, db, fmt.Sprintf("2026-%02d-%02d", 3+try, i+1), c.commitsIn)
					if committed == c.commitsIn {
						return
					}
				}
				t.Fatalf("in %d tries the held insert never committed between the cut and the end of its backend", tries)
			})
		}
	})
}

// cutSubmit submits a job for asof while its key is held, cuts the submit
// off once its insert waits on the server, lets the insert through (before
// the answer when letIn, after it otherwise), checks that the answer, the
// count of enqueued jobs and a retry agree with what was stored, and
// returns whether the job was stored.
func cutSubmit(t *testing.T, db *sqldb.DB, asof string, letIn bool) bool {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, db, nil)
	f.store.Metrics = NewMetrics(prometheus.NewRegistry(), f.store)
	key := MakeIdempotencyKey("noop", "AAPL", asof)
	release := holdWrites(t, f, asof)
	defer release()
	if letIn {
		db.SetSettleHold(func() {
			release()
			waitFor(t, 5*time.Second, "the held insert to commit or end", func() bool {
				return jobsOfKey(t, db, key) == 1 || !insertOnServer(t, db)
			})
		})
		defer db.SetSettleHold(nil)
	}
	sctx, cancel := cutWhenHeld(t, ctx, db)
	defer cancel()
	out, err := f.store.Submit(sctx, Request{JobType: "noop", Symbol: "AAPL", Asof: asof, RequestedBy: "test"})
	release()
	f.store.Wait()
	time.Sleep(300 * time.Millisecond) // time for a surviving insert to commit

	stored := jobsOfKey(t, db, key)
	var ue *UnavailableError
	switch {
	case stored == 1 && (err != nil || !out.Created):
		t.Fatalf("answer %+v, %v with the job stored; want the stored job, created", out, err)
	case stored == 0 && (!errors.As(err, &ue) || ue.Code != CodeQueueUnavailable):
		t.Fatalf("answer %+v, %v with nothing stored; want %s", out, err, CodeQueueUnavailable)
	case stored > 1:
		t.Fatalf("%d jobs stored for one key", stored)
	}
	if got, want := counterValue(t, f.store.Metrics.Enqueued.WithLabelValues("noop")), float64(stored); got != want {
		t.Fatalf("enqueued counted %v, want %v", got, want)
	}
	again := f.submit(t, "noop", "AAPL", asof)
	if again.Created == (stored == 1) || (stored == 1 && again.JobID != out.JobID) {
		t.Fatalf("the retry: %+v after %+v", again, out)
	}
	return stored == 1
}

// insertOnServer reports whether a pipeline_jobs insert is still running
// or waiting on the server.
func insertOnServer(t *testing.T, db *sqldb.DB) bool {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()
		AND state = 'active' AND query LIKE 'INSERT INTO pipeline_jobs%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// cutWhenHeld returns a context for a submit whose deadline passes once
// the submit's insert waits for the held key on the server (Postgres), so
// the cut always finds the statement there, however slow the machine; on
// SQLite, whose busy wait shows nowhere, after 300 ms.
func cutWhenHeld(t *testing.T, ctx context.Context, db *sqldb.DB) (context.Context, context.CancelFunc) {
	t.Helper()
	if db.Engine != sqldb.Postgres {
		return context.WithTimeout(ctx, 300*time.Millisecond)
	}
	c := &deadlineNow{Context: ctx, done: make(chan struct{})}
	var once sync.Once
	cut := func() { once.Do(func() { close(c.done) }) }
	go func() {
		defer cut()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var n int
			err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()
				AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO pipeline_jobs%'`).Scan(&n)
			if err == nil && n > 0 {
				return
			}
		}
	}()
	return c, cut
}

// deadlineNow is a context whose deadline passes when done is closed.
type deadlineNow struct {
	context.Context
	done chan struct{}
}

func (c *deadlineNow) Done() <-chan struct{} { return c.done }

func (c *deadlineNow) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// holdWrites makes a submit for asof wait until release: on Postgres an
// uncommitted submit of the same key (a unique-index wait, after the
// statement was parsed and sent), on SQLite the write lock of another
// handle (whose busy wait does not heed the context). release may be
// called more than once; the holding submit is rolled back.
func holdWrites(t *testing.T, f *fixture, asof string) (release func()) {
	t.Helper()
	ctx := context.Background()
	db := f.db
	if db.Engine == sqldb.Postgres {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := f.store.Message(Request{JobType: "noop", Symbol: "AAPL", Asof: asof, RequestedBy: "holder"})
		if _, err := f.store.insertQueued(ctx, tx, m, f.store.Now()); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback() }
	}
	other, err := sqldb.Open(ctx, dbURL(t, db), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	done := false
	return func() {
		if !done {
			done = true
			_, _ = conn.ExecContext(ctx, `ROLLBACK`)
			_ = conn.Close()
		}
	}
}

// A submit retried with the same message, whose first try committed, gets
// its own job back as created, not an idempotency conflict with itself;
// another message for the key is a conflict.
func TestSubmitRetriedMessageIsItsOwnJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		m := f.store.Message(Request{JobType: "noop", Symbol: "AAPL", Asof: "2026-03-09", RequestedBy: "test"})
		for try := 1; try <= 2; try++ {
			out, err := f.store.SubmitMessage(ctx, m)
			if err != nil || !out.Created || out.JobID != m.JobID {
				t.Fatalf("try %d: %+v, %v; want job %s created", try, out, err, m.JobID)
			}
		}
		other := f.submit(t, "noop", "AAPL", "2026-03-09")
		if other.Created || other.JobID != m.JobID {
			t.Fatalf("another message for the key: %+v, want the existing job %s", other, m.JobID)
		}
		if n := jobsOfKey(t, db, m.IdempotencyKey); n != 1 {
			t.Fatalf("%d jobs stored, want 1", n)
		}
	})
}
