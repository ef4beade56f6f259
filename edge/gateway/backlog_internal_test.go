package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// slowInfo holds XINFO commands (the backlog measurement) while armed:
// until release, or their own context's end unless pastDeadline.
type slowInfo struct {
	armed        atomic.Bool
	pastDeadline atomic.Bool
	release      chan struct{}
	started      chan struct{}
}

func (h *slowInfo) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *slowInfo) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xinfo" && h.armed.Load() {
			select {
			case h.started <- struct{}{}:
			default:
			}
			if h.pastDeadline.Load() {
				<-h.release
				return next(ctx, cmd)
			}
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *slowInfo) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func slowGateway(t *testing.T, interval time.Duration) (*Gateway, *slowInfo) {
	t.Helper()
	_, opt := testsvc.Redis(t)
	o := *opt
	rdb := redis.NewClient(&o)
	t.Cleanup(func() { _ = rdb.Close() })
	h := &slowInfo{release: make(chan struct{}), started: make(chan struct{}, 1)}
	rdb.AddHook(h)
	store := jobs.NewStore(rdb)
	if err := store.EnsureGroup(context.Background()); err != nil {
		t.Fatal(err)
	}
	set := DefaultSettings()
	set.BacklogInterval = interval
	return New(slog.New(slog.NewTextHandler(io.Discard, nil)), set, store, &o), h
}

// While a re-measurement is stuck on a slow Redis, requests are answered
// from the previous measurement at once, and only one measurement runs.
func TestBacklogSingleFlightServesCachedValue(t *testing.T) {
	testsvc.EachRedis(t, testBacklogSingleFlightServesCachedValue)
}

func testBacklogSingleFlightServesCachedValue(t *testing.T) {
	g, h := slowGateway(t, 20*time.Millisecond)
	ctx := context.Background()
	if err := g.checkBacklog(ctx); err != nil { // first measurement, fast
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // the value is now stale
	// The re-measurement is held until the test lets it go, past its own
	// timeout: a request that waited for it rather than taking the value
	// before would still be waiting when the wait below gives up, however
	// slow the machine.
	h.pastDeadline.Store(true)
	h.armed.Store(true)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	start := time.Now()
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- g.checkBacklog(ctx)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(20 * time.Second):
		close(h.release)
		<-finished
		t.Fatalf("requests waited %v behind the slow measurement", time.Since(start))
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-h.started:
	case <-time.After(20 * time.Second):
		t.Fatal("no re-measurement started")
	}
	select {
	case <-h.started:
		t.Fatal("a second measurement ran concurrently")
	default:
	}
	close(h.release)
	g.backlog.stop()
}

// With no usable value yet, a request waits for the measurement but no
// longer than its own context.
func TestBacklogWaiterHonoursContext(t *testing.T) {
	testsvc.EachRedis(t, testBacklogWaiterHonoursContext)
}

func testBacklogWaiterHonoursContext(t *testing.T) {
	g, h := slowGateway(t, time.Second)
	// The measurement is held until the test lets it go, past its own
	// timeout: a request that waited for it rather than for its own
	// deadline would still be waiting when the wait below gives up,
	// however slow the machine.
	h.pastDeadline.Store(true)
	h.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := make(chan error, 1)
	go func() { res <- g.checkBacklog(ctx) }()
	select {
	case err := <-res:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want the request's deadline", err)
		}
	case <-time.After(20 * time.Second):
		close(h.release)
		<-res
		t.Fatalf("the request waited %v for the measurement, past its own deadline", time.Since(start))
	}
	close(h.release)
	g.backlog.stop()
	if err := g.checkBacklog(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Requests still in flight while Run stops (the HTTP server's shutdown
// grace runs beside it) keep checking the backlog; that must not race
// with Run waiting for the measurement it left running.
func TestBacklogCheckedWhileRunStops(t *testing.T) {
	testsvc.EachRedis(t, testBacklogCheckedWhileRunStops)
}

func testBacklogCheckedWhileRunStops(t *testing.T) {
	g, h := slowGateway(t, 20*time.Millisecond)
	ctx := context.Background()
	if err := g.checkBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- g.Run(runCtx) }()

	time.Sleep(30 * time.Millisecond) // stale: the next check re-measures in the background
	h.armed.Store(true)
	inflight := make(chan error, 1)
	go func() { inflight <- g.checkBacklog(ctx) }()
	select {
	case <-h.started:
	case <-time.After(2 * time.Second):
		t.Fatal("no re-measurement started")
	}
	stop()
	time.Sleep(50 * time.Millisecond) // Run is now waiting for that measurement
	h.armed.Store(false)
	close(h.release)
	time.Sleep(30 * time.Millisecond) // stale again
	for range 5 {
		if err := g.checkBacklog(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if err := <-inflight; err != nil {
		t.Fatal(err)
	}
	if err := g.checkBacklog(ctx); err != nil {
		t.Fatal("a check after Run returned:", err)
	}
}
