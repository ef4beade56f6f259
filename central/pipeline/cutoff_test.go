package pipeline

import (
	"context"
	"errors"
	"fmt"
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
				ctx := context.Background()
				f := newFixture(t, db, nil)
				f.store.Metrics = NewMetrics(prometheus.NewRegistry(), f.store)
				asof := fmt.Sprintf("2026-03-%02d", i+1)
				key := MakeIdempotencyKey("noop", "AAPL", asof)
				release := holdWrites(t, f, asof)
				defer release()
				if c.commitsIn {
					db.SetSettleHold(func() {
						release()
						waitFor(t, 5*time.Second, "the held insert to commit", func() bool { return jobsOfKey(t, db, key) == 1 })
					})
					defer db.SetSettleHold(nil)
				}
				sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				out, err := f.store.Submit(sctx, Request{JobType: "noop", Symbol: "AAPL", Asof: asof, RequestedBy: "test"})
				release()
				f.store.Wait()
				time.Sleep(300 * time.Millisecond) // time for a surviving insert to commit

				stored := jobsOfKey(t, db, key)
				var ue *UnavailableError
				switch {
				case c.commitsIn && (err != nil || !out.Created || stored != 1):
					t.Fatalf("answer %+v, %v with %d jobs stored; want the stored job, created", out, err, stored)
				case !c.commitsIn && (!errors.As(err, &ue) || ue.Code != CodeQueueUnavailable || stored != 0):
					t.Fatalf("answer %+v, %v with %d jobs stored; want %s and nothing stored", out, err, stored, CodeQueueUnavailable)
				}
				if got, want := counterValue(t, f.store.Metrics.Enqueued.WithLabelValues("noop")), float64(stored); got != want {
					t.Fatalf("enqueued counted %v, want %v", got, want)
				}
				again := f.submit(t, "noop", "AAPL", asof)
				if again.Created == c.commitsIn || (c.commitsIn && again.JobID != out.JobID) {
					t.Fatalf("the retry: %+v after %+v", again, out)
				}
			})
		}
	})
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
		if _, err := f.store.insertQueued(ctx, tx, m, true); err != nil {
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
