package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/edge/library"
)

// Component is one part of the running daemon.
type Component interface {
	// Mount adds the component's HTTP routes (it may add none).
	Mount(e *echo.Echo)
	// Run blocks until ctx is cancelled and returns nil on a clean stop.
	// An error before shutdown stops the whole daemon.
	Run(ctx context.Context) error
}

// checker is implemented by components that add dependencies to /ready.
type checker interface {
	Checks() []daemon.Check
}

// Deps are what every component is built from.
type Deps struct {
	Log      *slog.Logger
	Redis    *redis.Client  // the shared pool
	RedisOpt *redis.Options // for dedicated connections (blocking reads, pub/sub)
	Jobs     *jobs.Store
	StateDir string
	WorkerID string
	// Metrics is the registry /metrics serves; components add their series.
	Metrics *prometheus.Registry
	// Parts is what built components publish for others (the sync
	// heartbeat reports the worker count and the library's counts); read
	// it only once every plugin is built.
	Parts *Parts
}

// Parts are built components other components may look at.
type Parts struct {
	Workers int              // the worker pool's concurrency, 0 without workers
	Library *library.Library // nil when the library has no roots
}

// Plugin registers a component with `serve`. Each part of the daemon
// registers itself from an init function in a file of its own here.
type Plugin struct {
	Name string
	// Settings declares the plugin's settings; it runs before parsing.
	Settings func(cfg *daemon.Config)
	// Validate, when set, checks the plugin's settings against each other
	// and the daemon-wide ones after parsing, before anything starts; it
	// returns a *daemon.SettingError naming the setting to change.
	Validate func(d DaemonSettings) error
	// Build makes the component once settings are parsed.
	Build func(ctx context.Context, d Deps) (Component, error)
}

// DaemonSettings are the daemon-wide values plugin settings may depend on.
type DaemonSettings struct {
	Grace  time.Duration // EUTERPE_SHUTDOWN_GRACE
	JobTTL time.Duration // EUTERPE_JOB_TTL_S, the default job TTL
}

var plugins []Plugin

func register(p Plugin) { plugins = append(plugins, p) }

// noComponent is a plugin turned off by its settings.
type noComponent struct{}

func (noComponent) Mount(*echo.Echo)              {}
func (noComponent) Run(ctx context.Context) error { <-ctx.Done(); return nil }
