package gateway

import (
	"context"
	"sync"
	"time"
)

// measureTimeout bounds one backlog measurement run in the background.
const measureTimeout = 5 * time.Second

// backlogGauge caches the queue backlog for every, re-measuring it in one
// goroutine at a time (single flight). While a re-measurement runs,
// requests are served the previous value rather than queueing behind a
// slow Redis; only when there is no usable value do they wait, and then
// no longer than their own context allows. every == 0 measures on each
// call, in the caller, and so does a stopped gauge.
type backlogGauge struct {
	every time.Duration

	mu       sync.Mutex
	seen     int64
	at       time.Time
	valid    bool          // seen is a successful measurement
	err      error         // outcome of the last measurement, for waiters
	inflight chan struct{} // closed when the running measurement ends
	// stopped is set under mu before bg is waited for: a background
	// measurement is only added to bg under mu while it is false, so no
	// Add can race with that Wait.
	stopped bool
	bg      sync.WaitGroup
}

func (b *backlogGauge) value(ctx context.Context, measure func(context.Context) (int64, error)) (int64, error) {
	if b.every == 0 {
		return measure(ctx)
	}
	b.mu.Lock()
	if b.valid && time.Since(b.at) < b.every {
		n := b.seen
		b.mu.Unlock()
		return n, nil
	}
	if b.stopped {
		// Requests still in flight during shutdown measure for themselves,
		// bounded by their own context.
		b.mu.Unlock()
		return measure(ctx)
	}
	if b.inflight == nil {
		done := make(chan struct{})
		b.inflight = done
		b.bg.Add(1)
		go b.refresh(context.WithoutCancel(ctx), measure, done)
	}
	if b.valid { // stale but usable while the new measurement runs
		n := b.seen
		b.mu.Unlock()
		return n, nil
	}
	done := b.inflight
	b.mu.Unlock()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-done:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.valid {
		return 0, b.err
	}
	return b.seen, nil
}

func (b *backlogGauge) refresh(ctx context.Context, measure func(context.Context) (int64, error), done chan struct{}) {
	defer b.bg.Done()
	ctx, cancel := context.WithTimeout(ctx, measureTimeout)
	defer cancel()
	n, err := measure(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight = nil
	b.err = err
	if err != nil {
		b.valid = false // fail loudly: the next requests wait for a fresh value
	} else {
		b.seen, b.at, b.valid = n, time.Now(), true
	}
	close(done)
}

// stop makes later measurements run in their callers and returns once the
// background one, if any, has ended.
func (b *backlogGauge) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.bg.Wait()
}
