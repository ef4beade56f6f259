package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/central/pipeline/pipelinerole"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	dconsole "github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

// RoleName is the role's name in EUTERPE_CENTRAL_ROLES.
const RoleName = "console"

// Settings are the console's EUTERPE_* settings.
type Settings struct {
	SessionTTL          time.Duration
	TrustForwardedProto bool
	Origins             string
}

// Environment names of the settings.
const (
	EnvSessionTTL          = "EUTERPE_CONSOLE_SESSION_TTL"
	EnvTrustForwardedProto = "EUTERPE_CONSOLE_TRUST_FORWARDED_PROTO"
	EnvOrigins             = "EUTERPE_CONSOLE_ORIGINS"
)

// Bind declares the settings on c.
func (s *Settings) Bind(c *daemon.Config) {
	c.Duration(&s.SessionTTL, "console-session-ttl", EnvSessionTTL, operators.DefaultSessionTTL, time.Minute, 30*24*time.Hour,
		"how long a console sign-in lasts (disabling the operator ends it at once)")
	c.Bool(&s.TrustForwardedProto, "console-trust-forwarded-proto", EnvTrustForwardedProto, false,
		"treat X-Forwarded-Proto: https as TLS, so the session cookie is Secure behind a TLS-terminating proxy (set only behind one)")
	c.String(&s.Origins, "console-origins", EnvOrigins, "",
		"comma-separated extra origins (https://console.example.com) allowed to post console forms, for a proxy that rewrites Host", dconsole.CheckOrigins)
}

var bound Settings

// Definition registers the console role: on by default; without the api
// role in the same process it has nothing to serve and only says so.
func Definition() serve.Definition {
	return serve.Definition{
		Name:      RoleName,
		DefaultOn: true,
		Settings:  bound.Bind,
		New: func(d *serve.Deps) (serve.Role, error) {
			return New(context.Background(), d, bound)
		},
	}
}

// Role is the console of one process.
type Role struct {
	log      *slog.Logger
	deps     *serve.Deps
	settings Settings
	inbox    *inbox.Store
	outbox   *outbox.Store
	fleet    *ingest.Store
	tail     *ingest.API
	pipeline *pipeline.Store
	reports  objstore.Reader
	sessions *operators.Sessions
	history  *dconsole.History
	// withFleet and withPipeline: those roles run here, so their routes
	// (the fleet tail) and metrics (the pipeline charts) exist.
	withFleet, withPipeline bool
	staleAfter              time.Duration
	ui                      *pages
}

// New builds the role from serve's dependencies.
func New(ctx context.Context, d *serve.Deps, s Settings) (*Role, error) {
	log := d.Log.With("role", RoleName)
	r := &Role{
		log: log, deps: d, settings: s,
		inbox:        d.Inbox,
		outbox:       outbox.NewStore(d.DB, nil),
		fleet:        ingest.NewStore(d.DB),
		pipeline:     pipeline.NewStore(d.DB, nil),
		sessions:     operators.NewSessions(d.DB, s.SessionTTL),
		withFleet:    slices.Contains(d.Roles, ingest.RoleName),
		withPipeline: slices.Contains(d.Roles, pipelinerole.RoleName),
		staleAfter:   ingest.BoundSettings().StaleAfter,
	}
	if r.staleAfter <= 0 {
		r.staleAfter = 90 * time.Second
	}
	r.tail = &ingest.API{Store: r.fleet, Log: log, StaleAfter: r.staleAfter,
		Poll: 500 * time.Millisecond, Heartbeat: 15 * time.Second, WriteTimeout: 10 * time.Second}
	if r.withPipeline {
		objs, err := pipelinerole.OpenStorage(ctx, pipelinerole.Settings().Storage, d.StateDir, d.DB, d.Keys)
		if err != nil {
			return nil, fmt.Errorf("console: report storage: %w", err)
		}
		if rd, ok := objs.(objstore.Reader); ok {
			r.reports = rd
		}
	}
	r.history = newHistory(log, d, r)
	r.ui = newPages(r)
	return r, nil
}

// Name is "console".
func (r *Role) Name() string { return RoleName }

// Run samples the chart history until ctx is done.
func (r *Role) Run(ctx context.Context) error {
	if !slices.Contains(r.deps.Roles, serve.RoleAPI) {
		r.log.Info("console not served: the api role is not enabled in this process")
		<-ctx.Done()
		return nil
	}
	err := r.history.Run(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// MountRoutes implements serve.RouteMounter.
func (r *Role) MountRoutes(e *echo.Echo) {
	r.ui.mount(e)
}

// db is the shared database.
func (r *Role) db() *sqldb.DB { return r.deps.DB }
