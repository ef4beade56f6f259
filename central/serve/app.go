package serve

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"golang.org/x/sync/errgroup"
)

// Settings are the core settings of euterpe-central.
type Settings struct {
	Addr           string
	DatabaseURL    string
	StateDir       string
	LogLevel       string
	Roles          string
	Keyring        string
	KeyringActive  string
	IdempotencyTTL time.Duration
	Retention      time.Duration
	MaxAttempts    int
	// MaxRefreshAttempts is the per-job credential-refresh budget
	// (inbox.Policy.MaxRefreshAttempts), enforced when a runner counts one.
	MaxRefreshAttempts int
	// RetryBackoff and RateLimitedBackoff are the inbox retry buckets
	// (inbox.Policy.Backoff and RateLimited): exponential backoff with full
	// jitter, base and cap set by the operator.
	RetryBackoffBase, RetryBackoffMax             time.Duration
	RateLimitedBackoffBase, RateLimitedBackoffMax time.Duration
	ShutdownGrace                                 time.Duration
	SweepInterval                                 time.Duration
	// AllowPrivate lifts the outbound address policy (central/ssrf) for
	// every role and the API alike: webhook deliveries, refresh calls,
	// storage requests and the enqueue check of callback URLs.
	AllowPrivate bool
}

// App is the composition: the roles and migration sets the program has.
type App struct {
	defs       []Definition
	migrations []sqldb.Migrations
}

// NewApp returns an App with the core schema and no roles beyond the
// built-in api and sweeper.
func NewApp() *App {
	return &App{migrations: []sqldb.Migrations{schema.Migrations(), operators.Migrations()}}
}

// Register adds a role definition. Names must be unique.
func (a *App) Register(d Definition) {
	for _, x := range a.defs {
		if x.Name == d.Name {
			panic("serve: role " + d.Name + " registered twice")
		}
	}
	a.defs = append(a.defs, d)
}

// AddMigrations adds a migration set applied after the core schema by
// `migrate` and at `serve` start.
func (a *App) AddMigrations(m sqldb.Migrations) { a.migrations = append(a.migrations, m) }

// Migrations lists every set, core first.
func (a *App) Migrations() []sqldb.Migrations { return a.migrations }

// Builtin role names.
const (
	RoleAPI     = "api"
	RoleSweeper = "sweeper"
)

