package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// §4.1 create_queued and get_by_idempotency on their own: while the key's
// job is queued, running or succeeded, create_queued returns that job
// (created: false) and get_by_idempotency names it; once it failed or was
// dead-lettered the key has no active job, and create_queued makes a new
// one.
func TestCreateQueuedReturnsTheActiveJob(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		f.store.MaxAttempts = 1
		for i, tt := range []struct {
			name string
			// leave takes the key's job, created and enqueued, to its status.
			leave    func(t *testing.T, j *Job)
			status   string
			existing bool
		}{
			{"queued", nil, StatusQueued, true},
			{"running", func(*testing.T, *Job) {}, StatusRunning, true},
			{"succeeded", func(t *testing.T, j *Job) {
				if err := f.store.SetSucceeded(ctx, j, time.Now(), "s3://b/k"); err != nil {
					t.Fatal(err)
				}
			}, StatusSucceeded, true},
			{"failed", func(t *testing.T, j *Job) {
				if err := f.store.SetFailed(ctx, j, time.Now(), Fail(CodeQualityFailed, "bad data"), j.Attempt); err != nil {
					t.Fatal(err)
				}
			}, StatusFailed, false},
			{"dead_letter", func(t *testing.T, j *Job) {
				if out, err := f.store.Fail(ctx, j, Fail(CodeStorageWriteFailed, "disk full")); err != nil || out != OutcomeDeadLetter {
					t.Fatalf("fail: %v %v", out, err)
				}
			}, StatusDeadLetter, false},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := Request{JobType: "noop", Symbol: "AAPL", Asof: fmt.Sprintf("2026-01-%02d", i+1), RequestedBy: "test"}
				first := f.store.Message(r)
				if c, err := f.store.CreateQueued(ctx, first); err != nil || !c.Created || c.JobID != first.JobID {
					t.Fatalf("create_queued: %+v %v", c, err)
				}
				if tt.leave != nil {
					if _, err := f.store.Enqueue(ctx, first); err != nil {
						t.Fatal(err)
					}
					jobs, err := f.store.Claim(ctx, "w1", 1, time.Minute)
					if err != nil || len(jobs) != 1 || jobs[0].ID != first.JobID {
						t.Fatalf("claim: %v %d", err, len(jobs))
					}
					tt.leave(t, jobs[0])
				}
				if s := f.get(t, first.JobID).Status; s != tt.status {
					t.Fatalf("status %s, want %s", s, tt.status)
				}
				id, found, err := f.store.GetByIdempotency(ctx, first.IdempotencyKey)
				if err != nil || found != tt.existing || (found && id != first.JobID) {
					t.Fatalf("get_by_idempotency: %q %v %v", id, found, err)
				}
				again := f.store.Message(r)
				c, err := f.store.CreateQueued(ctx, again)
				if err != nil {
					t.Fatal(err)
				}
				if tt.existing && (c.Created || c.JobID != first.JobID || c.Status != tt.status) {
					t.Fatalf("create_queued of an active key: %+v, want %s created:false", c, first.JobID)
				}
				if !tt.existing && (!c.Created || c.JobID != again.JobID) {
					t.Fatalf("create_queued of a free key: %+v, want a new job %s", c, again.JobID)
				}
			})
		}
	})
}

