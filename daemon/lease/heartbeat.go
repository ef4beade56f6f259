package lease

import (
	"context"
	"errors"
	"time"
)

// Keep runs work under a lease. Every HeartbeatInterval(ttl) it calls renew;
// if renew reports ErrStale, work's context is cancelled at once (so an
// ffmpeg child or a backend call dies with it) and Keep returns the stale
// error. Other renew errors are retried on the next beat: a database hiccup
// shorter than the lease should not abandon the work. Keep owns the
// heartbeat goroutine and waits for it before returning.
func Keep(ctx context.Context, ttl time.Duration, renew func(context.Context) error, work func(context.Context) error) error {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(HeartbeatInterval(ttl))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
				if err := renew(wctx); errors.Is(err, ErrStale) {
					cancel(err)
					return
				}
			}
		}
	}()
	err := work(wctx)
	close(done)
	<-hbDone
	if cause := context.Cause(wctx); errors.Is(cause, ErrStale) {
		return cause
	}
	return err
}
