package executor_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/executor"
)

// bucketRow reads the thumbnail I/O bucket; ok is false when it is absent.
func bucketRow(t *testing.T, e *env) (next, updated int64, ok bool) {
	t.Helper()
	err := e.st.DB.QueryRow(`SELECT next_available_at_ms, updated_at FROM io_rate_limits WHERE bucket_key = ?`,
		executor.ThumbnailIOBucket).Scan(&next, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return next, updated, true
}

// TestIOLimiterPacing drives the §7.4 limiter on a fixed store clock at
// 1000 bytes/s: the bootstrap path inserts the missing bucket, each 500-byte
// reservation books 500 ms, the second one waits for its slot, a cancelled
// wait returns ctx.Err(), and updated_at follows the clock.
func TestIOLimiterPacing(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	e.st.Now = func() time.Time { return now }
	t0 := now.UnixMilli()

	// Unpaced: nothing is booked, no row is written.
	if err := e.x.ReserveIO(ctx, executor.ThumbnailIOBucket, 500); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := bucketRow(t, e); ok {
		t.Fatal("unpaced reservation wrote a bucket row")
	}

	e.x.IOBytesPerSec = 1000
	steps := []struct {
		name              string
		wantWait          time.Duration
		wantNext, wantUpd int64
	}{
		{"bootstrap inserts the bucket; first slot starts now", 0, t0 + 500, t0},
		{"second reservation waits for the first to pass", 500 * time.Millisecond, t0 + 1000, t0},
	}
	for _, s := range steps {
		wait, err := executor.ReserveIOWait(ctx, e.x, executor.ThumbnailIOBucket, 500)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		next, upd, ok := bucketRow(t, e)
		if !ok || wait != s.wantWait || next != s.wantNext || upd != s.wantUpd {
			t.Fatalf("%s: wait %v next %d (now%+d) updated %d, want wait %v next now%+d updated now%+d",
				s.name, wait, next, next-t0, upd, s.wantWait, s.wantNext-t0, s.wantUpd-t0)
		}
	}

	// The clock moves on 1 s: the bucket is free again, so ReserveIO books
	// [now, now+500) and returns at once; the next booking starts at
	// now+500 and ReserveIO really sleeps for it.
	now = now.Add(time.Second)
	t1 := now.UnixMilli()
	if err := e.x.ReserveIO(ctx, executor.ThumbnailIOBucket, 500); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.x.ReserveIO(ctx, executor.ThumbnailIOBucket, 500); err != nil {
		t.Fatal(err)
	}
	if slept := time.Since(start); slept < 500*time.Millisecond {
		t.Fatalf("second reservation returned after %v, before its slot", slept)
	}
	if next, upd, _ := bucketRow(t, e); next != t1+1000 || upd != t1 {
		t.Fatalf("next now%+d updated now%+d, want now+1000 and now", next-t1, upd-t1)
	}

	// A cancelled wait returns ctx.Err(); the booking stays. The context also
	// covers the booking's write transaction, so it is cancelled only once the
	// booking is committed; a long booking ahead keeps the wait far beyond any
	// scheduling stall, so the cancel always lands inside the wait.
	if _, err := executor.ReserveIOWait(ctx, e.x, executor.ThumbnailIOBucket, 60_000); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.x.ReserveIO(cctx, executor.ThumbnailIOBucket, 500) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		next, _, _ := bucketRow(t, e)
		if next == t1+61_500 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("reservation returned %v before it was cancelled (next now%+d)", err, next-t1)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("booking never committed: next now%+d, want now+61500", next-t1)
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled wait: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled wait did not return")
	}
	if next, _, _ := bucketRow(t, e); next != t1+61_500 {
		t.Fatalf("next now%+d after the cancelled wait, want now+61500", next-t1)
	}
}
