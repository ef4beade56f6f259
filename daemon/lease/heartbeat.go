package lease

import (
	"context"
	"errors"
	"time"
)

// KeepOption adjusts Keep.
type KeepOption func(*keepOptions)

type keepOptions struct {
	onRenewError func(error)
}

// OnRenewError makes Keep report every renew error other than a stale claim
// to fn (from the heartbeat goroutine, before the next beat). Keep retries
// such errors on the next beat; without a report, a database outage longer
// than the lease would be invisible until the lease is found lost.
func OnRenewError(fn func(error)) KeepOption {
	return func(o *keepOptions) { o.onRenewError = fn }
}

// Keep runs work under a lease. Every HeartbeatInterval(ttl) it calls renew;
// if renew reports ErrStale, work's context is cancelled at once (so an
// ffmpeg child or a backend call dies with it) and Keep returns the stale
// error. Other renew errors are retried on the next beat (and reported to
// the OnRenewError option): a database hiccup shorter than the lease should
// not abandon the work. When work returns nil its last fenced write
// succeeded, so a beat that found the row finished in the meantime (a
// terminal status is no longer leased) is not a lost lease: Keep returns
// nil. Keep owns the heartbeat goroutine and waits for it before returning.
func Keep(ctx context.Context, ttl time.Duration, renew func(context.Context) error, work func(context.Context) error, opts ...KeepOption) error {
	var o keepOptions
	for _, opt := range opts {
		opt(&o)
	}
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
				err := renew(wctx)
				switch {
				case err == nil:
				case errors.Is(err, ErrStale):
					cancel(err)
					return
				case o.onRenewError != nil && wctx.Err() == nil:
					o.onRenewError(err)
				}
			}
		}
	}()
	err := work(wctx)
	close(done)
	<-hbDone
	if err == nil {
		return nil
	}
	if cause := context.Cause(wctx); errors.Is(cause, ErrStale) {
		return cause
	}
	return err
}
