package pipelinerole

import (
	"context"
	"fmt"
	"github.com/vesta-cx/euterpe/central/operators"
	"os"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/edgedaily"
	"github.com/vesta-cx/euterpe/central/pipeline/objstore"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"golang.org/x/sync/errgroup"
)

// RoleName is the role's name in EUTERPE_CENTRAL_ROLES.
const RoleName = "pipeline"

// Role is the pipeline in one pod.
type Role struct {
	Store     *pipeline.Store
	Worker    *pipeline.Worker
	Scheduler *pipeline.Scheduler
	API       *pipeline.API
	auth      echo.MiddlewareFunc
}

// Name is RoleName.
func (*Role) Name() string { return RoleName }

// Run runs the worker and the scheduler.
func (r *Role) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { defer r.Store.Wait(); return r.Worker.Run(gctx) })
	g.Go(func() error { return r.Scheduler.Run(gctx) })
	return g.Wait()
}

// MountRoutes adds the operator API.
func (r *Role) MountRoutes(e *echo.Echo) { r.API.Mount(e, r.auth) }

// OpenAPI is the API's fragment.
func (*Role) OpenAPI() []byte { return pipeline.OpenAPI() }

// ReadyChecks are §6's: the queue (a write transaction can be taken) and
// the repo (the jobs table answers).
func (r *Role) ReadyChecks() []daemon.Check {
	return []daemon.Check{{Name: "queue", Probe: r.Store.Ping}, {Name: "repo", Probe: r.Store.RepoPing}}
}

// bound holds the settings Definition declared, for the
// `euterpe-central pipeline …` commands that share them.
var bound = Defaults()

// Settings returns the pipeline settings as parsed (after the process
// configuration's Parse).
func Settings() Config { return bound }

// Definition registers the role: on by default.
func Definition() serve.Definition {
	return serve.Definition{
		Name:      RoleName,
		DefaultOn: true,
		Settings:  bound.Bind,
		New: func(d *serve.Deps) (serve.Role, error) {
			return New(context.Background(), bound, d)
		},
	}
}

// Types builds the job type registry of cfg: edge_daily and the
// configured external types.
func Types(ctx context.Context, cfg Config, d *serve.Deps) (*pipeline.Registry, error) {
	objs, err := OpenStorage(ctx, cfg.Storage, d.StateDir, d.DB, d.Keys)
	if err != nil {
		return nil, err
	}
	types := pipeline.NewRegistry()
	if err := types.Register(edgedaily.Type(d.DB, objs)); err != nil {
		return nil, err
	}
	ext, err := pipeline.ParseTypes(cfg.Types, cfg.TypeTimeout, nil)
	if err != nil {
		return nil, &daemon.SettingError{Setting: "EUTERPE_PIPELINE_TYPES", Value: cfg.Types, Reason: err.Error()}
	}
	for _, t := range ext {
		if x, ok := t.Runner.(pipeline.Exec); ok {
			// A missing program would only show as STAGE_UNAVAILABLE
			// retries ending in the DLQ: refuse it at start instead.
			if st, err := os.Stat(x.Path); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
				return nil, &daemon.SettingError{Setting: "EUTERPE_PIPELINE_TYPES", Value: cfg.Types, Reason: "job type " + t.Name + ": " + x.Path + " is not an executable file"}
			}
			x.Logger = d.Log
			t.Runner = x
		}
		if err := types.Register(t); err != nil {
			return nil, &daemon.SettingError{Setting: "EUTERPE_PIPELINE_TYPES", Value: cfg.Types, Reason: err.Error()}
		}
	}
	return types, nil
}

// OpenStorage opens the report store a setting names; S3 credentials are
// the keyring-sealed ones `euterpe-central pipeline storage-credentials` saved.
func OpenStorage(ctx context.Context, spec, stateDir string, db *sqldb.DB, keys *credentials.Keyring) (objstore.Store, error) {
	switch {
	case spec == "":
		return objstore.Dir{Path: StorageDir(stateDir)}, nil
	case strings.HasPrefix(spec, "s3://"):
		ak, sk, err := pipeline.OpenSecret(ctx, db, keys, pipeline.StorageSecret)
		if err != nil {
			return nil, fmt.Errorf("EUTERPE_PIPELINE_STORAGE is an S3 URL but its credentials cannot be read (set them with `euterpe-central pipeline storage-credentials --access-key-id ID` with the secret on stdin): %w", err)
		}
		return objstore.NewS3(spec, objstore.Credentials{AccessKeyID: ak, SecretAccessKey: sk})
	}
	return objstore.Dir{Path: spec}, nil
}

// New builds the role from the shared dependencies.
func New(ctx context.Context, cfg Config, d *serve.Deps) (*Role, error) {
	log := d.Log.With("role", RoleName)
	store := pipeline.NewStore(d.DB, nil)
	store.MaxAttempts = cfg.MaxAttempts
	store.Backoff = lease.Backoff{Base: cfg.BackoffBase, Cap: cfg.BackoffMax}
	store.UpstreamWait = cfg.UpstreamWait
	store.Log = log
	if err := store.LeaseQueue().Validate(); err != nil {
		return nil, err
	}
	if d.Metrics != nil {
		store.Metrics = pipeline.NewMetrics(d.Metrics, store)
	} else {
		store.Metrics = pipeline.NewMetrics(nil, nil)
	}
	types, err := Types(ctx, cfg, d)
	if err != nil {
		return nil, err
	}
	store.Types = types
	if err := store.ClaimOnly(types.Names()); err != nil {
		return nil, err
	}
	w := pipeline.NewWorker(store, types, pipeline.WorkerConfig{ID: d.WorkerID, Visibility: cfg.Visibility, Concurrency: cfg.Concurrency, Poll: cfg.Poll})
	store.OnSubmit = w.Wake
	at, _ := pipeline.ParseSchedule(cfg.Schedule)
	syms, _ := pipeline.ParseSymbols(cfg.Symbols)
	entries := []pipeline.ScheduleEntry{{JobType: edgedaily.Name, Symbols: pipeline.EdgeSymbols(d.DB)}}
	for _, name := range types.Names() {
		if list := syms[name]; len(list) > 0 {
			entries = append(entries, pipeline.ScheduleEntry{JobType: name, Symbols: pipeline.FixedSymbols(list)})
		}
	}
	for name := range syms {
		if _, ok := types.Get(name); !ok {
			return nil, &daemon.SettingError{Setting: "EUTERPE_PIPELINE_SYMBOLS", Value: cfg.Symbols, Reason: "job type " + name + " is not registered"}
		}
	}
	sched := &pipeline.Scheduler{Store: store, At: at, CatchupDays: cfg.CatchupDays, Entries: entries, Log: log}
	api := &pipeline.API{Store: store, Log: log, Attempts: 4, Budget: cfg.EnqueueTimeout,
		Backoff: lease.Backoff{Base: cfg.EnqueueTimeout / 16, Cap: cfg.EnqueueTimeout / 4}}
	auth := d.OperatorAuth
	if d.Operators != nil && cfg.AuthCache > 0 {
		// Submits come in bursts from one or two operators: a verified
		// token is remembered for AuthCache (docs/pipeline.md).
		auth = operators.Auth(operators.NewCache(d.Operators, cfg.AuthCache))
	}
	return &Role{Store: store, Worker: w, Scheduler: sched, API: api, auth: auth}, nil
}
