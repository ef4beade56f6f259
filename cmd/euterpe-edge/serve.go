package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/console"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// serveSettings are the daemon-wide settings of `serve`; the gateway's own
// and every plugin's are declared on the same Config.
type serveSettings struct {
	Addr      string
	RedisURL  string
	RedisPool int
	StateDir  string
	Grace     time.Duration
	LogLevel  string
	Origins   string
	Dumpable  bool
	Gateway   gateway.Settings
}

func newServeConfig(getenv func(string) string) (*daemon.Config, *serveSettings) {
	cfg := daemon.NewConfig("euterpe-edge serve", getenv)
	s := &serveSettings{}
	cfg.String(&s.Addr, "addr", "EUTERPE_EDGE_ADDR", "127.0.0.1:8070", "HTTP listen address", daemon.CheckHostPort)
	cfg.String(&s.RedisURL, "redis-url", "EUTERPE_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis server URL", checkRedisURL, daemon.Secret())
	cfg.Int(&s.RedisPool, "redis-pool-size", "EUTERPE_REDIS_POOL_SIZE", 6, 2, 1024, "connections in the shared Redis pool (the SSE reader adds one)")
	cfg.String(&s.StateDir, "state-dir", "EUTERPE_STATE_DIR", daemon.DefaultStateDir("euterpe"), "directory for persistent state", daemon.CheckAbsPath)
	// At least a second: the components need a moment to return even with
	// nothing in flight, and a stop that waits for none would be reported
	// as components that did not stop.
	cfg.Duration(&s.Grace, "shutdown-grace", "EUTERPE_SHUTDOWN_GRACE", 10*time.Second, time.Second, 10*time.Minute, "time in-flight work gets to finish on shutdown")
	cfg.String(&s.LogLevel, "log-level", "EUTERPE_LOG_LEVEL", "info", "log level: debug, info, warn, error", daemon.CheckOneOf("debug", "info", "warn", "error"))
	cfg.String(&s.Origins, "trusted-origins", "EUTERPE_TRUSTED_ORIGINS", "",
		"comma-separated origins (scheme://host[:port]) whose browsers may POST besides the daemon's own and whose host names it answers to, e.g. a proxy in front of the console", console.CheckOrigins)
	daemon.DeclareDumpable(cfg, &s.Dumpable)
	s.Gateway.Declare(cfg)
	for _, p := range plugins {
		if p.Settings != nil {
			p.Settings(cfg)
		}
	}
	cfg.Check(s.validate)
	return cfg, s
}

func checkRedisURL(v string) error {
	if _, err := redis.ParseURL(v); err != nil {
		return errors.New("not a redis:// or rediss:// URL")
	}
	return nil
}

func serve(parent context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	cfg, s := newServeConfig(getenv)
	err := cfg.Parse(args)
	if err == nil {
		err = cfg.NoArgs()
	}
	if errors.Is(err, flag.ErrHelp) {
		cfg.Usage(stderr)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "euterpe-edge:", err)
		return 2
	}
	log, err := daemon.NewLogger(stderr, s.LogLevel)
	if err != nil {
		fmt.Fprintln(stderr, "euterpe-edge:", err)
		return 2
	}
	// What logs through slog's default or the standard log (a library's
	// fallback, net/http) is then a JSON line with secrets redacted too.
	slog.SetDefault(log)
	cfg.WarnSecretFlags(log)
	cfg.WarnMisspelledEnv(log, os.Environ())
	if err := daemon.ApplyDumpable(log, s.Dumpable); err != nil {
		fmt.Fprintln(stderr, "euterpe-edge:", err)
		return 1
	}
	if err := runDaemon(parent, log, s, getenv); err != nil {
		// A setting refused only once the components are built (a program
		// EUTERPE_TASK_BACKENDS names is missing, a library root is gone)
		// stops the daemon like one refused at parse: one line, exit 2,
		// which systemd does not restart (RestartPreventExitStatus=2).
		var se *daemon.SettingError
		if errors.As(err, &se) {
			fmt.Fprintln(stderr, "euterpe-edge:", daemon.CapMessage(daemon.RedactURL(err.Error())))
			return 2
		}
		log.Error("euterpe-edge stopped", "err", err)
		return 1
	}
	return 0
}