// Bind declares the core settings and every registered role's settings on c.
func (a *App) Bind(c *daemon.Config, s *Settings) {
	c.String(&s.Addr, "addr", "EUTERPE_CENTRAL_ADDR", "127.0.0.1:8090", "HTTP listen address", daemon.CheckHostPort)
	c.String(&s.DatabaseURL, "database-url", "EUTERPE_DATABASE_URL", "", "postgres://… or sqlite:PATH[?synchronous=full]; empty: <state-dir>/central.db", sqldb.CheckURL, daemon.Secret())
	c.String(&s.StateDir, "state-dir", "EUTERPE_STATE_DIR", daemon.DefaultStateDir("euterpe-central"), "directory for the embedded database and local KEK", daemon.CheckAbsPath)
	c.String(&s.LogLevel, "log-level", "EUTERPE_LOG_LEVEL", "info", "debug, info, warn or error", daemon.CheckOneOf("debug", "info", "warn", "error"))
	c.String(&s.Roles, "roles", "EUTERPE_CENTRAL_ROLES", "", "comma-separated roles to run; empty: every default role ("+strings.Join(a.defaultRoles(), ",")+")", a.checkRoles)
	c.String(&s.Keyring, "keyring", "EUTERPE_KEYRING", "", "credential KEKs: kek_id:base64(32 bytes)[,…]; required with Postgres", nil, daemon.Secret())
	c.String(&s.KeyringActive, "keyring-active", "EUTERPE_KEYRING_ACTIVE", "", "kek_id that seals new credentials (default: first in the keyring)", nil)
	c.Duration(&s.IdempotencyTTL, "idempotency-ttl", "EUTERPE_IDEMPOTENCY_TTL", idempotency.DefaultTTL, time.Minute, 30*24*time.Hour, "how long Idempotency-Key values are remembered")
	c.Duration(&s.Retention, "job-retention", "EUTERPE_JOB_RETENTION", 30*24*time.Hour, 0, 10*365*24*time.Hour, "finished jobs older than this are pruned (status answers 410); 0 keeps them")
	c.Int(&s.MaxAttempts, "max-attempts", "EUTERPE_MAX_ATTEMPTS", 5, 1, 100, "execution attempts before a job is dead-lettered")
	c.Int(&s.MaxRefreshAttempts, "max-refresh-attempts", "EUTERPE_MAX_REFRESH_ATTEMPTS", inbox.DefaultPolicy().MaxRefreshAttempts, 0, 100,
		"credential refreshes (refresh_url calls) a job may request over its life; then storage auth failures are retried like other errors")
	def := inbox.DefaultPolicy()
	c.Duration(&s.RetryBackoffBase, "retry-backoff-base", EnvRetryBackoffBase, def.Backoff.Base, time.Millisecond, time.Hour,
		"ceiling of the first retry delay of a failed job attempt (exponential backoff, full jitter)")
	c.Duration(&s.RetryBackoffMax, "retry-backoff-max", EnvRetryBackoffMax, def.Backoff.Cap, time.Millisecond, 7*24*time.Hour,
		"largest retry delay of a failed job attempt")
	c.Duration(&s.RateLimitedBackoffBase, "retry-rate-limited-base", EnvRateLimitedBase, def.RateLimited.Base, time.Millisecond, 24*time.Hour,
		"least retry delay after a 429 (the larger bucket; jitter is added on top)")
	c.Duration(&s.RateLimitedBackoffMax, "retry-rate-limited-max", EnvRateLimitedMax, def.RateLimited.Cap, time.Millisecond, 7*24*time.Hour,
		"largest retry delay after a 429")
	c.Check(s.checkRetry)
	c.Duration(&s.ShutdownGrace, "shutdown-grace", "EUTERPE_SHUTDOWN_GRACE", 20*time.Second, 0, 10*time.Minute, "time in-flight requests get to finish on shutdown")
	c.Duration(&s.SweepInterval, "sweep-interval", "EUTERPE_SWEEP_INTERVAL", 30*time.Second, 100*time.Millisecond, time.Hour, "how often expired leases, keys and old jobs are swept")
	c.Bool(&s.AllowPrivate, "webhook-allow-private", ssrf.EnvAllowPrivate, false,
		"allow webhook, refresh and storage URLs on loopback/private/link-local addresses (development and tests only)")
	for _, d := range a.defs {
		if d.Settings != nil {
			d.Settings(c)
		}
	}
}

func (a *App) allRoles() []string {
	out := []string{RoleAPI, RoleSweeper}
	for _, d := range a.defs {
		out = append(out, d.Name)
	}
	return out
}

func (a *App) defaultRoles() []string {
	out := []string{RoleAPI, RoleSweeper}
	for _, d := range a.defs {
		if d.DefaultOn {
			out = append(out, d.Name)
		}
	}
	return out
}

func (a *App) checkRoles(v string) error {
	for _, r := range splitList(v) {
		if !slices.Contains(a.allRoles(), r) {
			return fmt.Errorf("unknown role %q (known: %s)", r, strings.Join(a.allRoles(), ", "))
		}
	}
	return nil
}

// Retry settings (environment names), checked together by checkRetry.
const (
	EnvRetryBackoffBase = "EUTERPE_RETRY_BACKOFF_BASE"
	EnvRetryBackoffMax  = "EUTERPE_RETRY_BACKOFF_MAX"
	EnvRateLimitedBase  = "EUTERPE_RETRY_RATE_LIMITED_BASE"
	EnvRateLimitedMax   = "EUTERPE_RETRY_RATE_LIMITED_MAX"
)

