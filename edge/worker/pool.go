package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Steps written into the events this package emits.
const (
	StepStart      = "worker.start"
	StepStream     = "worker.stream"
	StepFinish     = "worker.finish"
	StepDeadLetter = "worker.dead_letter"
)

// Causes a running job's context is cancelled with.
var (
	// errJobCanceled: the job was cancelled (status canceled).
	errJobCanceled = errors.New("job canceled")
	// errJobGone: the job ended without this process (done or error,
	// written by another consumer that ran it too) or expired. Its message
	// is acknowledged like a cancelled job's, but this process finished
	// nothing, so nothing is counted.
	errJobGone = errors.New("job finished elsewhere or expired")
	// errShutdown: the drain period after shutdown ended.
	errShutdown = errors.New("worker shutting down")
	// errUnknownStatus: the job's status left the state machine while it
	// ran (see jobs.ErrUnknownStatus).
	errUnknownStatus = fmt.Errorf("worker: %w", jobs.ErrUnknownStatus)
)

// Pool is the worker pool of one process: one consumer of the group
// "workers", running up to Settings.Concurrency jobs at once.
type Pool struct {
	log      *slog.Logger
	rdb      redis.UniversalClient
	store    *jobs.Store
	consumer string
	s        Settings
	backend  backend.Backend

	slots chan struct{} // a token per job between read and XACK
	work  chan *job     // started jobs waiting for an executor
	fin   chan outcome  // finished jobs waiting to be written

	mu    sync.Mutex
	byMsg map[string]*job
	byJob map[string]*job

	claimer claimer
	metrics *metrics // nil unless RegisterMetrics was called
}

// job is one queue message being worked on.
type job struct {
	msg        redis.XMessage // as delivered, for the dead-letter copy
	msgID      string
	id         string
	task       string
	payload    json.RawMessage
	deliveries int64
	ctx        context.Context
	cancel     context.CancelCauseFunc

	// finishing is set once the backend call has returned, before the
	// outcome is handed to the writer: from then on the job's own write
	// may acknowledge its queue entry at any moment, so a heartbeat that
	// no longer finds the entry pending has not found it stolen.
	finishing atomic.Bool
	// lost is set when a heartbeat finds the entry pending under another
	// consumer after the job finished: its outcome write, if Redis still
	// refuses it, is given up (the other consumer runs the job).
	lost atomic.Bool
	// kept is set once a heartbeat has refreshed the job's entry and keys.
	kept atomic.Bool
}

