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

// A submit answers what its transaction did, however the caller's context
// ending and the commit interleave: QUEUE_UNAVAILABLE only when nothing was
// written (the client's retry then creates the job), the job when it was
// committed (the retry then finds it). The transaction is held at a point
// while the context ends, so each order is taken every run.
func TestSubmitAnswerMatchesCommit(t *testing.T) {
	cases := []struct {
		name    string
		at      holdPoint
		created bool // answered with the job, which is stored
	}{
		{"context ends before the commit", holdBeforeCommit, false},
		{"context ends during the commit", holdCommitting, true},
	}
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		if db.Engine != sqldb.SQLite {
			t.Skip("a Postgres submit is one statement, settled after the cut: TestSubmitCutOffAnswersWhatWasStored")
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				f := newFixture(t, db, nil)
				f.store.Metrics = NewMetrics(prometheus.NewRegistry(), f.store)
				asof := fmt.Sprintf("2026-02-%02d", i+1)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				answered, waiting := make(chan struct{}), make(chan struct{})
				f.store.locked.hold = func(p holdPoint) {
					switch p {
					case c.at:
						cancel()
						select {
						case <-answered:
						case <-waiting:
						}
					case holdAwaitCommit:
						close(waiting)
					}
				}
				out, err := f.store.Submit(ctx, Request{JobType: "noop", Symbol: "AAPL", Asof: asof, RequestedBy: "test"})
				close(answered)
				f.store.Wait()
				f.store.locked.hold = nil

				var ue *UnavailableError
				switch {
				case c.created && (err != nil || !out.Created):
					t.Fatalf("answer %+v, %v; want the job created", out, err)
				case !c.created && (!errors.As(err, &ue) || ue.Code != CodeQueueUnavailable):
					t.Fatalf("answer %+v, %v; want %s", out, err, CodeQueueUnavailable)
				}
				want := 0
				if c.created {
					want = 1
				}
				if n := jobsOfKey(t, db, MakeIdempotencyKey("noop", "AAPL", asof)); n != want {
					t.Fatalf("%d jobs stored, want %d (answer %+v, %v)", n, want, out, err)
				}
				if n := counterValue(t, f.store.Metrics.Enqueued.WithLabelValues("noop")); n != float64(want) {
					t.Fatalf("enqueued counted %v, want %d", n, want)
				}
				again := f.submit(t, "noop", "AAPL", asof)
				if again.Created == c.created || (c.created && again.JobID != out.JobID) {
					t.Fatalf("the retry: %+v after %+v", again, out)
				}
			})
		}
	})
}

func jobsOfKey(t testing.TB, db *sqldb.DB, key string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), db.Rebind("SELECT COUNT(*) FROM pipeline_jobs WHERE idempotency_key = ?"), key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The write-lock probe gives its pool connection back with the busy timeout
// the connection had, whatever that was, not with a value of its own.
func TestPingWriteRestoresBusyTimeout(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		if db.Engine != sqldb.SQLite {
			t.Skip("busy_timeout is SQLite's")
		}
		ctx := context.Background()
		// The writer and one pool connection (the idle ones closed first):
		// the probe takes the one set here.
		db.DB.SetMaxIdleConns(0)
		db.DB.SetMaxIdleConns(1)
		db.DB.SetMaxOpenConns(2)
		busyTimeout := func(set int) int {
			conn, err := db.DB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if set > 0 {
				if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", set)); err != nil {
					t.Fatal(err)
				}
			}
			var ms int
			if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
				t.Fatal(err)
			}
			return ms
		}
		busyTimeout(4321)
		if err := pingWrite(ctx, db, 250); err != nil {
			t.Fatal(err)
		}
		if ms := busyTimeout(0); ms != 4321 {
			t.Fatalf("busy_timeout %dms after the probe, want 4321ms", ms)
		}
	})
}
