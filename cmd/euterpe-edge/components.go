package main

import (
	"context"
	"fmt"
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
	Workers int // the worker pool's concurrency, 0 without workers
	// Library returns the library once its database is open; the func
	// is nil when the library has no roots.
	Library func() *library.Library
	// LibraryErr returns why the library database is not open yet, nil
	// once it is or when not known; the func may be nil. The console
	// shows it (capped, URLs redacted) while the library is not open.
	LibraryErr func() error
}

// library is the open library, nil without roots or while its database
// cannot be opened.
func (p *Parts) library() *library.Library {
	if p.Library == nil {
		return nil
	}
	return p.Library()
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

// closer is a component holding resources (a database) that its HTTP
// routes use: its Run leaves them open, since requests begun before the
// stop are still answered after Run returns, and runDaemon closes it once
// HTTP has drained and every component stopped. A component built but
// never run (a later plugin failed to build, or the daemon failed before
// serving) is closed the same way.
type closer interface {
	Close() error
}

// named is a built component and the plugin it came from.
type named struct {
	name string
	c    Component
}

// buildComponents builds every plugin after first. When one fails, those
// already built are closed, last built first (a later one may use an
// earlier one's parts), and the error names the failed plugin.
func buildComponents(ctx context.Context, log *slog.Logger, ps []Plugin, d Deps, first named) ([]named, error) {
	comps := []named{first}
	for _, p := range ps {
		c, err := p.Build(ctx, d)
		if err != nil {
			closeComponents(log, comps)
			return nil, fmt.Errorf("build %s: %w", p.Name, err)
		}
		comps = append(comps, named{p.Name, c})
	}
	return comps, nil
}

// closeComponents closes the components that hold resources, in reverse
// order. A failure is logged: the daemon is stopping, and what stopped it
// is the one thing to report.
func closeComponents(log *slog.Logger, comps []named) {
	for i := len(comps) - 1; i >= 0; i-- {
		if c, ok := comps[i].c.(closer); ok {
			if err := c.Close(); err != nil {
				log.Warn("closing a component", "component", comps[i].name, "err", err)
			}
		}
	}
}