// New returns a pool reading as consumer (the worker identity) and running
// jobs on be (usually a *backend.Registry).
func New(log *slog.Logger, rdb redis.UniversalClient, store *jobs.Store, consumer string, s Settings, be backend.Backend) (*Pool, error) {
	if consumer == "" {
		return nil, errors.New("worker: consumer name is empty")
	}
	if s.Concurrency < 1 || s.Batch < 1 || s.MaxDeliveries < 1 || s.ClaimIdle <= 0 {
		return nil, fmt.Errorf("worker: invalid settings %+v", s)
	}
	if s.Block <= 0 {
		s.Block = time.Second
	}
	if s.ClaimInterval <= 0 {
		s.ClaimInterval = s.ClaimIdle / 2
	}
	if s.CancelPoll <= 0 {
		s.CancelPoll = 500 * time.Millisecond
	}
	if s.DeltaInterval <= 0 {
		s.DeltaInterval = 100 * time.Millisecond
	}
	if s.DeltaBytes <= 0 {
		s.DeltaBytes = 1024
	}
	if s.ConsumerMaxIdle <= 0 {
		s.ConsumerMaxIdle = 24 * time.Hour
	}
	if s.PruneInterval <= 0 {
		s.PruneInterval = time.Hour
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{
		log: log.With("component", "worker", "consumer", consumer), rdb: rdb, store: store,
		consumer: consumer, s: s, backend: be,
		slots: make(chan struct{}, s.Concurrency),
		work:  make(chan *job, s.Concurrency),
		fin:   make(chan outcome, s.Concurrency),
		byMsg: map[string]*job{}, byJob: map[string]*job{},
	}
	for range s.Concurrency {
		p.slots <- struct{}{}
	}
	return p, nil
}

// Consumer is the consumer name this pool reads under.
func (p *Pool) Consumer() string { return p.consumer }

// Checks reports Redis reachability for /ready.
func (p *Pool) Checks() []daemon.Check {
	return []daemon.Check{{Name: "worker", Probe: func(ctx context.Context) error { return p.rdb.Ping(ctx).Err() }}}
}

// Run works until ctx is cancelled, then stops reading, lets running jobs
// finish for up to Settings.Drain, abandons the rest (left pending, to be
// recovered) and returns nil once every goroutine it started has stopped.
func (p *Pool) Run(ctx context.Context) error {
	if err := p.setup(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	p.log.Info("worker pool started", "concurrency", p.s.Concurrency, "recovery", p.claimer.name())

	// Jobs outlive ctx by up to Drain; bookkeeping outlives the jobs.
	jobsCtx, stopJobs := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopJobs(errShutdown)
	bookCtx, stopBook := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBook()

	ps := p.subscribe(ctx)
	var feeders, executors, finisher, book sync.WaitGroup
	feeders.Go(func() { p.readLoop(ctx, jobsCtx) })
	feeders.Go(func() { p.recoverLoop(ctx, jobsCtx) })
	for range p.s.Concurrency {
		executors.Go(func() { p.execute(bookCtx) })
	}
	finisher.Go(func() { p.finishLoop(bookCtx, ctx) })
	book.Go(func() { p.listenCancels(bookCtx, ps) })
	book.Go(func() { p.monitor(bookCtx) })
	book.Go(func() { p.pruneLoop(bookCtx) })

	<-ctx.Done()
	feeders.Wait()
	close(p.work) // readLoop and recoverLoop were the only senders
	drain := time.AfterFunc(p.s.Drain, func() { stopJobs(errShutdown) })
	executors.Wait()
	drain.Stop()
	close(p.fin)
	finisher.Wait()
	stopBook()
	book.Wait()
	p.log.Info("worker pool stopped")
	return nil
}

// setup creates the group and picks the recovery strategy, retrying while
// Redis is unreachable.
func (p *Pool) setup(ctx context.Context) error {
	bo := lease.Backoff{Base: 100 * time.Millisecond, Cap: 5 * time.Second}
	for n := 1; ; n++ {
		err := p.store.EnsureGroup(ctx)
		if err == nil {
			var c claimer
			if c, err = p.chooseClaimer(ctx); err == nil {
				p.claimer = c
				return nil
			}
		}
		if n == 1 || n%10 == 0 {
			p.log.Warn("redis not ready for the worker pool; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(bo.Delay(n)):
		}
	}
}

// takeSlots waits for one free slot (or ctx) and then takes up to max-1
// more without waiting. It returns how many it took.
func (p *Pool) takeSlots(ctx context.Context, max int, wait bool) int {
	n := 0
	if wait {
		select {
		case <-p.slots:
			n = 1
		case <-ctx.Done():
			return 0
		}
	}
	for n < max {
		select {
		case <-p.slots:
			n++
		default:
			return n
		}
	}
	return n
}

func (p *Pool) releaseSlots(n int) {
	for range n {
		p.slots <- struct{}{}
	}
}

// track registers a started job for heartbeats and cancellation.
func (p *Pool) track(j *job) {
	p.mu.Lock()
	p.byMsg[j.msgID] = j
	p.byJob[j.id] = j
	p.mu.Unlock()
}

func (p *Pool) untrack(j *job) {
	p.mu.Lock()
	if p.byMsg[j.msgID] == j {
		delete(p.byMsg, j.msgID)
	}
	if p.byJob[j.id] == j {
		delete(p.byJob, j.id)
	}
	p.mu.Unlock()
}

// tracked returns the jobs in flight.
func (p *Pool) tracked() []*job {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*job, 0, len(p.byMsg))
	for _, j := range p.byMsg {
		out = append(out, j)
	}
	return out
}

// cancelJob cancels the running job with that id, if this pool runs it.
func (p *Pool) cancelJob(id string, cause error) bool {
	p.mu.Lock()
	j := p.byJob[id]
	p.mu.Unlock()
	if j == nil {
		return false
	}
	j.cancel(cause)
	return true
}
