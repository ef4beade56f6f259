package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestPermanentOnLastAttemptDeadLetters: contract §5 — when attempt_count
// >= max_attempts the job ends in dead_letter, whatever the class; a
// permanent error on the last attempt goes failed -> dead_letter with both
// transitions recorded (each carrying the error), while a permanent error
// with attempts left still ends in failed.
func TestPermanentOnLastAttemptDeadLetters(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		pol := inbox.DefaultPolicy()
		pol.MaxAttempts = 2
		s := inbox.New(db, testKeys(t), pol)
		req := addRequester(t, db)
		id := enqueue(t, s, req, 1)[0]
		claim := func(attempt int) *inbox.Job {
			t.Helper()
			js, err := s.Claim(ctx, "w", 1, time.Minute)
			if err != nil || len(js) != 1 || js[0].ID != id || js[0].Attempt != attempt {
				t.Fatalf("claim: %v %d", err, len(js))
			}
			return js[0]
		}
		// Attempt 1 of 2: retryable -> queued, made due at once.
		j := claim(1)
		if st, err := s.Fail(ctx, j, inbox.JobError{Class: inbox.Retryable, Code: "storage_503", Message: "busy"}); err != nil || st != "queued" {
			t.Fatalf("attempt 1: %s %v", st, err)
		}
		if _, err := db.ExecContext(ctx, db.Rebind(`UPDATE inbox_jobs SET next_attempt_at = 0 WHERE id = ?`), id); err != nil {
			t.Fatal(err)
		}
		// Attempt 2 of 2: permanent -> failed -> dead_letter.
		j = claim(2)
		st, err := s.Fail(ctx, j, inbox.JobError{Class: inbox.Permanent, Code: "invalid_media", Message: "no audio stream"})
		if err != nil || st != "dead_letter" {
			t.Fatalf("permanent on the last attempt: %s %v, want dead_letter", st, err)
		}
		if got := statusOf(t, s, id); got != "dead_letter" {
			t.Fatalf("stored status %s", got)
		}
		evs := events(t, db, id)
		last2 := evs[len(evs)-2:]
		for i, want := range [][2]string{{"claimed", "failed"}, {"failed", "dead_letter"}} {
			var p inbox.Event
			if err := json.Unmarshal([]byte(last2[i].Payload), &p); err != nil {
				t.Fatal(err)
			}
			if p.PreviousStatus != want[0] || p.Status != want[1] || p.Error == nil || p.Error.Code != "invalid_media" || p.AttemptCount != 2 {
				t.Fatalf("event %d: %s, want %s -> %s with the error", i, last2[i].Payload, want[0], want[1])
			}
		}

		// A permanent error with attempts left still ends in failed.
		id2 := enqueue(t, s, req, 1)[0]
		js, err := s.Claim(ctx, "w", 1, time.Minute)
		if err != nil || len(js) != 1 || js[0].ID != id2 {
			t.Fatalf("claim 2: %v", err)
		}
		if st, err := s.Fail(ctx, js[0], inbox.JobError{Class: inbox.Permanent, Code: "invalid_media", Message: "x"}); err != nil || st != "failed" {
			t.Fatalf("permanent with attempts left: %s %v", st, err)
		}
	})
}

// TestFailedToQueuedGuardInMovePath: the §3 guard "failed -> queued only
// while attempt_count < max_attempts" is enforced by the store's move path
// itself, not only by the retry policy: a direct move is rejected with a
// typed error naming both states, and nothing is written.
func TestFailedToQueuedGuardInMovePath(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxAttempts int
		allowed     bool
	}{
		{"attempts left", 2, true},
		{"budget spent", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachEngine(t, func(t *testing.T, db *sqldb.DB) {
				ctx := context.Background()
				s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
				req := addRequester(t, db)
				nj := newJob(req, true)
				nj.MaxAttempts = tc.maxAttempts
				if err := s.Enqueue(ctx, nj); err != nil {
					t.Fatal(err)
				}
				js, err := s.Claim(ctx, "w", 1, time.Minute)
				if err != nil || len(js) != 1 || js[0].ID != nj.ID {
					t.Fatalf("claim: %v", err)
				}
				j := js[0]
				if err := s.MoveForTest(ctx, j, "failed"); err != nil {
					t.Fatalf("claimed -> failed: %v", err)
				}
				before := len(events(t, db, nj.ID))
				err = s.MoveForTest(ctx, j, "queued")
				if tc.allowed {
					if err != nil || statusOf(t, s, nj.ID) != "queued" {
						t.Fatalf("failed -> queued with attempts left: %v", err)
					}
					return
				}
				var te *lease.TransitionError
				if !errors.As(err, &te) || !errors.Is(err, lease.ErrInvalidTransition) ||
					!strings.Contains(err.Error(), "failed -> queued") || !strings.Contains(err.Error(), "attempt_count 1") {
					t.Fatalf("failed -> queued with the budget spent: %v", err)
				}
				if st := statusOf(t, s, nj.ID); st != "failed" || len(events(t, db, nj.ID)) != before {
					t.Fatalf("rejected move wrote something: status %s", st)
				}
				// The move the contract prescribes instead is allowed.
				if err := s.MoveForTest(ctx, j, "dead_letter"); err != nil {
					t.Fatalf("failed -> dead_letter: %v", err)
				}
			})
		})
	}
}