// checkRetry is the cross-setting check of the retry buckets: each cap must
// not be below its base.
func (s *Settings) checkRetry() error {
	switch {
	case s.RetryBackoffMax < s.RetryBackoffBase:
		return &daemon.SettingError{Setting: EnvRetryBackoffMax, Value: s.RetryBackoffMax.String(), Reason: "must not be below " + EnvRetryBackoffBase}
	case s.RateLimitedBackoffMax < s.RateLimitedBackoffBase:
		return &daemon.SettingError{Setting: EnvRateLimitedMax, Value: s.RateLimitedBackoffMax.String(), Reason: "must not be below " + EnvRateLimitedBase}
	}
	return nil
}

// InboxPolicy is the inbox retry policy of s: the contract's defaults with
// the attempt ceilings and backoff buckets the operator configured.
func (s Settings) InboxPolicy() inbox.Policy {
	p := inbox.DefaultPolicy()
	p.MaxAttempts = s.MaxAttempts
	p.MaxRefreshAttempts = s.MaxRefreshAttempts
	p.Backoff.Base, p.Backoff.Cap = s.RetryBackoffBase, s.RetryBackoffMax
	p.RateLimited.Base, p.RateLimited.Cap = s.RateLimitedBackoffBase, s.RateLimitedBackoffMax
	return p
}

// Policy is the one outbound address policy of the process, built from
// EUTERPE_WEBHOOK_ALLOW_PRIVATE (flag or environment).
func (s Settings) Policy() ssrf.Policy { return ssrf.Policy{AllowPrivate: s.AllowPrivate} }

// Enabled resolves the role list of s.
func (a *App) Enabled(s Settings) []string {
	if strings.TrimSpace(s.Roles) == "" {
		return a.defaultRoles()
	}
	return splitList(s.Roles)
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// ErrKeyringRequired stops serve on Postgres without a configured keyring.
var ErrKeyringRequired = errors.New("EUTERPE_KEYRING is required with a Postgres database (kek_id:base64-32-byte-key[,…]); generate a key with `euterpe-central keys generate`")

// OpenKeyring loads the configured keyring or, for the embedded SQLite
// database only, the local KEK file (created on first use, logged once).
func OpenKeyring(s Settings, engine sqldb.Engine, log *slog.Logger) (*credentials.Keyring, error) {
	if s.Keyring != "" {
		k, err := credentials.ParseKeyring(s.Keyring, s.KeyringActive)
		if err != nil {
			return nil, &daemon.SettingError{Setting: "EUTERPE_KEYRING", Value: "[REDACTED]", Reason: hideKeysAsIDs(err.Error(), s.Keyring)}
		}
		if n := k.KeyLikeIDs(); n > 0 {
			log.Warn("EUTERPE_KEYRING has entries whose kek_id is itself a key (logged and stored beside what it sealed): they only open what they sealed; run `euterpe-central keys rewrap`, then drop them",
				"entries", n)
		}
		return k, nil
	}
	if engine == sqldb.Postgres {
		return nil, ErrKeyringRequired
	}
	k, created, err := credentials.LoadOrCreateLocal(s.StateDir)
	if err != nil {
		return nil, err
	}
	if created {
		log.Warn("no EUTERPE_KEYRING configured: created a local key-encryption key for the embedded database; configure a keyring for production",
			"path", filepath.Join(s.StateDir, credentials.LocalKeyFile))
	}
	return k, nil
}

// hideKeysAsIDs removes from msg, a keyring parse error, every id of spec
// that is key material: the parser names ids, and an entry written the
// wrong way round (base64key:kek_id) has the key where the id belongs.
// Anything that decodes as base64 to 16 bytes or more is taken for one; a
// real id that long only goes unnamed.
func hideKeysAsIDs(msg, spec string) string {
	for _, part := range strings.Split(spec, ",") {
		id, _, _ := strings.Cut(part, ":")
		if id = strings.TrimSpace(id); keyLike(id) {
			msg = strings.ReplaceAll(msg, id, "[REDACTED]")
		}
	}
	return msg
}

func keyLike(s string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) >= 16 {
			return true
		}
	}
	return false
}

