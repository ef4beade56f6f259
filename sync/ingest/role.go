package ingest

import (
	"context"
	_ "embed"
	"log/slog"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon"
)

// RoleName is the role's name in EUTERPE_CENTRAL_ROLES.
const RoleName = "sync"

// Settings are the role's EUTERPE_* settings.
type Settings struct {
	Retention     time.Duration
	PruneInterval time.Duration
	Rate          int
	Burst         int
	Skew          time.Duration
	StaleAfter    time.Duration
}

// Environment names of the settings.
const (
	EnvRetention     = "EUTERPE_EDGE_EVENT_RETENTION"
	EnvPruneInterval = "EUTERPE_SYNC_PRUNE_INTERVAL"
	EnvRate          = "EUTERPE_SYNC_RATE"
	EnvBurst         = "EUTERPE_SYNC_BURST"
	EnvSkew          = "EUTERPE_SYNC_SKEW"
	EnvStaleAfter    = "EUTERPE_EDGE_STALE_AFTER"
)

// Bind declares the settings on c.
func (s *Settings) Bind(c *daemon.Config) {
	c.Duration(&s.Retention, "edge-event-retention", EnvRetention, 30*24*time.Hour, time.Minute, 10*365*24*time.Hour,
		"edge events, gaps and job summaries older than this are pruned by the sync role")
	c.Duration(&s.PruneInterval, "sync-prune-interval", EnvPruneInterval, 5*time.Minute, 100*time.Millisecond, 24*time.Hour,
		"how often the sync role prunes expired nonces and edge data past retention")
	c.Int(&s.Rate, "sync-rate", EnvRate, 50, 0, 100000,
		"sync requests per second one edge may make to one central process (token bucket; 0 turns it off)")
	c.Int(&s.Burst, "sync-burst", EnvBurst, 100, 1, 100000, "burst size of the per-edge sync rate limit")
	c.Duration(&s.Skew, "sync-skew", EnvSkew, webhook.DefaultSkew, 30*time.Second, time.Hour,
		"largest accepted difference between an edge's signing clock and central's (401 clock_skew beyond)")
	c.Duration(&s.StaleAfter, "edge-stale-after", EnvStaleAfter, 90*time.Second, time.Second, 24*time.Hour,
		"an edge not heard from for longer is shown stale (default: three 30 s heartbeats)")
}

// Definition registers the sync role with euterpe-central serve: on by
// default, its routes mounted on the API server.
func Definition() serve.Definition {
	return serve.Definition{
		Name:      RoleName,
		DefaultOn: true,
		Settings:  bound.Bind,
		New: func(d *serve.Deps) (serve.Role, error) {
			return New(d, bound), nil
		},
	}
}

// bound holds the settings Definition declared, so the console shows the
// fleet with the same staleness rule as the operator API.
var bound = Settings{StaleAfter: 90 * time.Second}

// BoundSettings returns the sync settings as parsed (after the process
// configuration's Parse).
func BoundSettings() Settings { return bound }

// Role is the sync role: it serves the sync endpoints and the operator
// API (through serve.RouteMounter) and prunes on a timer.
type Role struct {
	Receiver *Receiver
	API      *API
	Store    *Store
	Nonces   Nonces
	Settings Settings
	Log      *slog.Logger
	Metrics  *Metrics
}

// New builds the role from serve's dependencies.
func New(d *serve.Deps, s Settings) *Role {
	log := d.Log.With("role", RoleName)
	store := NewStore(d.DB)
	var m *Metrics
	if d.Metrics != nil {
		m = NewMetrics(d.Metrics)
		d.Metrics.MustRegister(NewTailCollector(store, log))
	} else {
		m = NewMetrics(nil)
	}
	api := &API{Store: store, Auth: d.OperatorAuth, Log: log, StaleAfter: s.StaleAfter,
		Poll: 250 * time.Millisecond, Heartbeat: 15 * time.Second, WriteTimeout: 10 * time.Second, wake: newWakeup()}
	nonces := Nonces{DB: d.DB}
	return &Role{
		Receiver: &Receiver{Registry: NewRegistry(d.DB, d.Keys), Store: store, Nonces: nonces, Skew: s.Skew,
			Limiter: NewLimiter(float64(s.Rate), s.Burst), Metrics: m, Log: log, OnIngest: api.Notify, Now: time.Now},
		API: api, Store: store, Nonces: nonces, Settings: s, Log: log, Metrics: m,
	}
}

// Name is "sync".
func (r *Role) Name() string { return RoleName }

// MountRoutes implements serve.RouteMounter.
func (r *Role) MountRoutes(e *echo.Echo) {
	r.Receiver.Mount(e)
	r.API.Mount(e)
}

//go:embed openapi.json
var openAPI []byte

// OpenAPI implements serve.OpenAPIContributor.
func (r *Role) OpenAPI() []byte { return openAPI }

// Run prunes every PruneInterval until ctx is done.
func (r *Role) Run(ctx context.Context) error {
	t := time.NewTicker(r.Settings.PruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.prune(ctx)
		}
	}
}

func (r *Role) prune(ctx context.Context) {
	now := time.Now()
	for ctx.Err() == nil {
		n, err := r.Nonces.Prune(ctx, now, pruneBatch)
		if err != nil {
			r.Log.Warn("prune sync nonces", "err", err)
			break
		}
		if n < pruneBatch {
			break
		}
	}
	p, err := r.Store.Prune(ctx, now.Add(-r.Settings.Retention))
	if err != nil && ctx.Err() == nil {
		r.Log.Warn("prune edge data", "err", err)
	}
	r.Metrics.Pruned.WithLabelValues("edge_events").Add(float64(p.Events))
	r.Metrics.Pruned.WithLabelValues("edge_gaps").Add(float64(p.Gaps))
	r.Metrics.Pruned.WithLabelValues("edge_jobs").Add(float64(p.Jobs))
	if p.Events+p.Gaps+p.Jobs > 0 {
		r.Log.Info("pruned edge data past retention", "events", p.Events, "gaps", p.Gaps, "jobs", p.Jobs)
	}
}
