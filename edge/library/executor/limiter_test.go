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

// TestIOLimiterClockStepBack: the bucket is kept in wall-clock ms, and a
// clock stepped back after a booking (NTP correcting a clock that ran
// ahead, an RTC wrong at boot) must not make every later reservation wait
// for the size of the step. The booking after the step waits only for the
// backlog that was ahead of it, on the new clock; a clock that moved
// forward or not at all paces as before.
func TestIOLimiterClockStepBack(t *testing.T) {
	const t0 = int64(1_700_000_000_000)
	cases := []struct {
		name      string
		booked    int64 // bytes booked at t0 (1000 bytes/s)
		step      time.Duration
		wantWait  time.Duration // of a 500-byte booking after the step
		wantAhead int64         // next_available_at_ms - now after it
	}{
		{"no step: waits for the first booking", 500, 0, 500 * time.Millisecond, 1000},
		{"forward an hour: the bucket is free", 500, time.Hour, 0, 500},
		{"back 10 ms", 500, -10 * time.Millisecond, 500 * time.Millisecond, 1000},
		{"back an hour: the backlog is kept, not the step", 500, -time.Hour, 500 * time.Millisecond, 1000},
		{"back a year (RTC wrong at boot)", 500, -365 * 24 * time.Hour, 500 * time.Millisecond, 1000},
		{"back an hour behind a minute of backlog", 60_000, -time.Hour, 60 * time.Second, 60_500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			ctx := context.Background()
			now := time.UnixMilli(t0)
			e.st.Now = func() time.Time { return now }
			e.x.IOBytesPerSec = 1000
			if wait, err := executor.ReserveIOWait(ctx, e.x, executor.ThumbnailIOBucket, c.booked); err != nil || wait != 0 {
				t.Fatalf("first booking: wait %v, %v", wait, err)
			}
			now = now.Add(c.step)
			wait, err := executor.ReserveIOWait(ctx, e.x, executor.ThumbnailIOBucket, 500)
			if err != nil {
				t.Fatal(err)
			}
			next, upd, _ := bucketRow(t, e)
			if wait != c.wantWait || next-now.UnixMilli() != c.wantAhead || upd != now.UnixMilli() {
				t.Fatalf("after a step of %v: wait %v, next now%+d, updated now%+d; want wait %v, next now%+d, updated now",
					c.step, wait, next-now.UnixMilli(), upd-now.UnixMilli(), c.wantWait, c.wantAhead)
			}
			// Later bookings pace on the new clock.
			if wait, err := executor.ReserveIOWait(ctx, e.x, executor.ThumbnailIOBucket, 500); err != nil ||
				wait != time.Duration(c.wantAhead)*time.Millisecond {
				t.Fatalf("next booking: wait %v, %v; want %dms", wait, err, c.wantAhead)
			}
		})
	}
}
