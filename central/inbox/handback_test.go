package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestHandedBackJobIsNoLongerHeld: once a worker's job went back to queued
// (a retryable failure, a release) or finished, the row still carries the
// worker's claim_version until the next claim, so the version alone does
// not fence it. Nothing the worker writes with that Job may change the row
// or add an event: a queued -> claimed "advance" would leave a claimed row
// without a lease that no reclaim ever finds, a batch success would finish
// a job nobody claimed, and a progress event would follow the job's
// requeue or its terminal event.
func TestHandedBackJobIsNoLongerHeld(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		req := addRequester(t, db)
		id := enqueue(t, s, req, 1)[0]
		js, err := s.Claim(ctx, "A", 1, time.Minute)
		if err != nil || len(js) != 1 {
			t.Fatalf("claim: %v %d", err, len(js))
		}
		j := js[0]
		if err := s.Release(ctx, j); err != nil {
			t.Fatal(err)
		}
		before := len(events(t, db, id))
		refused := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, lease.ErrStale) && !errors.Is(err, lease.ErrInvalidTransition) {
				t.Errorf("%s by a worker that handed its job back: %v", what, err)
			}
		}
		refused("advance to claimed", s.Advance(ctx, j, "claimed"))
		_, err = s.SucceedMany(ctx, []*inbox.Job{j}, nil)
		refused("batch success", err)
		refused("progress", s.Progress(ctx, j, 50))
		if got := statusOf(t, s, id); got != "queued" {
			t.Fatalf("status %s, want queued", got)
		}
		if n := len(events(t, db, id)); n != before {
			t.Fatalf("%d events written for a job the worker no longer holds", n-before)
		}

		// The next claim still gets it, and after its success a late
		// progress report adds nothing after the terminal event.
		js, err = s.Claim(ctx, "B", 1, time.Minute)
		if err != nil || len(js) != 1 {
			t.Fatalf("claim again: %v %d", err, len(js))
		}
		j = js[0]
		for _, st := range []string{"fetching", "processing", "uploading"} {
			if err := s.Advance(ctx, j, st); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Succeed(ctx, j, nil); err != nil {
			t.Fatal(err)
		}
		before = len(events(t, db, id))
		refused("progress after success", s.Progress(ctx, j, 90))
		if n := len(events(t, db, id)); n != before {
			t.Fatalf("%d events written after the terminal event", n-before)
		}
	})
}
