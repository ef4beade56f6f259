package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/daemon"
)

// Jobs is the inbox as the runner uses it (*inbox.Store).
type Jobs interface {
	Claim(ctx context.Context, worker string, n int, ttl time.Duration) ([]*inbox.Job, error)
	Heartbeat(ctx context.Context, j *inbox.Job, ttl time.Duration) error
	Advance(ctx context.Context, j *inbox.Job, to string) error
	Succeed(ctx context.Context, j *inbox.Job, outputs []inbox.OutputFile) error
	Fail(ctx context.Context, j *inbox.Job, jerr inbox.JobError) (string, error)
	Release(ctx context.Context, j *inbox.Job) error
	ReleaseError(ctx context.Context, j *inbox.Job, jerr inbox.JobError) error
	Credentials(ctx context.Context, j *inbox.Job) (credentials.Storage, int, error)
	CountRefreshAttempt(ctx context.Context, j *inbox.Job) (bool, error)
	CredentialVersion(ctx context.Context, jobID string) (int, error)
}

// Progresser records an intermediate progress event; optional.
type Progresser interface {
	Progress(ctx context.Context, j *inbox.Job, percent int) error
}

// Secrets returns a requester's webhook secrets (current first, then the
// previous one during rotation) for signing refresh calls
// (*requesters.Store).
type Secrets interface {
	SigningKeys(ctx context.Context, requesterID string) ([][]byte, error)
}

// Options assemble a Runner.
type Options struct {
	Jobs     Jobs
	Secrets  Secrets
	Settings Settings
	WorkerID string
	Logger   *slog.Logger
	// RefreshClient sends refresh calls; production passes the SSRF-guarded
	// client of central/ssrf. nil uses a plain client with a 15 s timeout.
	RefreshClient *http.Client
	// StorageDial makes storage requests' connections (see
	// storage.Options.DialContext); nil dials anything.
	StorageDial func(ctx context.Context, network, address string) (net.Conn, error)
	// Metrics receives the runner's counters; nil: unregistered series.
	Metrics *Metrics
}

// Runner is the transcode runner role.
type Runner struct {
	jobs     Jobs
	secrets  Secrets
	progress Progresser
	set      Settings
	worker   string
	log      *slog.Logger
	tools    transcode.Tools
	check    *toolCheck
	store    *storage.Client
	refresh  refresher
	scratch  *Scratch
	metrics  *Metrics

	missing atomic.Bool // ffmpeg/ffprobe absent or broken at the last check
	// beforeOutputs, set by tests, runs before an attempt writes outputs.
	beforeOutputs func(j *inbox.Job)
}

// New opens the runner's scratch area, sweeping what dead runners left in
// it, and returns a runner ready to Run.
func New(o Options) (*Runner, error) {
	if o.Jobs == nil || o.Secrets == nil {
		return nil, errors.New("runner: Jobs and Secrets are required")
	}
	if err := o.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.RefreshClient == nil {
		o.RefreshClient = &http.Client{Timeout: 15 * time.Second}
	}
	sc, err := OpenScratch(o.Settings.TempDir)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	tools := transcode.Tools{FFmpeg: o.Settings.FFmpeg, FFprobe: o.Settings.FFprobe, Logger: o.Logger}
	r := &Runner{
		jobs: o.Jobs, secrets: o.Secrets, set: o.Settings, worker: o.WorkerID,
		log:     o.Logger.With("role", "runner", "worker_id", o.WorkerID),
		tools:   tools,
		check:   newToolCheck(tools, toolCheckEvery),
		store:   storage.NewClient(storage.Options{HeaderTimeout: o.Settings.StorageTimeout, DialContext: o.StorageDial}),
		refresh: refresher{client: o.RefreshClient, now: time.Now},
		scratch: sc,
		metrics: o.Metrics,
	}
	if p, ok := o.Jobs.(Progresser); ok {
		r.progress = p
	}
	if n, err := sc.Sweep(); err != nil {
		r.log.Warn("sweep of stale temp dirs incomplete", "err", err)
	} else if n > 0 {
		r.log.Info("swept temp dirs of dead runners", "count", n)
	}
	return r, nil
}

// Close removes the runner's scratch area. Call it after Run returns.
func (r *Runner) Close() error { return r.scratch.Close() }

// Check is the runner's readiness probe: ffmpeg and ffprobe must be on PATH
// and run (transcode.Tools.Check, its answer kept for toolCheckEvery). A job
// that found either missing or unable to run fails it for as long. Its
// error starts with the error code, so /ready shows
// "error(ffmpeg_missing: …)".
func (r *Runner) Check(ctx context.Context) error {
	err := r.check.check(ctx)
	if ctx.Err() != nil && err != nil && transcode.Code(err) == "" {
		return err // the caller gave up before an answer
	}
	r.missing.Store(err != nil)
	if err != nil {
		return fmt.Errorf("%s: %w", transcode.Code(err), err)
	}
	return nil
}

// Checks lists the runner's readiness checks for /ready.
func (r *Runner) Checks() []daemon.Check {
	return []daemon.Check{{Name: "ffmpeg", Probe: r.Check}}
}

// Run claims and processes jobs with Settings.Concurrency slots until ctx
// is cancelled; jobs in flight then have their ffmpeg killed and are given
// back to the queue without spending an attempt. It returns when every job
// goroutine has finished.
func (r *Runner) Run(ctx context.Context) error {
	slots := max(1, r.set.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	free := make(chan struct{}, slots)
	for range slots {
		free <- struct{}{}
	}
	lastSweep := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-free:
		}
		if time.Since(lastSweep) > time.Minute {
			if _, err := r.scratch.Sweep(); err != nil {
				r.log.Warn("sweep of stale temp dirs incomplete", "err", err)
			}
			lastSweep = time.Now()
		}
		j, err := r.claim(ctx)
		if err != nil || j == nil {
			free <- struct{}{}
			if err != nil && ctx.Err() == nil {
				r.log.Warn("claim failed", "err", err)
			}
			if !daemon.Sleep(ctx, jitter(r.set.PollInterval)) {
				return nil
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { free <- struct{}{} }()
			r.Process(ctx, j)
		}()
	}
}

// claim takes one job, unless ffmpeg is missing or broken: then the runner
// reports not ready and takes nothing, so no job burns its retries here.
func (r *Runner) claim(ctx context.Context) (*inbox.Job, error) {
	was := r.missing.Load()
	if err := r.Check(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		if !was {
			r.log.Error("not claiming jobs: transcoder missing or broken", "err", err)
		}
		return nil, nil
	}
	if was {
		r.log.Info("transcoder found again, claiming jobs")
	}
	start := time.Now()
	jobs, err := r.jobs.Claim(ctx, r.worker, 1, r.set.LeaseTTL)
	r.metrics.ClaimSeconds.Observe(time.Since(start).Seconds())
	if err != nil || len(jobs) == 0 {
		return nil, err
	}
	r.metrics.Claims.Inc()
	return jobs[0], nil
}

// RunOnce claims and processes at most one job; it reports whether it found
// one. Tests and tools use it to step the runner.
func (r *Runner) RunOnce(ctx context.Context) (bool, error) {
	j, err := r.claim(ctx)
	if err != nil || j == nil {
		return false, err
	}
	r.Process(ctx, j)
	return true, nil
}

func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}
