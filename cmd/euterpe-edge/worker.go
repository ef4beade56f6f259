package main

import (
	"context"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/worker"
)

func init() {
	s := worker.DefaultSettings()
	register(Plugin{
		Name:     "worker",
		Settings: s.Register,
		Validate: func(d DaemonSettings) error { return s.Validate(d.Grace, d.JobTTL) },
		Build: func(ctx context.Context, d Deps) (Component, error) {
			reg, err := backend.New(s.Backend, nil)
			if err != nil {
				return nil, err
			}
			// The worker shares the daemon's bounded pool: its blocking read
			// holds one connection and its batches are pipelined, so the
			// daemon's total stays at the pool size plus the SSE reader and
			// the cancel subscription, however many jobs and watchers there are.
			p, err := worker.New(d.Log, d.Redis, d.Jobs, d.WorkerID, s, reg)
			if err != nil {
				return nil, err
			}
			if err := p.RegisterMetrics(d.Metrics); err != nil {
				return nil, err
			}
			d.Parts.Workers = s.Concurrency
			d.Log.Info("task backends", "tasks", strings.Join(reg.Describe(), ","))
			return &workerComponent{pool: p}, nil
		},
	})
}

// workerComponent runs the worker pool inside serve; it has no routes.
type workerComponent struct {
	pool *worker.Pool
}

func (w *workerComponent) Mount(*echo.Echo) {}

func (w *workerComponent) Run(ctx context.Context) error {
	return w.pool.Run(ctx)
}

func (w *workerComponent) Checks() []daemon.Check { return w.pool.Checks() }
