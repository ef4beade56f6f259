package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// ErrStalled: an attempt made no progress (no advancing ffmpeg progress
// report, no bytes fetched or uploaded) for the stall timeout. The runner
// stops renewing the job's lease and the attempt is retried with backoff.
var ErrStalled = errors.New("no progress within the stall timeout")

// watchdog is an attempt's progress clock. Progress (ffmpeg's -progress
// reports that advanced, bytes moved to or from storage, a refresh wait
// still in its bounded window) touches it; the heartbeat renews the lease
// only while it is fresh, and watch cancels the work once it is not. So a
// hung ffmpeg or a storage stream that stopped moving gives its job up
// instead of holding it forever under a timer-driven heartbeat. A nil
// *watchdog ignores touches and never stalls.
//
// Progress is kept as an offset from start, a reading of time.Now that
// carries the monotonic clock: differences of such readings ignore
// wall-clock steps, which would otherwise stall every running attempt
// (a step forward) or let a hung one keep its lease (a step back).
// time.Unix(0, n) has no monotonic reading, so storing Unix nanoseconds
// would measure on the wall clock.
type watchdog struct {
	timeout time.Duration
	// every is how often watch looks: at most the heartbeat interval, so
	// that a stall cancels the work before the lease it stopped renewing
	// runs out (a TTL after the last renewal, at least two heartbeat
	// intervals after the stall) and the attempt is recorded stalled
	// rather than abandoned as a lost lease.
	every time.Duration
	now   func() time.Time
	start time.Time
	last  atomic.Int64 // nanoseconds from start to the last progress
	stall atomic.Bool  // latched once the timeout passed
	held  atomic.Int32 // requests in flight that count as progress (see hold)
}

// newWatchdog returns a watchdog for an attempt whose lease is renewed
// every heartbeat.
func newWatchdog(timeout, heartbeat time.Duration) *watchdog {
	w := newWatchdogClock(timeout, time.Now)
	w.every = min(w.every, heartbeat)
	return w
}

func newWatchdogClock(timeout time.Duration, now func() time.Time) *watchdog {
	return &watchdog{timeout: timeout, every: timeout / 4, now: now, start: now()}
}

// touch records progress now.
func (w *watchdog) touch() {
	if w != nil {
		w.last.Store(int64(w.now().Sub(w.start)))
	}
}

// hold counts the time until the returned function is called as progress:
// for a request that moves no bytes the runner can see while the server
// works (a server-side copy), which must be bounded by a deadline of its
// own instead.
func (w *watchdog) hold() (release func()) {
	if w == nil {
		return func() {}
	}
	w.held.Add(1)
	return func() {
		w.touch()
		w.held.Add(-1)
	}
}

// lastProgress keeps start's monotonic reading (Add preserves it).
func (w *watchdog) lastProgress() time.Time { return w.start.Add(time.Duration(w.last.Load())) }

// stalled reports (and latches) that nothing advanced for the timeout.
func (w *watchdog) stalled() bool {
	if w == nil {
		return false
	}
	if w.stall.Load() {
		return true
	}
	if w.held.Load() > 0 {
		w.touch()
		return false
	}
	if w.now().Sub(w.lastProgress()) > w.timeout {
		w.stall.Store(true)
		return true
	}
	return false
}

// watch checks the clock a few times per timeout, and at least once per
// heartbeat, and cancels the work with ErrStalled once it has stalled. It
// returns when ctx ends.
func (w *watchdog) watch(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(max(w.every, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.stalled() {
				cancel(fmt.Errorf("%w (%s)", ErrStalled, w.timeout))
				return
			}
		}
	}
}

// supervise runs work under the watchdog: work's context is cancelled with
// ErrStalled when progress stops, and the stall (not the bare
// cancellation it caused) is what supervise returns then.
func (w *watchdog) supervise(ctx context.Context, work func(context.Context) error) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.watch(wctx, cancel)
	}()
	err := work(wctx)
	cancel(nil)
	<-done
	if err == nil {
		return nil
	}
	if cause := context.Cause(wctx); errors.Is(cause, ErrStalled) {
		return cause
	}
	return err
}

// touchWriter touches the watchdog on every write that moved bytes.
type touchWriter struct {
	w  io.Writer
	wd *watchdog
}

func (t touchWriter) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	if n > 0 {
		t.wd.touch()
	}
	return n, err
}