// §3.1 enqueue: success is {message_id, visible_at}; a message out of the
// data contract is INVALID_MESSAGE, one over the limit MESSAGE_TOO_LARGE
// (both final), a database that cannot be reached QUEUE_UNAVAILABLE
// (retryable).
func TestEnqueueAnswers(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		created := func(t *testing.T, sym string) JobMessage {
			t.Helper()
			m := f.store.Message(Request{JobType: "noop", Symbol: sym, Asof: "2026-01-02", RequestedBy: "test"})
			if _, err := f.store.CreateQueued(ctx, m); err != nil {
				t.Fatal(err)
			}
			return m
		}
		for _, tt := range []struct {
			name string
			// enqueue returns the store to enqueue on and the message.
			enqueue func(t *testing.T) (*Store, JobMessage)
			code    string
		}{
			{"created job", func(t *testing.T) (*Store, JobMessage) { return f.store, created(t, "OK") }, ""},
			{"enqueued twice", func(t *testing.T) (*Store, JobMessage) {
				m := created(t, "TWICE")
				if _, err := f.store.Enqueue(ctx, m); err != nil {
					t.Fatal(err)
				}
				return f.store, m
			}, CodeInvalidMessage},
			{"invalid", func(t *testing.T) (*Store, JobMessage) {
				m := created(t, "INVALID")
				m.Symbol = "INVALID " // no longer its key's, nor the contract's
				return f.store, m
			}, CodeInvalidMessage},
			{"too large", func(t *testing.T) (*Store, JobMessage) {
				m := f.store.Message(Request{JobType: "noop", Symbol: strings.Repeat("x", MaxMessageBytes), Asof: "2026-01-02", RequestedBy: "test"})
				return f.store, m
			}, CodeMessageTooLarge},
			{"database unreachable", func(t *testing.T) (*Store, JobMessage) {
				m := created(t, "DOWN")
				h, err := sqldb.Open(ctx, dbURL(t, db), "")
				if err != nil {
					t.Fatal(err)
				}
				s := NewStore(h, nil)
				_ = h.Close()
				return s, m
			}, CodeQueueUnavailable},
		} {
			t.Run(tt.name, func(t *testing.T) {
				s, m := tt.enqueue(t)
				res, err := s.Enqueue(ctx, m)
				// A producer retries an *UnavailableError, and nothing else.
				var ue *UnavailableError
				retryable := errors.As(err, &ue)
				code := ErrorCode(err)
				if retryable {
					code = ue.Code
				}
				if code != tt.code || (err != nil && code == "") {
					t.Fatalf("enqueue: %v, want %q", err, tt.code)
				}
				if retryable != (tt.code == CodeQueueUnavailable) {
					t.Fatalf("%s: retryable %v", tt.code, retryable)
				}
				if tt.code != "" {
					return
				}
				if res.MessageID != m.JobID || res.VisibleAt.IsZero() {
					t.Fatalf("result %+v, want message_id %s and visible_at", res, m.JobID)
				}
				r := f.get(t, m.JobID)
				if r.VisibleAt == nil || !r.VisibleAt.Equal(res.VisibleAt.Truncate(time.Microsecond)) {
					t.Fatalf("visible_at %v, answered %v", r.VisibleAt, res.VisibleAt)
				}
			})
		}
	})
}

// §5.2: the worker validates a message against the data contract before
// it runs anything; one that violates it (written by a producer that did
// not check it) fails for good with INVALID_MESSAGE at its attempt, logged
// with the alert, and no stage runs.
func TestWorkerRefusesAnInvalidMessage(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		var runs atomic.Int64
		f.register(t, "prices", stage("storage", "s3://b/k", nil, &runs))
		id, now := NewJobID(), sqldb.Micros(time.Now())
		if _, err := db.ExecContext(ctx, db.Rebind(`INSERT INTO pipeline_jobs (job_id, idempotency_key, job_type, symbol, asof, requested_by,
			status, max_attempts, visible_at, created_at, updated_at) VALUES (?, ?, 'prices', ' AAPL', '2026-01-02', 'sql', 'queued', 5, ?, ?, ?)`),
			id, MakeIdempotencyKey("prices", " AAPL", "2026-01-02"), now, now, now); err != nil {
			t.Fatal(err)
		}
		f.runUntil(t, time.Second, "failure", func() bool { return f.get(t, id).Status == StatusFailed })
		r := f.get(t, id)
		if r.LastError == nil || r.LastError.ErrorCode != CodeInvalidMessage || r.LastError.Attempt != 1 || r.Attempts != 1 {
			t.Fatalf("record %+v %+v", r, r.LastError)
		}
		if runs.Load() != 0 {
			t.Fatal("a stage ran for an invalid message")
		}
		if !strings.Contains(f.logs.String(), `"alert":true`) || !strings.Contains(f.logs.String(), `"error_code":"INVALID_MESSAGE"`) {
			t.Fatalf("no alert logged:\n%s", f.logs.String())
		}
	})
}
