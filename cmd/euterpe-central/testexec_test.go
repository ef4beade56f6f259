package main

import (
	"context"
	"strconv"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

// registerTestRoles adds "test-executor": a no-op executor that walks each
// claimed job through fetching, processing and uploading, sleeping
// EUTERPE_TEST_EXECUTOR_STEP between states, then succeeds it. It exists
// only in the test binary, whose child processes run it, so the lease
// protocol is exercised end to end across real processes.
func registerTestRoles(app *serve.App) {
	var step, ttl time.Duration
	app.Register(serve.Definition{
		Name:     "test-executor",
		Executes: true,
		Settings: func(c *daemon.Config) {
			c.Duration(&step, "test-executor-step", "EUTERPE_TEST_EXECUTOR_STEP", 50*time.Millisecond, 0, time.Minute, "test-executor: pause per state")
			c.Duration(&ttl, "test-executor-lease", "EUTERPE_TEST_EXECUTOR_LEASE", 2*time.Second, 100*time.Millisecond, time.Hour, "test-executor: lease TTL")
		},
		New: func(d *serve.Deps) (serve.Role, error) {
			return serve.RoleFunc{RoleName: "test-executor", Fn: func(ctx context.Context) error {
				return testExecutor(ctx, d, step, ttl)
			}}, nil
		},
	})
}

func testExecutor(ctx context.Context, d *serve.Deps, step, ttl time.Duration) error {
	for ctx.Err() == nil {
		jobs, err := d.Inbox.Claim(ctx, d.WorkerID, 1, ttl)
		if err != nil {
			d.Log.Warn("test-executor: claim", "err", err)
		}
		if len(jobs) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		j := jobs[0]
		err = d.Inbox.Keep(ctx, j, ttl, func(ctx context.Context) error {
			for _, st := range []string{schema.StatusFetching, schema.StatusProcessing, schema.StatusUploading} {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(step):
				}
				if err := d.Inbox.Advance(ctx, j, st); err != nil {
					return err
				}
			}
			return d.Inbox.Succeed(ctx, j, []inbox.OutputFile{{Rendition: "noop", Bucket: j.Output.Bucket,
				Key: j.Output.Prefix + "noop", SizeBytes: 0}})
		})
		if err != nil {
			d.Log.Info("test-executor: job stopped", "job_id", j.ID, "err", err)
			continue
		}
		d.Log.Info("test-executor: job succeeded", "job_id", j.ID, "worker_id", d.WorkerID, "claim_version", strconv.FormatInt(j.Snapshot().Version, 10))
	}
	return nil
}