func runDaemon(parent context.Context, log *slog.Logger, s *serveSettings, getenv func(string) string) error {
	ctx, stop := daemon.SignalContext(parent)
	defer stop()
	logRedisNotices(log)

	opt, err := redis.ParseURL(s.RedisURL)
	if err != nil {
		return fmt.Errorf("EUTERPE_REDIS_URL: %w", err)
	}
	opt.PoolSize = s.RedisPool
	opt.ClientName = "euterpe-edge"
	// The shared pool (gateway, SSE catch-up) and its fan-out reader are
	// named euterpe-edge-gw[-sse] in CLIENT LIST; components that copy
	// RedisOpt for clients of their own show up as euterpe-edge.
	gwOpt := *opt
	gwOpt.ClientName = "euterpe-edge-gw"
	rdb := redis.NewClient(&gwOpt)
	defer rdb.Close()
	store := jobs.NewStore(rdb)
	ping := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }

	// A stable identity: the worker pool's consumer name must survive restarts.
	workerID, err := daemon.PersistentWorkerID(getenv, s.StateDir)
	if errors.Is(err, daemon.ErrIdentityNotKept) {
		// Jobs come first: this run's consumer name holds until it stops,
		// and the one the next start leaves behind is recovered like a
		// crashed consumer (EUTERPE_CLAIM_IDLE, EUTERPE_CONSUMER_MAX_IDLE).
		log.Warn("the worker identity cannot be kept in the state directory; this run uses its own, the next start takes another consumer name (set HOSTNAME to fix it)",
			"worker_id", workerID, "err", daemon.CapMessage(err.Error()))
	} else if err != nil {
		// A worker-id that is there but cannot be read or is damaged
		// fails every restart alike: only the operator can mend it.
		return &daemon.SettingError{Setting: "EUTERPE_STATE_DIR", Value: s.StateDir, Reason: err.Error()}
	}
	reg := prometheus.NewRegistry()
	deps := Deps{Log: log, Redis: rdb, RedisOpt: opt, Jobs: store, StateDir: s.StateDir, WorkerID: workerID, Metrics: reg, Parts: &Parts{}}
	comps, err := buildComponents(ctx, log, plugins, deps, named{"gateway", gateway.New(log, s.Gateway, store, &gwOpt)})
	if err != nil {
		return err
	}
	// Until the components run, a failure below closes them; once they
	// ran, they are closed after they stopped and HTTP has drained.
	running := false
	defer func() {
		if !running {
			closeComponents(log, comps)
		}
	}()

	e := daemon.NewEcho(log)
	// Browsers must not be made to POST here from other sites: the API
	// has no credentials, so whoever reaches the port may act, and a page
	// elsewhere could otherwise reach it through the operator's browser.
	xorigin, err := console.CrossOriginList(s.Origins)
	if err != nil {
		return &daemon.SettingError{Setting: "EUTERPE_TRUSTED_ORIGINS", Value: s.Origins, Reason: err.Error()}
	}
	// Nor may a page elsewhere reach it by DNS rebinding, which makes it
	// that page's own origin (console.KnownHosts).
	host, _ := os.Hostname()
	known, err := console.KnownHostsList(s.Origins, host)
	if err != nil {
		return &daemon.SettingError{Setting: "EUTERPE_TRUSTED_ORIGINS", Value: s.Origins, Reason: err.Error()}
	}
	e.Use(known, xorigin)
	checks := []daemon.Check{{Name: "redis", Probe: ping}}
	for _, c := range comps {
		if ch, ok := c.c.(checker); ok {
			checks = append(checks, ch.Checks()...)
		}
	}
	daemon.MountHealth(e, checks...)
	daemon.MountMetrics(e, reg)
	for _, c := range comps {
		c.c.Mount(e)
	}

	ln, err := daemon.Listen("EUTERPE_EDGE_ADDR", s.Addr)
	if err != nil {
		return err
	}

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	// Outcomes travel on a channel with room for all, so a component that
	// stops after runDaemon gave up on it never blocks, and nothing is
	// shared with it but the channel.
	type outcome struct {
		name string
		err  error
	}
	outcomes := make(chan outcome, len(comps))
	running = true
	for _, c := range comps {
		go func() {
			err := c.c.Run(runCtx)
			if err != nil && runCtx.Err() != nil {
				err = nil // an error caused by the shutdown is not a failure
			}
			outcomes <- outcome{c.name, err}
			if err != nil {
				cancelRun()
			}
		}()
	}
	notifier := daemon.NewNotifier(log)
	watchdog := make(chan struct{})
	go func() {
		defer close(watchdog)
		notifier.Watchdog(runCtx, ping)
	}()
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		<-runCtx.Done()
		notifier.Stopping()
		log.Info("shutting down", "grace", s.Grace.String())
	}()

	notifier.Ready()
	log.Info("serving", "addr", ln.Addr().String(), "version", daemon.Version, "components", len(comps))
	srv := daemon.NewHTTPServer(e)
	// Event streams stay open until their client leaves; ended at the
	// stop, they do not hold the HTTP shutdown for the whole grace.
	daemon.EndStreamsAtShutdown(e, srv)
	serveErr := daemon.ServeUntil(runCtx, srv, ln, s.Grace)
	if errors.Is(serveErr, daemon.ErrRequestsCut) {
		log.Warn("HTTP requests were cut at the end of the shutdown grace", "grace", s.Grace.String(), "err", serveErr)
		serveErr = nil
	}
	cancelRun()
	// Neither can block once runCtx is done.
	<-watchdog
	<-announced

	var failed error
	live := make(map[string]bool, len(comps))
	for _, c := range comps {
		live[c.name] = true
	}
	deadline := time.NewTimer(s.Grace)
	defer deadline.Stop()
	for len(live) > 0 {
		select {
		case o := <-outcomes:
			delete(live, o.name)
			if o.err != nil && failed == nil {
				failed = fmt.Errorf("%s: %w", o.name, o.err)
			}
		case <-deadline.C:
			// Their goroutines cannot be stopped from here; returning an
			// error makes the process exit, which ends them, rather than
			// report a clean stop with work still running.
			names := slices.Sorted(maps.Keys(live))
			log.Warn("components did not stop within the shutdown grace", "components", strings.Join(names, ","))
			if failed == nil {
				failed = fmt.Errorf("%s did not stop within the shutdown grace (%s)", strings.Join(names, ", "), s.Grace)
			}
			return failed
		}
	}
	// Only now: a request still being answered at the stop (a library
	// listing) needs the database its component's Run has stopped using.
	closeComponents(log, comps)
	if failed != nil {
		return failed
	}
	return serveErr
}
