package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// §4.2: every failure carries an error_code of the enum and its attempt. A
// Go stage that fails with a *JobError without a code, or with a code
// outside the enum, is recorded like any other error that is not a contract
// failure (STAGE_UNAVAILABLE, its message kept), never with an empty or
// made-up code; and the repo refuses to write such a failure directly.
func TestFailureCodeIsContractCode(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		for _, tt := range []struct {
			name string
			err  *JobError
		}{
			{"empty code", &JobError{Message: "went wrong"}},
			{"unknown code", &JobError{Code: "OOPS", Message: "went wrong"}},
			{"enqueue-path code", &JobError{Code: CodeIdempotencyConflict, Message: "went wrong"}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				f := newFixture(t, db, nil)
				f.store.MaxAttempts = 1
				f.register(t, "prices", stage("storage", nil, tt.err, nil))
				c := f.submit(t, "prices", "AAPL", "2026-01-02")
				f.runUntil(t, time.Second, "a terminal status", func() bool {
					s := f.get(t, c.JobID).Status
					return s == StatusFailed || s == StatusDeadLetter
				})
				r := f.get(t, c.JobID)
				if r.LastError == nil || r.LastError.ErrorCode != CodeStageUnavailable || r.LastError.Attempt != 1 ||
					!contains(r.LastError.ErrorMessage, "went wrong") {
					t.Fatalf("last_error %+v", r.LastError)
				}
			})
		}
		t.Run("repo writes", func(t *testing.T) {
			ctx := context.Background()
			f := newFixture(t, db, nil)
			c := f.submit(t, "noop", "MSFT", "2026-01-02")
			jobs, err := f.store.Claim(ctx, "w1", 1, time.Minute)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claim: %v %d", err, len(jobs))
			}
			j := jobs[0]
			for _, bad := range []struct {
				f       *JobError
				attempt int
			}{
				{&JobError{Message: "x"}, 1},
				{&JobError{Code: "OOPS", Message: "x"}, 1},
				{Fail(CodeQualityFailed, "x"), 0},
				{nil, 1},
			} {
				if err := f.store.SetFailed(ctx, j, time.Now(), bad.f, bad.attempt); !errors.Is(err, ErrBadFailure) {
					t.Fatalf("SetFailed(%+v, %d): %v", bad.f, bad.attempt, err)
				}
				if err := f.store.SetDeadLetter(ctx, j, time.Now(), bad.f, bad.attempt); !errors.Is(err, ErrBadFailure) {
					t.Fatalf("SetDeadLetter(%+v, %d): %v", bad.f, bad.attempt, err)
				}
				if bad.attempt != j.Attempt {
					continue // Fail records the job's own attempt
				}
				if _, err := f.store.Fail(ctx, j, bad.f); !errors.Is(err, ErrBadFailure) {
					t.Fatalf("Fail(%+v): %v", bad.f, err)
				}
			}
			if r := f.get(t, c.JobID); r.Status != StatusRunning || r.LastError != nil {
				t.Fatalf("record after refused writes: %+v %+v", r, r.LastError)
			}
			if err := f.store.SetFailed(ctx, j, time.Now(), Fail(CodeQualityFailed, "bad data"), j.Attempt); err != nil {
				t.Fatal(err)
			}
			if r := f.get(t, c.JobID); r.Status != StatusFailed || r.LastError == nil || r.LastError.ErrorCode != CodeQualityFailed {
				t.Fatalf("record %+v %+v", r, r.LastError)
			}
		})
	})
}
