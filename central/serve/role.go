package serve

import (
	"context"
	"log/slog"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Role is one loop of the central process. Run blocks until ctx is done
// (return nil) or the role fails (return the error; the process stops).
type Role interface {
	Name() string
	Run(ctx context.Context) error
}

// RouteMounter is implemented by enabled roles that add HTTP routes to the
// API server; MountRoutes is called before the server starts.
type RouteMounter interface {
	MountRoutes(e *echo.Echo)
}

// OpenAPIContributor is implemented by roles whose routes are documented in
// an OpenAPI fragment of their own (paths and component schemas only);
// serve merges every enabled role's fragment into /openapi.json.
type OpenAPIContributor interface {
	OpenAPI() []byte
}

// Closer is implemented by roles holding resources (a scratch lock, a
// file, a pool) that their Run releases when it ends. A role built but
// never run (a later role failed to build, or serve failed before starting
// the roles, such as on a listen address already taken) is closed instead:
// Close is then the only call it gets.
type Closer interface {
	Close() error
}

// A role with a Wake() method is woken after every commit that wrote outbox
// events (the dispatcher).

// ReadinessReporter is implemented by roles whose dependencies /ready
// should report (e.g. object storage, ffmpeg).
type ReadinessReporter interface {
	ReadyChecks() []daemon.Check
}

// Deps are what serve builds once and hands to every role factory.
type Deps struct {
	DB         *sqldb.DB
	Keys       *credentials.Keyring
	Inbox      *inbox.Store
	Requesters *requesters.Store
	Operators  *operators.Store
	Log        *slog.Logger
	WorkerID   string
	// Getenv reads the process environment (roles read their own
	// EUTERPE_* settings through it; tests pass a map).
	Getenv func(string) string
	// StateDir is the local state directory.
	StateDir string
	// Roles are the roles enabled in this process (set by Serve before any
	// role is built), for a role whose routes depend on another's, such as
	// the console's fleet pages on the sync role.
	Roles []string
	// Auth is the API-key middleware; a route a role mounts behind it reads
	// the caller with api.Requester(c).
	Auth echo.MiddlewareFunc
	// OperatorAuth is the operator-token middleware of the operator API
	// (fleet, pipeline); read the caller with operators.FromContext(c).
	// Requesters' API keys do not pass it.
	OperatorAuth echo.MiddlewareFunc
	// Metrics is the process's Prometheus registry, served at GET /metrics
	// by the api role; roles register their series on it in New.
	Metrics *prometheus.Registry
	// Policy is the outbound address policy (EUTERPE_WEBHOOK_ALLOW_PRIVATE,
	// flag or environment), the same for every role and the API's check of
	// callback URLs: roles build their HTTP clients and dialers from it.
	Policy ssrf.Policy
}

// Factory builds a role from the shared dependencies.
type Factory func(d *Deps) (Role, error)

// Definition registers a role with the composition.
type Definition struct {
	Name string
	// Executes marks a role that executes inbox jobs (moves them out of
	// queued). Without one, serve warns that jobs stay queued.
	Executes bool
	// DefaultOn: the role runs unless EUTERPE_CENTRAL_ROLES leaves it out.
	DefaultOn bool
	// Settings, when set, declares the role's EUTERPE_* settings on the
	// process configuration, so they are validated before anything starts.
	Settings func(c *daemon.Config)
	New      Factory
}

// RoleFunc adapts a function to Role.
type RoleFunc struct {
	RoleName string
	Fn       func(ctx context.Context) error
}

// Name is the role's name.
func (r RoleFunc) Name() string { return r.RoleName }

// Run runs the function.
func (r RoleFunc) Run(ctx context.Context) error { return r.Fn(ctx) }