// ValidateQueues checks the lease queues of the core schema — the inbox's
// and the outbox's — against their state machines (lease.Queue.Validate),
// so a lease spec that contradicts its transition table stops serve at
// start, before any migration or claim.
func ValidateQueues(db *sqldb.DB, jobs *inbox.Store) error {
	outbox := &lease.Queue{DB: db, Spec: schema.OutboxLease, Machine: schema.OutboxTransitions}
	for _, q := range []*lease.Queue{jobs.Queue(), outbox} {
		if err := q.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// databaseSetting names the setting that chose the database, so a start
// that cannot open it says which line of the unit or env file to check.
func databaseSetting(s Settings) string {
	if s.DatabaseURL != "" {
		return "database (EUTERPE_DATABASE_URL)"
	}
	return "embedded database in EUTERPE_STATE_DIR=" + s.StateDir + " (EUTERPE_DATABASE_URL is empty)"
}

// Open opens and migrates the database and builds the shared dependencies.
// close releases them.
func (a *App) Open(ctx context.Context, s Settings, log *slog.Logger, getenv func(string) string) (d *Deps, closeFn func(), err error) {
	if err := checkFormerStateDir(s, centralStateDir, formerStateDir); err != nil {
		return nil, nil, fmt.Errorf("state directory (EUTERPE_STATE_DIR): %w", err)
	}
	db, err := sqldb.Open(ctx, s.DatabaseURL, s.StateDir)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", databaseSetting(s), err)
	}
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	keys, err := OpenKeyring(s, db.Engine, log)
	if err != nil {
		return nil, nil, err
	}
	jobs := inbox.New(db, keys, s.InboxPolicy())
	if err := ValidateQueues(db, jobs); err != nil {
		return nil, nil, err
	}
	// The inbox's first reading of the database clock waits for a
	// connection of its own; made now, it never waits inside a request's
	// transaction for a pool that transactions hold (lease.Queue.Time).
	jobs.Now()
	applied, err := sqldb.Migrate(ctx, db, a.migrations...)
	if err != nil {
		return nil, nil, err
	}
	if len(applied) > 0 {
		log.Info("database migrated", "engine", string(db.Engine), "applied", applied)
	}
	d = &Deps{
		DB:         db,
		Keys:       keys,
		Inbox:      jobs,
		Requesters: requesters.New(db, keys),
		Operators:  operators.New(db),
		Log:        log,
		WorkerID:   daemon.WorkerID(getenv),
		Getenv:     getenv,
		StateDir:   s.StateDir,
		Metrics:    prometheus.NewRegistry(),
		Policy:     s.Policy(),
	}
	d.Auth = api.Auth(d.Requesters)
	d.OperatorAuth = operators.Auth(d.Operators)
	return d, func() { closeDB(log, db, dbCloseWait) }, nil
}

// Serve runs the enabled roles until ctx is done or one fails.
func (a *App) Serve(ctx context.Context, s Settings, d *Deps) error {
	log := d.Log
	enabled := a.Enabled(s)
	d.Roles = enabled
	if d.Metrics == nil {
		d.Metrics = prometheus.NewRegistry()
	}
	var roles []Role
	var routes []RouteMounter
	var checks []daemon.Check
	var fragments [][]byte
	executes := false
	// Until the roles run (their Run releases what they hold), a failure
	// closes the ones built, and the listener.
	running := false
	var ln net.Listener
	defer func() {
		if !running {
			if ln != nil {
				_ = ln.Close()
			}
			closeRoles(log, roles)
		}
	}()
	for _, def := range a.defs {
		if !slices.Contains(enabled, def.Name) {
			continue
		}
		r, err := def.New(d)
		if err != nil {
			return fmt.Errorf("role %s: %w", def.Name, err)
		}
		roles = append(roles, r)
		executes = executes || def.Executes
		if m, ok := r.(RouteMounter); ok {
			routes = append(routes, m)
		}
		if oc, ok := r.(OpenAPIContributor); ok {
			fragments = append(fragments, oc.OpenAPI())
		}
		if rr, ok := r.(ReadinessReporter); ok {
			checks = append(checks, rr.ReadyChecks()...)
		}
		if w, ok := r.(interface{ Wake() }); ok {
			d.Inbox.OnEvents(w.Wake)
		}
	}
	if slices.Contains(enabled, RoleSweeper) {
		roles = append(roles, &Sweeper{Deps: d, Interval: s.SweepInterval, Retention: s.Retention,
			Keys: idempotency.New(d.DB, s.IdempotencyTTL, d.Inbox.Now)})
	}
	if !executes {
		log.Warn("no executor role is enabled: accepted transcode jobs stay queued until a process with one runs",
			"roles", strings.Join(enabled, ","))
	}
	if slices.Contains(enabled, RoleAPI) {
		var err error
		if ln, err = daemon.Listen("EUTERPE_CENTRAL_ADDR", s.Addr); err != nil {
			return err
		}
		e := daemon.NewEcho(log, daemon.WithOutage(sqldb.OutageReason))
		dbCheck := daemon.Check{Name: "database", Probe: d.DB.Ping}
		daemon.MountHealth(e, append([]daemon.Check{dbCheck}, checks...)...)
		if err := register(d.Metrics, NewQueueCollector(d.DB, log)); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		daemon.MountMetrics(e, d.Metrics)
		doc, err := api.Merge(api.OpenAPI, fragments...)
		if err != nil {
			return err
		}
		api.New(api.Config{DB: d.DB, Inbox: d.Inbox, Requesters: d.Requesters, Document: doc,
			Idempotency: idempotency.New(d.DB, s.IdempotencyTTL, d.Inbox.Now), Log: log, CheckURL: d.Policy.CheckURL}).Mount(e)
		for _, m := range routes {
			m.MountRoutes(e)
		}
		srv := daemon.NewHTTPServer(e)
		// The fleet's event streams stay open until their client leaves;
		// ended at the stop, they no longer hold it for the whole grace.
		daemon.EndStreamsAtShutdown(e, srv)
		roles = append(roles, RoleFunc{RoleName: RoleAPI, Fn: func(ctx context.Context) error {
			err := daemon.ServeUntil(ctx, srv, ln, s.ShutdownGrace)
			if errors.Is(err, daemon.ErrRequestsCut) {
				log.Warn("HTTP requests were cut at the end of the shutdown grace", "grace", s.ShutdownGrace.String(), "err", err)
				return nil
			}
			return err
		}})
		log.Info("listening", "addr", ln.Addr().String())
	}
	// Every pod speaks sd_notify, not only one with the api role: under
	// Type=notify a runner-only pod would otherwise never be ready and be
	// killed at TimeoutStartSec. The watchdog follows the database, which
	// every role needs.
	notifier := daemon.NewNotifier(log)
	wctx, stopWatchdog := context.WithCancel(ctx)
	watchdogDone := make(chan struct{})
	go func() { defer close(watchdogDone); notifier.Watchdog(wctx, d.DB.Ping) }()
	defer func() { stopWatchdog(); <-watchdogDone }()
	log.Info("euterpe-central started", "version", daemon.Version, "worker_id", d.WorkerID,
		"engine", string(d.DB.Engine), "roles", strings.Join(enabled, ","))
	notifier.Ready()
	g, gctx := errgroup.WithContext(ctx)
	running = true
	live := newLiveRoles(roles)
	for i, r := range roles {
		g.Go(func() error {
			defer live.stopped(i)
			if err := r.Run(gctx); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("role %s: %w", r.Name(), err)
			}
			return nil
		})
	}
	// STOPPING=1 as soon as the stop begins (a signal, or a role that
	// failed), not once the roles have used up the grace finishing their
	// work: systemd then shows the unit deactivating.
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		<-gctx.Done()
		notifier.Stopping()
	}()
	err := waitRoles(gctx, g, live, log, stopDeadline(s.ShutdownGrace))
	<-announced
	return err
}

// closeRoles closes the built roles that hold resources, last built first
// (a later role may use an earlier one's parts). A failure is logged:
// serve is stopping for another reason, which is the one to report.
func closeRoles(log *slog.Logger, roles []Role) {
	for i := len(roles) - 1; i >= 0; i-- {
		if c, ok := roles[i].(Closer); ok {
			if err := c.Close(); err != nil {
				log.Warn("closing a role that never ran", "role", roles[i].Name(), "err", err)
			}
		}
	}
}
