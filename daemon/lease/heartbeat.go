package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// KeepOption adjusts Keep.
type KeepOption func(*keepOptions)

type keepOptions struct {
	onRenewError func(error)
	until        time.Time
	wall         func() time.Time // the wall clock; tests simulate a suspend with it
}

// OnRenewError makes Keep report every renew error other than a stale claim
// to fn (from the heartbeat goroutine, before the next beat). Keep retries
// such errors on the next beat; without a report, a database outage longer
// than the lease would be invisible until the lease is found lost.
func OnRenewError(fn func(error)) KeepOption {
	return func(o *keepOptions) { o.onRenewError = fn }
}

// Until makes Keep fence the work at deadline, the end of the lease its
// claim granted by this process's monotonic clock (Claim.Deadline), instead
// of a TTL after Keep is called. The lease in the database runs from the
// time the claim stamped, which precedes the claim's commit and whatever
// came between it and Keep; counting a whole TTL from Keep would let the
// work run on after another worker can have reclaimed the row. A zero
// deadline (no claim to go by) is ignored.
func Until(deadline time.Time) KeepOption {
	return func(o *keepOptions) { o.until = deadline }
}

// ErrLeaseDeadline is the cause Keep cancels work with when it has not
// renewed the lease before it ends. errors.Is(err, ErrStale) holds: the
// lease may have expired in the database and been reclaimed, so the work
// must stop and write nothing more, exactly as for a stale answer.
var ErrLeaseDeadline = fmt.Errorf("%w: not renewed within the lease TTL", ErrStale)

// ErrSkipped, returned by renew, means the renewal was deliberately not
// attempted (e.g. the work is being cancelled for another reason): it does
// not count as a renewal and is not reported as an error.
var ErrSkipped = errors.New("lease renewal skipped")

