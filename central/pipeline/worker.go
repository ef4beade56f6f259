package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
)

// WorkerConfig tunes a worker.
type WorkerConfig struct {
	ID          string
	Visibility  time.Duration // the lease; heartbeats at a third
	Concurrency int
	Poll        time.Duration // idle poll interval (jittered ±50%)
}

// Worker claims pipeline jobs and runs their type (§5.2).
type Worker struct {
	Store *Store
	Types *Registry
	Cfg   WorkerConfig
	wake  chan struct{}
	fin   chan finished
}

// finished is a job's success, handed to the finisher, which writes many
// in one transaction and answers on res.
type finished struct {
	job *Job
	ref string
	res chan error
}

// NewWorker returns a worker.
func NewWorker(s *Store, types *Registry, cfg WorkerConfig) *Worker {
	return &Worker{Store: s, Types: types, Cfg: cfg, wake: make(chan struct{}, 1), fin: make(chan finished, cfg.Concurrency)}
}

// Wake makes an idle worker poll at once (after a submit in this process).
func (w *Worker) Wake() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Run claims and runs jobs until ctx is done, then waits for the jobs it
// started (cancelled with ctx: their messages reappear after the
// visibility timeout, as for any worker that stops).
//
// Jobs run on long-lived goroutines, at most Concurrency, started as the
// claims first need them and kept until ctx is done: a goroutine per job
// would grow a fresh stack, copying it as it grows, for every job.
func (w *Worker) Run(ctx context.Context) error {
	sem := make(chan struct{}, w.Cfg.Concurrency)
	runs := make(chan *Job)
	runners := 0
	var wg sync.WaitGroup
	runner := func(j *Job) {
		defer wg.Done()
		for {
			w.RunJob(ctx, j)
			<-sem
			select {
			case <-ctx.Done():
				return
			case j = <-runs:
			}
		}
	}
	// The finisher outlives the jobs: it stops once they all returned.
	finCtx, stopFin := context.WithCancel(context.WithoutCancel(ctx))
	finDone := make(chan struct{})
	go func() { defer close(finDone); w.finisher(finCtx) }()
	defer func() { wg.Wait(); stopFin(); <-finDone }()
	for ctx.Err() == nil {
		free := cap(sem) - len(sem)
		var jobs []*Job
		if free > 0 {
			var err error
			jobs, err = w.Store.Claim(ctx, w.Cfg.ID, free, w.Cfg.Visibility)
			if err != nil && ctx.Err() == nil {
				w.Store.Log.Warn("pipeline claim failed", "err", Redact(err.Error()))
			}
		}
		for _, j := range jobs {
			sem <- struct{}{}
			select {
			case runs <- j:
				continue
			default:
			}
			if runners < cap(sem) {
				runners++
				wg.Add(1)
				go runner(j)
				continue
			}
			// Every runner is started and none is waiting yet: one is
			// between its job and the next, since a slot was free.
			select {
			case runs <- j:
			case <-ctx.Done():
				// Left to its lease, like the jobs shutdown interrupts.
				<-sem
				w.Store.logJob(j.Msg, StatusRunning, nil).Info("pipeline job interrupted by shutdown before it started; its message reappears after the visibility timeout",
					"worker_id", w.Cfg.ID)
			}
		}
		if len(jobs) > 0 && len(jobs) == free {
			continue
		}
		d := time.Duration(float64(w.Cfg.Poll) * (0.5 + rand.Float64()))
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-time.After(d):
		}
	}
	return nil
}

// RunJob runs one claimed job under its lease and records the outcome.
func (w *Worker) RunJob(ctx context.Context, j *Job) {
	s := w.Store
	m := j.Msg // as it was when the run started, for the lines after it
	s.logJobAt(ctx, slog.LevelInfo, m, StatusRunning, "pipeline job running", "worker_id", w.Cfg.ID)
	var ref string
	var jerr error
	err := s.Keep(ctx, j, w.Cfg.Visibility, func(ctx context.Context) error {
		ref, jerr = w.execute(ctx, j)
		ref = RedactRef(ref) // as stored: the log line below shows no more
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if jerr == nil {
			return w.succeed(ctx, j, ref)
		}
		// A failure without a code of the contract (a Go stage's bare
		// error, or a *JobError with no code or one of its own) is
		// recorded as the job type not answering, its message kept.
		var je *JobError
		if !errors.As(jerr, &je) || !isFailureCode(je.Code) {
			je = Fail(CodeStageUnavailable, jerr.Error())
		}
		_, err := s.Fail(ctx, j, je)
		return err
	})
	switch {
	case err == nil && jerr == nil:
		s.logJobAt(ctx, slog.LevelInfo, j.Msg, StatusSucceeded, "pipeline job succeeded", "result_ref", ref)
	case errors.Is(err, lease.ErrStale):
		s.logJob(m, StatusRunning, nil).Warn("pipeline job lease lost: the message reappeared for another worker; this run stops")
	case err != nil && ctx.Err() != nil:
		s.logJob(m, StatusRunning, nil).Info("pipeline job interrupted by shutdown; its message reappears after the visibility timeout")
	case err != nil:
		s.logJob(m, StatusRunning, nil).Error("pipeline job outcome not recorded; its message reappears after the visibility timeout", "err", Redact(err.Error()))
	}
}

func (w *Worker) execute(ctx context.Context, j *Job) (string, error) {
	if err := j.Msg.Validate(); err != nil {
		return "", err
	}
	t, ok := w.Types.Get(j.Msg.JobType)
	if !ok {
		// The pod that accepted the job knew its type (a submit refuses
		// one it does not): this pod's configuration is behind or
		// different, not the message wrong. Retried, the message may
		// reach a pod that runs it.
		return "", Fail(CodeStageUnavailable, fmt.Sprintf("job type %q is not registered on worker %s", j.Msg.JobType, w.Cfg.ID))
	}
	if err := w.Types.Check(j.Msg); err != nil {
		return "", err
	}
	return t.Runner.Run(ctx, j.Msg)
}

// succeed hands j's success to the finisher and waits for the write (the
// lease is kept meanwhile). Once handed over, the success is written
// whatever becomes of ctx (the finisher outlives the jobs, and its write is
// fenced on the claim), so its answer is waited for even past the lease
// deadline or a shutdown: only it says whether the job succeeded or its
// lease was lost.
func (w *Worker) succeed(ctx context.Context, j *Job, ref string) error {
	res := make(chan error, 1)
	select {
	case w.fin <- finished{job: j, ref: ref, res: res}:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-res
}

// finisher writes successes in batches: whatever accumulated while the
// previous batch was written goes in the next transaction, so a busy
// worker pays one commit for many jobs and an idle one waits for none.
func (w *Worker) finisher(ctx context.Context) {
	const maxBatch = 500
	for {
		var first finished
		select {
		case <-ctx.Done():
			return
		case first = <-w.fin:
		}
		batch := []finished{first}
	fill:
		for len(batch) < maxBatch {
			select {
			case f := <-w.fin:
				batch = append(batch, f)
			default:
				break fill
			}
		}
		jobs := make([]*Job, len(batch))
		refs := make([]string, len(batch))
		for i, f := range batch {
			jobs[i], refs[i] = f.job, f.ref
		}
		errs := w.Store.SucceedMany(ctx, jobs, refs)
		for i, f := range batch {
			f.res <- errs[i]
		}
	}
}