// Keep runs work under a lease. Every HeartbeatInterval(ttl) it calls renew;
// if renew reports ErrStale, work's context is cancelled at once (so an
// ffmpeg child or a backend call dies with it) and Keep returns the stale
// error. Other renew errors are retried on the next beat (and reported to
// the OnRenewError option): a database hiccup shorter than the lease should
// not abandon the work.
//
// Self-fencing: the lease in the database ends a TTL after the claim or the
// last renewal that reached it, and a renewal is no later than when it was
// sent. So when
// no renewal sent in the last TTL has succeeded (the database unreachable,
// renewals hanging), work's context is cancelled with ErrLeaseDeadline on
// this process's monotonic clock, before another worker can have reclaimed
// the row; a renewal in flight is bounded by the same deadline. The
// monotonic clock stands still while the machine sleeps (a suspended
// laptop or VM) and the database's does not, so the wall clock is checked
// against the same deadline every wallCheck as well, and the work fenced
// as soon as it says the lease is over. Until the first renewal the
// deadline is the claim's (the Until option), or a TTL after Keep is
// called without it. The first renewal comes when as little
// of the lease is left as at every later beat, at once if less is left
// already; a lease already over when Keep is called runs no work at all.
//
// When work returns nil its last fenced write succeeded, so a beat that
// found the row finished in the meantime (a terminal status is no longer
// leased) is not a lost lease: Keep returns nil. Keep owns the heartbeat
// goroutine (started when the first beat is due) and waits for it before
// returning.
func Keep(ctx context.Context, ttl time.Duration, renew func(context.Context) error, work func(context.Context) error, opts ...KeepOption) error {
	var o keepOptions
	for _, opt := range opts {
		opt(&o)
	}
	iv := HeartbeatInterval(ttl)
	deadline := time.Now().Add(ttl)
	if !o.until.IsZero() && o.until.Before(deadline) {
		deadline = o.until
	}
	if !time.Now().Before(deadline) {
		// Another worker may hold the row already; work that never
		// started has written nothing.
		return ErrLeaseDeadline
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The fence and the first beat are timers, and the heartbeat goroutine
	// starts only when the first beat is due: most work ends long before,
	// and a goroutine for every job was most of what a no-op drain spent
	// keeping its leases.
	fence := time.AfterFunc(time.Until(deadline), func() { cancel(ErrLeaseDeadline) })
	defer fence.Stop()
	wall := o.wall
	if wall == nil {
		wall = func() time.Time { return time.Now().Round(0) }
	}
	var wallEnd atomic.Int64
	wallEnd.Store(deadline.Round(0).UnixNano())
	slept := startWallFence(wctx, wall, &wallEnd, cancel)
	defer slept.stop()
	done := make(chan struct{})
	hbDone := make(chan struct{})
	h := heartbeat{ttl: ttl, iv: iv, deadline: deadline, wall: wall, wallEnd: &wallEnd, renew: renew, onRenewError: o.onRenewError,
		wctx: wctx, cancel: cancel, fence: fence, done: done}
	beats := time.AfterFunc(max(time.Until(deadline)-(ttl-iv), 0), func() {
		defer close(hbDone)
		h.run()
	})
	err := work(wctx)
	close(done)
	if !beats.Stop() {
		<-hbDone // the beats started: they end once they see done
	}
	if err == nil {
		return nil
	}
	if cause := context.Cause(wctx); errors.Is(cause, ErrStale) {
		return cause
	}
	return err
}

// heartbeat renews one lease every iv from its first beat until the work
// is done (done closed) or cancelled: by the fence, whose timer calls
// cancel with ErrLeaseDeadline when no renewal reached the database for a
// whole TTL, or by a renewal that found the claim stale.
type heartbeat struct {
	ttl, iv      time.Duration
	deadline     time.Time // the lease's end by this process's clock
	wall         func() time.Time
	wallEnd      *atomic.Int64 // the lease's end by the wall clock, in Unix nanoseconds
	renew        func(context.Context) error
	onRenewError func(error)
	wctx         context.Context
	cancel       context.CancelCauseFunc
	fence        *time.Timer
	done         <-chan struct{}
}

func (h *heartbeat) run() {
	var wait *time.Timer
	for {
		select {
		case <-h.done:
			return
		case <-h.wctx.Done():
			return
		default:
		}
		sent, sentWall := time.Now(), h.wall()
		rctx, rcancel := context.WithDeadline(h.wctx, h.deadline)
		// The renewal runs beside the fence: not every step of it watches
		// rctx (a database clock measurement, the SQLite writer's mutex),
		// and the work must stop at the deadline even while it is still
		// blocked.
		res := make(chan error, 1)
		go func() { res <- h.renew(rctx) }()
		var err error
		select {
		case err = <-res:
		case <-h.wctx.Done():
			rcancel()
			<-res
			return
		}
		rcancel()
		switch {
		case err == nil:
			h.deadline = sent.Add(h.ttl)
			h.wallEnd.Store(sentWall.Add(h.ttl).UnixNano())
			h.fence.Reset(time.Until(h.deadline))
		case errors.Is(err, ErrStale):
			h.cancel(err)
			return
		case errors.Is(err, ErrSkipped):
		case !time.Now().Before(h.deadline):
			h.cancel(ErrLeaseDeadline)
			return
		case h.onRenewError != nil && h.wctx.Err() == nil:
			h.onRenewError(err)
		}
		next := h.iv - time.Since(sent)
		if wait == nil {
			wait = time.NewTimer(next)
			defer wait.Stop()
		} else {
			wait.Reset(next)
		}
		select {
		case <-h.done:
			return
		case <-h.wctx.Done():
			return
		case <-wait.C:
		}
	}
}

// wallCheck is how often Keep asks the wall clock whether the lease is
// over: the work outlives a sleep of the machine by at most this long.
const wallCheck = time.Second

// wallFence cancels work with ErrLeaseDeadline once wall says the lease is
// over (wallEnd, by the wall clock), checking every wallCheck until it is
// stopped or work's context ends. Timers run on the monotonic clock, which
// stands still while the machine sleeps: after a resume, the fence timer
// would still give the work the lease's remaining time, when the database,
// counting the sleep, ended the lease and another worker can have
// reclaimed the row. A step of the wall clock looks like a sleep. Stepped
// forward, it fences early: work stops that could have gone on, which is
// safe. Stepped back, this check passes later, but the fence timer still
// runs on the monotonic clock: the lease is never extended.
type wallFence struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func startWallFence(wctx context.Context, wall func() time.Time, wallEnd *atomic.Int64, cancel context.CancelCauseFunc) *wallFence {
	f := &wallFence{}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = time.AfterFunc(wallCheck, func() {
		if wctx.Err() != nil {
			return
		}
		if !wall().Before(time.Unix(0, wallEnd.Load())) {
			cancel(ErrLeaseDeadline)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.stopped {
			f.t.Reset(wallCheck)
		}
	})
	return f
}

func (f *wallFence) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	f.t.Stop()
}
